"""Bad and odd Darshan input: real odd logs, corrupted copies, hostile darshan-parser text.

A bad input gives an error naming the file and the problem; the job's other logs still give
their points; nothing raises out of collect_darshan."""

from __future__ import annotations

import gzip
import os
import random
import string
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan, read_text
from hpcmon.post_job.darshan.model import IO_MODULES
from hpcmon.post_job.darshan.signals import compute_signals
from hpcmon.post_job.darshan.signals_text import signal_lines
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.problems import SourceError
from tests.post_job.darshan_helpers import (
    EMPTY,
    HDF5_DXT,
    IMBALANCED,
    LOGS,
    MPI_IO_TEST,
    SKEW,
    as_parser_prints,
    log_path,
    text_path,
)

JOB = JobContext("777", "testcluster")


def measurements(output, name):
    return [p for p in output.points if p.measurement == name]


def test_bad_files_are_named_and_the_good_logs_still_give_points(tmp_path):
    good = log_path(MPI_IO_TEST)
    data = good.read_bytes()
    empty = tmp_path / "empty.darshan"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.darshan"
    truncated.write_bytes(data[: len(data) // 2])
    garbage = tmp_path / "garbage.darshan"
    garbage.write_bytes(bytes(range(256)) * 8)
    missing = tmp_path / "missing.darshan"
    bad_text = tmp_path / "notes.txt"
    bad_text.write_text("hello\nthis is not darshan-parser output\n")
    output = collect_darshan(
        [empty, good, truncated, garbage, missing], [bad_text, text_path(SKEW)], JOB
    )
    joined = "\n".join(output.errors)
    for bad in (empty, truncated, garbage, missing, bad_text):
        assert str(bad) in joined, f"no error names {bad}"
    jobs = measurements(output, "darshan_job")
    # the "# jobid:" header lines of the two logs
    assert sorted(p.fields["log_jobid"] for p in jobs) == ["3171794", "4211020700"]
    assert all(
        p.tags["jobid"] == "777" and p.tags["cluster"] == "testcluster" for p in output.points
    )


def test_truncated_copies_at_many_lengths_never_raise(tmp_path):
    data = log_path(MPI_IO_TEST).read_bytes()
    paths = []
    for fraction in (0.05, 0.3, 0.55, 0.7, 0.8, 0.9, 0.97, 0.995):
        path = tmp_path / f"cut{fraction}.darshan"
        path.write_bytes(data[: int(len(data) * fraction)])
        paths.append(path)
    output = collect_darshan(paths, [], JOB)
    for path in paths:
        assert str(path) in "\n".join(output.errors), f"truncation of {path.name} went unnoticed"


def test_flipped_bytes_never_raise_and_are_reported(tmp_path):
    data = bytearray(log_path(MPI_IO_TEST).read_bytes())
    rng = random.Random(4)
    paths = []
    for number in range(8):
        copy = bytearray(data)
        for _ in range(16):
            position = rng.randrange(1400, len(copy))  # past the header: damage the modules
            copy[position] ^= 0xFF
        path = tmp_path / f"flip{number}.darshan"
        path.write_bytes(bytes(copy))
        paths.append(path)
    output = collect_darshan(paths, [], JOB)
    reported = [p for p in paths if str(p) in "\n".join(output.errors)]
    assert len(reported) >= 6  # zlib checksums catch damage in compressed regions


def test_empty_log_gives_a_job_point_with_zero_totals_binary_and_text():
    for output in (
        collect_darshan([log_path(EMPTY)], [], JOB),
        collect_darshan([], [text_path(EMPTY)], JOB),
    ):
        assert output.errors == []
        (job,) = measurements(output, "darshan_job")
        assert job.fields["total_bytes_read"] == 0 and job.fields["nprocs"] == 4
        assert measurements(output, "darshan_module") == []
        assert job.time_ns == 1677270046 * 10**9


def test_partial_module_is_a_warning_and_still_ingested():
    output = collect_darshan([log_path(IMBALANCED)], [], JOB)
    assert output.errors == []
    (warning,) = output.warnings
    assert "partial" in warning and "POSIX" in warning and str(log_path(IMBALANCED)) in warning
    posix = [p for p in measurements(output, "darshan_module") if p.tags["module"] == "POSIX"]
    assert posix[0].fields["partial"] is True and posix[0].fields["records"] == 2014
    (job,) = measurements(output, "darshan_job")
    assert job.fields["partial_modules"] == "POSIX"


def test_2048_rank_log_and_dxt_log():
    output = collect_darshan([log_path(SKEW), log_path(HDF5_DXT)], [], JOB)
    assert output.errors == []
    nprocs = sorted(p.fields["nprocs"] for p in measurements(output, "darshan_job"))
    assert nprocs == [10, 2048]
    modules = {p.tags["module"] for p in measurements(output, "darshan_module")}
    assert {"H5F", "H5D", "POSIX"} <= modules
    assert not any("DXT" in m for m in modules)


def test_unknown_module_and_bad_lines_in_text_keep_the_rest(tmp_path):
    original = text_path(MPI_IO_TEST).read_text()
    extra = "FOO\t0\t123\tFOO_READS\t4\t/x\t/\text4\nPOSIX\t0\tnot-a-number\tPOSIX_READS\t1\n"
    broken = tmp_path / "broken.txt"
    broken.write_text(original + extra + "POSIX\t0\t5\tPOSIX_READS\t")
    output = collect_darshan([], [broken], JOB)
    joined = "\n".join(output.errors)
    assert "a module unknown to this reader skipped" in joined and str(broken) in joined
    assert "FOO" not in joined and "not-a-number" not in joined  # no byte of the file
    assert "malformed counter line" in joined and "bad record id" in joined
    reference = collect_darshan([], [text_path(MPI_IO_TEST)], JOB)
    per_log = [p for p in output.points if p.measurement != "job_diagnosis"]  # per job
    assert {p.tags.pop("log") for p in per_log} == {"broken"}
    assert {p.tags.pop("log") for p in reference.points if "log" in p.tags} == {MPI_IO_TEST}
    kept = {p.to_line() for p in measurements(output, "darshan_module")}
    assert kept == {p.to_line() for p in measurements(reference, "darshan_module")}


def test_log_with_only_modules_without_io_counters_is_flagged(tmp_path):
    # a DXT-only or LUSTRE-only log: header regions list only modules that carry no signal
    lines = text_path(MPI_IO_TEST).read_text().splitlines()
    kept = [
        ln
        for ln in lines
        if not (ln.startswith("# ") and " module: " in ln and not ln.startswith("# LUSTRE"))
        and not ln.startswith(("POSIX\t", "MPI-IO\t", "STDIO\t", "HEATMAP\t"))
    ]
    path = tmp_path / "lustre_only.txt"
    path.write_text("\n".join(kept) + "\n")
    output = collect_darshan([], [path], JOB)
    (error,) = output.errors
    assert str(path) in error and "no module with I/O counters (only LUSTRE)" in error
    assert len(measurements(output, "darshan_job")) == 1


_FOLDED = ("darshan_record", "darshan_rank")


def test_text_without_start_time_is_flagged(tmp_path):
    lines = text_path(SKEW).read_text().splitlines()
    path = tmp_path / "no_start.txt"
    path.write_text("\n".join(ln for ln in lines if not ln.startswith("# start_time")) + "\n")
    output = collect_darshan([], [path], JOB)
    assert output.errors == [f"{path}: no '# start_time:' header line; points are stamped 0"]
    # every point at 0, but the records and ranks that fold into one series (at 0 + k ns)
    assert {p.time_ns for p in output.points if p.measurement not in _FOLDED} == {0}
    for point in output.points:
        assert point.time_ns is not None and point.time_ns < 10**6


def test_perf_summary_text_is_rejected_with_a_hint():
    path = text_path(SKEW).with_name(f"{SKEW}.perf_file_total.txt")
    output = collect_darshan([], [path], JOB)
    assert output.points == []
    (error,) = output.errors
    assert str(path) in error and "no counter lines" in error and "--base" in error


def test_repeated_lines_overwrite_instead_of_adding_up(tmp_path):
    lines = text_path(MPI_IO_TEST).read_text().splitlines()
    doubled = tmp_path / "doubled.txt"
    doubled.write_text("\n".join(lines + [ln for ln in lines if ln and ln[0] != "#"]) + "\n")

    def body(path):
        log = read_text(path)
        return [ln for ln in signal_lines(log.job, compute_signals(log)) if ln[:1] != "#"]

    assert body(doubled) == body(text_path(MPI_IO_TEST))


# ---- hypothesis: hostile darshan-parser text ---------------------------------------------

_HEADER = "# darshan log version: 3.41\n# nprocs: 4\n# start_time: 100\n# end_time: 160\n"
_GOOD_COUNTERS = [
    "POSIX_READS",
    "POSIX_WRITES",
    "POSIX_BYTES_READ",
    "POSIX_BYTES_WRITTEN",
    "POSIX_F_READ_TIME",
    "POSIX_F_WRITE_TIME",
    "POSIX_F_META_TIME",
]

good_line = st.builds(
    lambda rank, rid, counter, value: f"POSIX\t{rank}\t{rid}\t{counter}\t{value}\t/f{rid}\t/\text4",
    st.integers(-1, 7),
    st.integers(1, 5),
    st.sampled_from(_GOOD_COUNTERS),
    st.integers(0, 10**12),
)
garbage_line = st.one_of(
    st.text(alphabet=string.printable, max_size=60).filter(lambda s: not s.startswith("#")),
    st.builds(
        lambda v: f"POSIX\t0\t1\tPOSIX_READS\t{v}",
        st.sampled_from(["nan", "inf", "-", "1e400", "0x10", ""]),
    ),
    st.builds(
        lambda r: f"POSIX\t{r}\t1\tPOSIX_READS\t1",
        st.sampled_from(["x", "99999999999999999999", "-5"]),
    ),
    st.just("POSIX\t0\t18446744073709551616\tPOSIX_READS\t1"),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(st.one_of(good_line, garbage_line), max_size=40))
def test_hostile_text_never_raises_and_keeps_good_lines(tmp_path, lines):
    path = tmp_path / "hostile.txt"
    path.write_text(_HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    output = collect_darshan([], [path], JOB)
    assert all(str(path) in error for error in output.errors)
    good_keys = {(int(ln.split("\t")[1]), int(ln.split("\t")[2])) for ln in lines if _is_good(ln)}
    records = {
        (str(p.fields["rank"]), p.fields["record_id"])
        for p in output.points
        if p.measurement == "darshan_record"
    }
    assert {(str(r), str(i)) for r, i in good_keys} <= records
    assert all(-1 <= int(rank) < 2**31 for rank, _ in records)
    assert len(measurements(output, "darshan_job")) == 1


def _is_good(line: str) -> bool:
    parts = line.split("\t")
    return (
        len(parts) == 8
        and parts[0] == "POSIX"
        and parts[3] in _GOOD_COUNTERS
        and parts[4].isdigit()
    )


@settings(max_examples=30, deadline=None)
@given(blob=st.binary(max_size=3000))
def test_random_bytes_as_text_never_raise(blob):
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "blob.txt"
        path.write_bytes(blob)
        output = collect_darshan([], [path], JOB)
        assert output.errors and all(str(path) in e for e in output.errors)
        assert output.points == []


# ---- the reader child: one per call, replaced after a crash, a hang or a damaged log --------


def _body(log):
    """The signal lines, without the header block (a binary log has it only when asked)."""
    return [ln for ln in signal_lines(log.job, compute_signals(log)) if ln and ln[:1] != "#"]


def _same_body_as_text(binary_log, text_log) -> None:
    """Binary logs keep full precision, darshan-parser text prints 6 decimals: rounded the
    way the parser prints, the binary log gives the text's signals bit for bit."""
    assert _body(as_parser_prints(binary_log)) == _body(text_log)


def test_logs_after_damaged_logs_are_read_by_a_fresh_child_and_are_intact(tmp_path):
    from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_logs_isolated
    from hpcmon.post_job.problems import SourceError

    data = log_path(MPI_IO_TEST).read_bytes()
    cuts = []
    for size in (1500, 1600):  # darshan-util 3.5 mostly segfaults on these (not always)
        path = tmp_path / f"cut{size}.darshan"
        path.write_bytes(data[:size])
        cuts.append(path)
    empty = tmp_path / "empty.darshan"
    empty.write_bytes(b"")
    order = [cuts[0], log_path(MPI_IO_TEST), cuts[1], log_path(SKEW), empty, log_path(MPI_IO_TEST)]
    results = list(read_darshan_logs_isolated(order))
    assert [path for path, _ in results] == order
    for path in (cuts[0], cuts[1], empty):
        (outcome,) = [o for p, o in results if p == path]
        # an error, or what could be read plus problems (the crash may come at log close)
        found = [str(outcome)] if isinstance(outcome, SourceError) else outcome.problems
        assert found and all(str(path) in message for message in found)
    good = [o for p, o in results if p in (log_path(MPI_IO_TEST), log_path(SKEW))]
    assert all(not isinstance(o, Exception) and o.problems == [] for o in good)
    reference = read_text(text_path(MPI_IO_TEST))  # the same log through the text reader
    assert _body(good[0]) == _body(good[2])
    _same_body_as_text(good[0], reference)
    _same_body_as_text(good[1], read_text(text_path(SKEW)))


def test_a_crash_costs_only_the_log_being_read(monkeypatch):
    # darshan-util's crashes on damaged logs are not reproducible byte for byte, so this test
    # makes the read of one chosen log die of SIGSEGV inside the child
    import os
    import signal

    from hpcmon.post_job.darshan import reader_pydarshan

    real_open = reader_pydarshan._open_report

    def crashing_open(path):
        if path.name == f"{SKEW}.darshan":
            os.kill(os.getpid(), signal.SIGSEGV)
        return real_open(path)

    monkeypatch.setattr(reader_pydarshan, "_open_report", crashing_open)
    reader_pydarshan.close_reader_child()  # the next child is forked with the patch in place
    order = [log_path(MPI_IO_TEST), log_path(SKEW), log_path(MPI_IO_TEST)]
    first, crashed, after = reader_pydarshan.read_darshan_logs_isolated(order)
    message = f"{log_path(SKEW)}: PyDarshan crashed with signal SIGSEGV reading the log"
    assert str(crashed[1]) == message
    assert _body(first[1]) == _body(after[1])
    _same_body_as_text(first[1], read_text(text_path(MPI_IO_TEST)))
    reader_pydarshan.close_reader_child()  # no patched child left for the other tests


def test_a_hung_read_is_killed_and_named():
    from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_logs_isolated
    from hpcmon.post_job.problems import SourceError

    ((path, outcome),) = read_darshan_logs_isolated([log_path(IMBALANCED)], timeout=1e-4)
    assert isinstance(outcome, SourceError)
    assert str(outcome).startswith(f"{path}: PyDarshan did not finish within 0 s")


def test_gzipped_text_gives_the_points_of_the_plain_text(tmp_path):
    plain = text_path(MPI_IO_TEST)
    zipped = tmp_path / f"{MPI_IO_TEST}.txt.gz"  # same stem: same ``log`` tag
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    expected = collect_darshan([], [plain], JOB)
    got = collect_darshan([], [zipped], JOB)
    assert got.errors == [e.replace(str(plain), str(zipped)) for e in expected.errors]
    assert [p.to_line() for p in got.points] == [p.to_line() for p in expected.points]
    assert len(got.points) > 0


def test_truncated_or_corrupt_gzipped_text_is_named_and_costs_only_itself(tmp_path):
    packed = gzip.compress(text_path(SKEW).read_bytes())
    truncated = tmp_path / "truncated.txt.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    corrupt = tmp_path / "corrupt.txt.gz"
    corrupt.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    output = collect_darshan([], [truncated, corrupt, text_path(MPI_IO_TEST)], JOB)
    assert f"{truncated}: gzip stream is truncated after" in output.errors[0]
    assert any(e.startswith(f"{corrupt}: corrupt gzip data") for e in output.errors)
    assert len(measurements(output, "darshan_job")) == 2  # the truncated prefix and the good log


def test_the_reader_child_is_kept_for_later_calls_and_replaced_after_a_crash():
    from hpcmon.post_job.darshan import reader_pydarshan

    reader_pydarshan.close_reader_child()
    list(reader_pydarshan.read_darshan_logs_isolated([log_path(MPI_IO_TEST)]))
    child = reader_pydarshan._CHILD
    assert child is not None and child.pid
    list(reader_pydarshan.read_darshan_logs_isolated([log_path(SKEW)]))
    assert reader_pydarshan._CHILD is child  # no second fork
    import os
    import signal
    import time

    os.kill(child.pid, signal.SIGKILL)  # the child dies between calls: a new one is forked
    time.sleep(0.2)
    ((_, first), (_, second)) = reader_pydarshan.read_darshan_logs_isolated(
        [log_path(MPI_IO_TEST), log_path(SKEW)]
    )
    assert not isinstance(first, Exception) and not isinstance(second, Exception)
    assert reader_pydarshan._CHILD is not child


def test_files_refused_before_darshan_util_leave_the_reader_child_in_use(tmp_path):
    """An empty, foreign or missing file, or a FIFO, is refused by the child before darshan-util
    opens it (``_NotALog``): the error names it, and the same child reads the next log."""
    from hpcmon.post_job.darshan import reader_pydarshan

    empty = tmp_path / "empty.darshan"
    empty.write_bytes(b"")
    foreign = tmp_path / "foreign.darshan"
    foreign.write_bytes(b"PK\x03\x04 not a log")
    fifo = tmp_path / "fifo.darshan"
    os.mkfifo(fifo)
    missing = tmp_path / "missing.darshan"
    list(reader_pydarshan.read_darshan_logs_isolated([log_path(SKEW)]))
    child = reader_pydarshan._CHILD
    outcomes = dict(
        reader_pydarshan.read_darshan_logs_isolated(
            [empty, foreign, fifo, missing, log_path(MPI_IO_TEST)]
        )
    )
    assert str(outcomes[empty]) == f"{empty}: empty file, not a Darshan log"
    assert str(outcomes[foreign]) == f"{foreign}: not a Darshan log: bad magic (no version header)"
    assert str(outcomes[fifo]).startswith(f"{fifo}: not a regular file")
    assert str(outcomes[missing]).startswith(f"{missing}: ")
    for path in (empty, foreign, fifo, missing):
        assert type(outcomes[path]) is SourceError  # the child's own class stays inside
    log = outcomes[log_path(MPI_IO_TEST)]
    assert not isinstance(log, Exception) and log.problems == []
    assert reader_pydarshan._CHILD is child  # no fork for files darshan-util never saw


@pytest.mark.parametrize("stem", sorted(p.stem for p in LOGS.glob("*.darshan")))
def test_the_report_read_without_its_mount_table_is_pydarshans_report(stem):
    """The reader opens logs with DarshanReport less its mount table (``_report_class``),
    which re-implements ``read_metadata``: what it keeps must stay what PyDarshan reads (a
    PyDarshan release that reads more there fails here), and the mount table read when the
    header is asked for (``_mounts``) is PyDarshan's."""
    import darshan

    from hpcmon.post_job.darshan import reader_pydarshan

    path = str(log_path(stem))
    with darshan.DarshanReport(path, read_all=False) as theirs:
        with reader_pydarshan._report_class()(path, read_all=False) as ours:
            assert ours.metadata == theirs.metadata
            assert ours.modules == theirs.modules
            assert ours.data.keys() | {"mounts"} == theirs.data.keys()
            assert reader_pydarshan._mounts(ours) == theirs.mounts
            for module in theirs.modules:
                if module in IO_MODULES:
                    ours.mod_read_all_records(module, warnings=False)
                    theirs.mod_read_all_records(module, warnings=False)
                    expected = theirs.records[module].to_df()
                    got = ours.records[module].to_df()
                    assert got.keys() == expected.keys()
                    for part, frame in expected.items():
                        pd.testing.assert_frame_equal(got[part], frame)
