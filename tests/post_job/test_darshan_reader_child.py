"""The PyDarshan reader child reads ahead: it is sent the next logs while the caller works on
the ones handed back. A crash, a hang or a complaint of darshan-util while it reads or closes
a log must still cost only that log, with the same messages as when it read one log at a time.

darshan-util's crashes on damaged logs are not reproducible byte for byte, so these tests make
the child misbehave on chosen logs (the patches are in place before the child is forked)."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import time
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan, reader_pydarshan
from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_log, read_darshan_logs_isolated
from hpcmon.post_job.darshan.signals import compute_signals
from hpcmon.post_job.darshan.signals_text import signal_lines
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.problems import SourceError
from tests.post_job.darshan_helpers import IOR_POSIX, MPI_IO_TEST, SKEW, log_path

JOB = JobContext("778", "testcluster")
FIRST, SECOND, THIRD = log_path(MPI_IO_TEST), log_path(SKEW), log_path(IOR_POSIX)


def _body(log) -> list[str]:
    return [line for line in signal_lines(log.job, compute_signals(log)) if line[:1] != "#"]


@cache
def _expected(path: Path) -> list[str]:
    """The log's signals as read in this process (before any patch)."""
    return _body(read_darshan_log(path))


def _intact(outcome, path: Path) -> None:
    """``outcome`` is the whole log at ``path``, without problems."""
    assert not isinstance(outcome, Exception), outcome
    assert outcome.problems == []
    assert _body(outcome) == _expected(path)


@pytest.fixture
def misbehave(monkeypatch):
    """misbehave(path_name, on_open=..., on_close=...): what the next forked child does when it
    opens or closes that log (after its real open, before its real close)."""
    for path in (FIRST, SECOND, THIRD):
        _expected(path)
    real_open = reader_pydarshan._open_report

    class _Report:  # the real report, with a close that first does ``on_close``
        def __init__(self, report, on_close) -> None:
            self._report, self._on_close = report, on_close

        def __getattr__(self, name: str):
            return getattr(self._report, name)

        def __exit__(self, *exc) -> None:
            self._on_close()
            self._report.__exit__(*exc)

    def install(name: str, on_open=None, on_close=None) -> None:
        def patched_open(path: Path):
            if path.name != name:
                return real_open(path)
            if on_open is not None:
                on_open()
            report = real_open(path)
            return _Report(report, on_close) if on_close is not None else report

        monkeypatch.setattr(reader_pydarshan, "_open_report", patched_open)
        reader_pydarshan.close_reader_child()  # the next child is forked with the patch

    yield install
    reader_pydarshan.close_reader_child()  # no patched child left for the other tests


def _complain(text: str):
    return lambda: os.write(2, f"{text}\n".encode())


def test_a_crash_while_reading_ahead_costs_only_that_log(misbehave):
    misbehave(SECOND.name, on_open=lambda: os.kill(os.getpid(), signal.SIGSEGV))
    reading = read_darshan_logs_isolated([FIRST, SECOND, THIRD])
    path, first = next(reading)
    child = reader_pydarshan._CHILD
    assert child is not None
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it crashed reading ahead
    _intact(first, FIRST)  # handed back before: nothing of the crash on it
    path, crashed = next(reading)
    assert path == SECOND
    assert str(crashed) == f"{SECOND}: PyDarshan crashed with signal SIGSEGV reading the log"
    path, third = next(reading)
    assert reader_pydarshan._CHILD is not child  # read by a fresh child
    _intact(third, THIRD)
    assert next(reading, None) is None


def test_stderr_written_while_reading_ahead_lands_on_its_own_log(misbehave, monkeypatch):
    misbehave(SECOND.name, on_open=_complain("module data of the second log truncated"))
    real_problems = reader_pydarshan._ReaderChild._problems

    def late_problems(self, *args):  # the parent reads the first log's stderr only once the
        time.sleep(0.3)  # child wrote the second log's complaint after it
        return real_problems(self, *args)

    monkeypatch.setattr(reader_pydarshan._ReaderChild, "_problems", late_problems)
    results = list(read_darshan_logs_isolated([FIRST, SECOND, THIRD]))
    assert [path for path, _ in results] == [FIRST, SECOND, THIRD]
    _intact(results[0][1], FIRST)
    second = results[1][1]
    assert not isinstance(second, SourceError), second
    assert second.problems == [f"{SECOND}: darshan-util: module data of the second log truncated"]
    assert _body(second) == _expected(SECOND)
    _intact(results[2][1], THIRD)


def test_a_close_complaint_lands_on_its_log_and_the_next_log_gets_a_fresh_child(misbehave):
    misbehave(FIRST.name, on_close=_complain("darshan_log_close: bad region map"))
    reading = read_darshan_logs_isolated([FIRST, SECOND])
    _, first = next(reading)
    assert not isinstance(first, SourceError), first
    assert first.problems == [f"{FIRST}: darshan-util: darshan_log_close: bad region map"]
    assert _body(first) == _expected(FIRST)  # the data sent before the close
    assert reader_pydarshan._CHILD is None  # the child that complained is gone, with the
    _, second = next(reading)  # second log it was reading ahead: a fresh child reads it
    _intact(second, SECOND)
    # and in the hook: that problem among the job's errors, in the first log's place
    output = collect_darshan([FIRST, SECOND], [], JOB)
    assert output.errors == [f"{FIRST}: darshan-util: darshan_log_close: bad region map"]


def test_a_crash_at_close_keeps_the_data_and_names_the_close(misbehave):
    misbehave(FIRST.name, on_close=lambda: os.kill(os.getpid(), signal.SIGABRT))
    (_, first), (_, second), (_, third) = read_darshan_logs_isolated([FIRST, SECOND, THIRD])
    assert not isinstance(first, SourceError), first
    assert first.problems == [f"{FIRST}: darshan-util crashed with signal SIGABRT closing the log"]
    assert _body(first) == _expected(FIRST)
    _intact(second, SECOND)
    _intact(third, THIRD)


def test_a_hang_while_reading_ahead_is_killed_at_its_timeout(misbehave):
    misbehave(SECOND.name, on_open=lambda: time.sleep(60))
    reading = read_darshan_logs_isolated([FIRST, SECOND, THIRD], timeout=1.0)
    _, first = next(reading)
    _intact(first, FIRST)
    time.sleep(1.5)  # the caller works longer than the timeout: the hung log is due already
    asked = time.monotonic()
    path, hung = next(reading)
    assert time.monotonic() - asked < 30  # killed, not waited for (it sleeps 60 s)
    assert path == SECOND and isinstance(hung, SourceError)
    assert str(hung) == f"{SECOND}: PyDarshan did not finish within 1 s reading the log"
    _, third = next(reading)
    _intact(third, THIRD)


@pytest.mark.slow  # waits out timeouts: not in `make check`
def test_the_timeout_counts_from_when_the_child_could_start_the_log(misbehave):
    misbehave(SECOND.name, on_open=lambda: time.sleep(0.2))  # slow, well within the timeout
    reading = read_darshan_logs_isolated([FIRST, SECOND], timeout=2.0)
    _, first = next(reading)
    time.sleep(2.5)  # the caller is slower than the timeout: the log read ahead is not late
    _, second = next(reading)
    _intact(first, FIRST)
    _intact(second, SECOND)


@pytest.mark.parametrize("spin", [True, False])
def test_a_wait_that_spins_first_still_ends_at_its_deadline(spin: bool) -> None:
    """Spinning before sleeping changes when a wait notices data, never what it answers."""
    from multiprocessing import Pipe

    ours, theirs = Pipe(duplex=True)
    poller = reader_pydarshan._poller(ours)
    started = time.monotonic()
    assert not reader_pydarshan._wait(poller, started + 0.3, spin)  # nothing comes: False ...
    assert time.monotonic() - started >= 0.3  # ... at the deadline, not before
    assert not reader_pydarshan._wait(poller, started, spin)  # a deadline already past
    theirs.send("log")
    assert reader_pydarshan._wait(poller, None, spin)
    assert ours.recv() == "log"
    theirs.close()  # the other end gone: the wait ends and the read says so
    assert reader_pydarshan._wait(poller, None, spin)
    with pytest.raises(EOFError):
        ours.recv()


def test_the_cpus_to_spin_on_are_known_without_linux_affinity(monkeypatch) -> None:
    assert reader_pydarshan._cpus() == len(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")  # as on macOS
    assert reader_pydarshan._cpus() == (os.cpu_count() or 1)


def test_a_call_left_early_does_not_hand_its_logs_to_the_next_call():
    reading = read_darshan_logs_isolated([FIRST, SECOND, THIRD])
    next(reading)
    busy = reader_pydarshan._CHILD
    del reading  # two logs were sent ahead and never collected
    ((path, log),) = read_darshan_logs_isolated([THIRD])
    assert path == THIRD
    _intact(log, THIRD)
    assert reader_pydarshan._CHILD is not busy


def test_a_process_forked_while_logs_are_read_ahead_reads_with_its_own_child():
    reading = read_darshan_logs_isolated([FIRST, SECOND, THIRD])
    _, first = next(reading)
    receive, send = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process: the parent's reader child is not its own
        try:
            os.close(receive)
            ((_, log),) = read_darshan_logs_isolated([THIRD])
            os.write(send, json.dumps(_body(log)).encode())
        finally:
            os._exit(0)
    os.close(send)
    with os.fdopen(receive) as answer:
        forked_body = json.loads(answer.read() or "null")
    os.waitpid(pid, 0)
    assert forked_body == _expected(THIRD)
    (_, second), (_, third) = reading  # this process's logs read ahead are still whole
    _intact(first, FIRST)
    _intact(second, SECOND)
    _intact(third, THIRD)


# ---- heatmap bins are sent compactly (non-zero ones only when sparse); the parent gets them whole


@st.composite
def _bin_matrices(draw) -> np.ndarray:
    ranks, bins = draw(st.integers(0, 12)), draw(st.integers(0, 12))  # 0 bins: a hostile log
    if bins and draw(st.booleans()):  # big enough to be sent sparse
        least = math.ceil(reader_pydarshan._SPARSE_FROM / bins)
        ranks = draw(st.integers(least, least + 100))
    values = st.one_of(
        st.just(0),  # heatmaps are mostly empty
        st.integers(1, 2**32 - 1),
        st.integers(-(2**63), 2**63 - 1),  # not seen in real logs: sent as they are
    )
    matrix = np.zeros(ranks * bins, dtype=np.int64)
    some = draw(st.lists(st.tuples(st.integers(0, max(0, matrix.size - 1)), values), max_size=60))
    for position, value in some if matrix.size else ():
        matrix[position] = value
    if draw(st.booleans()):  # most bins busy
        matrix[matrix == 0] = draw(values)
    return matrix.reshape(ranks, bins)


@given(_bin_matrices())
def test_heatmap_bins_come_back_exactly(bins):
    sent = reader_pydarshan._compact(bins)
    got = pickle.loads(pickle.dumps(sent)).matrix()
    assert got.dtype == np.int64 and got.shape == bins.shape
    assert np.array_equal(got, bins)


def test_sparse_heatmap_bins_are_sent_as_their_non_zero_bins():
    bins = np.zeros((512, 114), dtype=np.int64)
    bins[:, 7] = 316072  # one busy bin per rank, as in e3sm_io_heatmap_only
    sparse = pickle.dumps(reader_pydarshan._compact(bins))
    small = reader_pydarshan._compact(bins[:4])  # a few ranks: sent whole all the same
    bins[:, 8:] = 1  # most bins busy: sent whole
    dense = pickle.dumps(reader_pydarshan._compact(bins))
    assert len(sparse) < 512 * 8 + 1000 < 512 * 114 * 4 < len(dense)
    assert small.positions is None and small.values.shape == (4, 114)


def _gone(pid: int) -> bool:
    """The process exited (a zombie left to whoever adopted it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_reader_child_whose_caller_died_reads_no_further_log(monkeypatch, tmp_path):
    opened = tmp_path / "opened"
    real_open = reader_pydarshan._open_report

    def recording_open(path: Path):
        with opened.open("a") as record:
            record.write(f"{path.name}\n")
        if path == SECOND:
            time.sleep(1.0)  # the caller dies meanwhile, with two more logs sent ahead
        return real_open(path)

    monkeypatch.setattr(reader_pydarshan, "_open_report", recording_open)
    receive, send = os.pipe()
    caller = os.fork()
    if caller == 0:  # a caller that takes the first log and is killed
        try:
            reader_pydarshan.close_reader_child()
            reading = read_darshan_logs_isolated([FIRST, SECOND, THIRD, FIRST])
            next(reading)
            child = reader_pydarshan._CHILD
            assert child is not None
            os.write(send, str(child.pid).encode())
        finally:
            os._exit(0)
    os.close(send)
    with os.fdopen(receive) as answer:
        reader = int(answer.read())
    os.waitpid(caller, 0)
    deadline = time.monotonic() + 30
    while not _gone(reader) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(reader)  # it could not send the log it was reading, and stopped there
    assert opened.read_text().split() == [FIRST.name, SECOND.name]


def test_a_heatmap_of_zero_bins_costs_nothing_else_of_the_log() -> None:
    """A hostile HEATMAP whose ranks hold no bin at all: sent and unpacked as it is, and the
    log's module points are still made (it used to fail the whole log with a ValueError)."""
    from hpcmon.post_job.darshan import points_of_logs

    log = read_darshan_log(log_path("treddy_runtime_heatmap_inactive_ranks"))
    assert log.heatmaps
    ranks = np.array(sorted({h.rank for h in log.heatmaps}), dtype=np.int64)
    empty = np.zeros((len(ranks), 0), dtype=np.int64)
    sent = reader_pydarshan._PackedHeatmap(
        "STDIO",
        log.heatmaps[0].record_id,
        0.1,
        ranks,
        reader_pydarshan._compact(empty),
        reader_pydarshan._compact(empty),
    )
    log.heatmaps = pickle.loads(pickle.dumps(sent)).unpack()
    assert log.heatmaps and all(len(h.read_bins) == 0 for h in log.heatmaps)
    output = points_of_logs([log], JobContext("1"))
    assert not output.errors
    measurements = {p.measurement for p in output.points}
    assert {"darshan_job", "darshan_module", "darshan_heatmap"} <= measurements
    assert "darshan_heatmap_bin" not in measurements
