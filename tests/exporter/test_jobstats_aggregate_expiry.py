"""--jobstats.aggregate=server when a job's entry expires on one target while it lives on
others (Lustre's job_cleanup_interval), or one of its quoted/unquoted twins does: the summed
counters never go down, and their increase is what the entries really grew by.

The entries are a real Lustre 2.14 capture (DDN OST) with the job id, times and write
numbers changed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.collector import JobstatsCollector
from tests.exporter.test_jobstats_collector import DDN_OST, make_collector, samples_of, value

GIB = 1 << 30
PROMTOOL = shutil.which("promtool")
_CAPTURE = DDN_OST.read_text()
_FIRST = _CAPTURE.index("- job_id:")
ENTRY = _CAPTURE[_FIRST : _CAPTURE.index("- job_id:", _FIRST + 1)]  # SLURM_JOB10's
WRITE_BYTES = re.compile(r"(write_bytes: +\{ samples: +)\d+(.*? sum: +)\d+")


def entry(jobid: str, snapshot: float, start: float, written: int) -> str:
    """The capture's first entry, as job ``jobid`` having written ``written`` bytes (in
    blocks of 1 MiB, so samples and sum grow together)."""
    text = ENTRY.replace('"SLURM_JOB10:0:es18kxe-co-client"', jobid)
    text = re.sub(r"snapshot_time: +\S+", f"snapshot_time:   {snapshot:.9f}", text)
    text = re.sub(r"start_time: +\S+", f"start_time:      {start:.9f}", text)
    text = re.sub(r"elapsed_time: +\S+", f"elapsed_time:    {snapshot - start:.9f}", text)
    text, count = WRITE_BYTES.subn(rf"\g<1>{-(-written // (1 << 20))}\g<2>{written}", text)
    assert count == 1
    return text


def sample_at(collector: JobstatsCollector, clock: float) -> bytes:
    """One sample read at wall clock ``clock``: the rates' clock is the time of the read
    (here the entries' snapshot_time, as if each had just been updated)."""
    with mock.patch("hpcmon.exporter.jobstats.collector.time.time", return_value=clock):
        return collector.sample()


def write_ost(path: Path, index: int, *entries: str) -> None:
    path.write_text(f"obdfilter.fs-OST{index:04x}.job_stats=\njob_stats:\n" + "".join(entries))


def server_flags(glob: str) -> list[str]:
    return ["--jobstats.source=file", f"--jobstats.path={glob}", "--jobstats.aggregate=server"]


def written(found: dict, jobid: str) -> tuple[float | None, float | None]:
    """(write_bytes_total, write_bytes_per_second) of the job on the server's OSTs."""
    job = {"component": "ost", "jobid": jobid}
    return (
        value(found, "lustre_job_write_bytes_total", **job),
        value(found, "lustre_job_write_bytes_per_second", **job),
    )


def promtool_accepts(body: bytes) -> None:
    assert PROMTOOL is not None  # its callers are skipped without it
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    # promtool lints (exit 3) only counters' names; a malformed exposition is exit 1.
    assert result.returncode in (0, 3), result.stderr.decode() + result.stdout.decode()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")
def test_job_expiring_on_five_of_six_osts_keeps_its_sum(tmp_path: Path) -> None:
    # The reviewer's case: job 42 wrote 10 GiB on each of 6 OSTs; 10 s later its entry has
    # expired on 5 of them and it wrote 1 GiB more on the sixth. The sum fell from 60 to
    # 11 GiB and Prometheus read 11 GiB in 10 s (1.18 GB/s) instead of 1 GiB (107 MB/s).
    collector = make_collector(*server_flags(str(tmp_path / "*.txt")))
    start, t0 = 1723102025.057286226, 1723114647.887515895
    for index in range(6):
        write_ost(tmp_path / f"ost{index}.txt", index, entry("42", t0, start + index, 10 * GIB))
    first = sample_at(collector, t0)
    assert written(samples_of(first), "42")[0] == 60 * GIB
    write_ost(tmp_path / "ost0.txt", 0, entry("42", t0 + 10, start, 11 * GIB))
    for index in range(1, 6):  # still listed, job 42 no longer on them
        write_ost(tmp_path / f"ost{index}.txt", index, entry("7", t0 + 10, start, GIB))
    second = sample_at(collector, t0 + 10)
    total, rate = written(samples_of(second), "42")
    assert total == 61 * GIB
    assert rate == pytest.approx(GIB / 10)
    # Job 7 is new on 5 OSTs: its whole 5 GiB since its start, not an increase of job 42.
    assert written(samples_of(second), "7")[0] == 5 * GIB
    # Its entry comes back on an OST where it had expired: a new entry, from 0.
    write_ost(tmp_path / "ost3.txt", 3, entry('"42"', t0 + 20, t0 + 15, GIB // 2))
    write_ost(tmp_path / "ost0.txt", 0, entry("42", t0 + 20, start, 11 * GIB + GIB // 2))
    third = sample_at(collector, t0 + 20)
    total, rate = written(samples_of(third), "42")
    assert total == 62 * GIB
    assert rate == pytest.approx(GIB / 10)
    # Gone from every OST: the series goes, and the job's state with it.
    for index in range(6):
        write_ost(tmp_path / f"ost{index}.txt", index)
    fourth = sample_at(collector, t0 + 30)
    assert written(samples_of(fourth), "42") == (None, None)
    assert not collector.server_sums.components()
    for body in (first, second, third, fourth):
        promtool_accepts(body)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")
@pytest.mark.parametrize("expires", ['"42"', "42"])
def test_quoted_or_unquoted_twin_expiring_keeps_the_sum(tmp_path: Path, expires: str) -> None:
    # One OST lists job 42 quoted and unquoted (two entries, merged into one series); one of
    # them expires while the other grows by 1 GiB.
    path = tmp_path / "ost0.txt"
    collector = make_collector(*server_flags(str(path)))
    starts = {'"42"': 1723102025.057286226, "42": 1723102030.5}
    sizes = {'"42"': 30 * GIB, "42": 5 * GIB}
    t0 = 1723114647.887515895
    write_ost(path, 0, *(entry(jobid, t0, starts[jobid], sizes[jobid]) for jobid in starts))
    first = sample_at(collector, t0)
    assert written(samples_of(first), "42")[0] == 35 * GIB
    (stays,) = set(starts) - {expires}
    write_ost(path, 0, entry(stays, t0 + 10, starts[stays], sizes[stays] + GIB))
    second = sample_at(collector, t0 + 10)
    total, rate = written(samples_of(second), "42")
    assert total == 36 * GIB
    assert rate == pytest.approx(GIB / 10)
    promtool_accepts(first)
    promtool_accepts(second)


def two_osts_sampled(tmp_path: Path) -> tuple[JobstatsCollector, float]:
    """A collector that has sampled job 42 on two OSTs (8 and 4 GiB), and that sample's time."""
    collector = make_collector(*server_flags(str(tmp_path / "*.txt")))
    t0 = 1723114647.887515895
    write_ost(tmp_path / "a.txt", 0, entry("42", t0, t0 - 100, 8 * GIB))
    write_ost(tmp_path / "b.txt", 1, entry("42", t0, t0 - 100, 4 * GIB))
    sample_at(collector, t0)
    return collector, t0


def test_an_entry_reset_in_place_counts_from_zero_as_per_target(tmp_path: Path) -> None:
    # An entry that went down while listed was reset (Lustre dropped and re-created it
    # between two samples): like the per-target rates, its new value is what it did since.
    collector, t0 = two_osts_sampled(tmp_path)
    write_ost(tmp_path / "a.txt", 0, entry("42", t0 + 10, t0 - 100, 8 * GIB))
    write_ost(tmp_path / "b.txt", 1, entry("42", t0 + 10, t0 + 5, GIB))
    total, rate = written(samples_of(sample_at(collector, t0 + 10)), "42")
    assert total == 13 * GIB
    assert rate == pytest.approx(GIB / 10)


def test_an_unreadable_target_keeps_its_part_of_the_sum(tmp_path: Path) -> None:
    # The file of one OST cannot be read for a sample: its part stays in the sum as it was,
    # and once read again it continues (not counted again from 0).
    collector, t0 = two_osts_sampled(tmp_path)
    (tmp_path / "b.txt").unlink()
    (tmp_path / "b.txt").mkdir()  # listed by the glob, unreadable
    write_ost(tmp_path / "a.txt", 0, entry("42", t0 + 10, t0 - 100, 9 * GIB))
    found = samples_of(sample_at(collector, t0 + 10))
    assert value(found, "lustre_jobstats_up", component="ost", target="fs-OST0001",
                 source=str(tmp_path / "b.txt")) == 0  # fmt: skip
    assert written(found, "42") == (13 * GIB, pytest.approx(GIB / 10))
    (tmp_path / "b.txt").rmdir()
    write_ost(tmp_path / "b.txt", 1, entry("42", t0 + 20, t0 - 100, 6 * GIB))
    write_ost(tmp_path / "a.txt", 0, entry("42", t0 + 20, t0 - 100, 9 * GIB))
    assert written(samples_of(sample_at(collector, t0 + 20)), "42") == (
        15 * GIB,
        pytest.approx(GIB / 5),
    )


# ---------------------------------------------------------------- property
# A slot is one place an entry of job 42 can be: (OST, quoted or not). Each step, per slot:
STAY, GROW, EXPIRE, APPEAR, RESET = range(5)
SLOTS = [(ost, quoted) for ost in range(3) for quoted in (False, True)]
steps = st.lists(
    st.tuples(
        st.lists(
            st.tuples(st.sampled_from([STAY, GROW, EXPIRE, APPEAR, RESET]), st.integers(0, 3)),
            min_size=len(SLOTS),
            max_size=len(SLOTS),
        ),
        st.sets(st.integers(0, 2), max_size=2),  # OSTs whose file cannot be read this step
    ),
    min_size=1,
    max_size=8,
)


@given(steps)
def test_summed_counter_only_grows_by_what_the_entries_grew(plan: list) -> None:
    """Random lives of a job's entries on three OSTs (expiring, coming back from 0, reset in
    place, both quoted and unquoted on one OST, OSTs unreadable for a while): while the job's
    series lives it never decreases, and between any two samples it grew by exactly what the
    entries grew by, as last read; the live rate is that growth over the time step."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        collector = make_collector(*server_flags(str(root / "*.txt")))
        slots: dict[tuple[int, bool], tuple[float, int]] = {}  # what Lustre holds: start, bytes
        held: dict[tuple[int, bool], tuple[float, int]] = {}  # the same, as last read
        grown: dict[float, int] = {}  # entry (by start time) -> bytes as last read, this life
        life: list[tuple[int, float, int]] = []  # (step, summed counter, truth)
        births = 0
        t0 = 1723114647.887515895
        for number, (actions, unreadable) in enumerate(plan):
            now = t0 + 10 * number
            for slot, (action, amount) in zip(SLOTS, actions, strict=True):
                if action in (APPEAR, RESET) or (action == GROW and slot not in slots):
                    births += 1  # a new entry from 0: start times distinct, as Lustre's (ns)
                    slots[slot] = (now - 5 + births / 1000, amount * GIB // 3)
                elif slot in slots and action == GROW:
                    slots[slot] = (slots[slot][0], slots[slot][1] + amount * GIB)
                elif action == EXPIRE:
                    slots.pop(slot, None)
            for ost in range(3):
                path = root / f"ost{ost}.txt"
                if path.is_dir():
                    path.rmdir()
                if ost in unreadable:
                    path.unlink(missing_ok=True)
                    path.mkdir()  # matched by the glob, cannot be read
                    continue
                listed = []
                for quoted in (False, True):
                    part = slots.get((ost, quoted))
                    held.pop((ost, quoted), None)
                    if part is not None:
                        held[(ost, quoted)] = part
                        grown[part[0]] = part[1]
                        listed.append(entry('"42"' if quoted else "42", now, *part))
                write_ost(path, ost, *listed)
            total, rate = written(samples_of(sample_at(collector, now)), "42")
            if not held:  # no entry left, even unread: the series and its state are gone
                assert total is None
                grown, life = {}, []
                continue
            if total is None:  # listed only by unreadable OSTs: no series, state kept
                continue
            truth = sum(grown.values())
            if life and life[-1][0] == number - 1:
                assert rate == pytest.approx((total - life[-1][1]) / 10)
            life.append((number, total, truth))
            for _step, before, before_truth in life:
                assert total - before == truth - before_truth >= 0


def test_min_and_max_are_the_extremes_of_the_listed_entries(tmp_path: Path) -> None:
    # Twins on one OST and the job on another: the smallest write of any entry that wrote,
    # the largest of all; an entry without writes (min 0) does not make the minimum 0.
    collector = make_collector(*server_flags(str(tmp_path / "*.txt")))
    t0 = 1723114647.887515895
    sizes = ("min:    24576, max: 16777216", "min:     4096, max:  1048576")
    idle = entry("42", t0, t0 - 50, 0).replace(sizes[0], "min:        0, max:        0")
    write_ost(tmp_path / "a.txt", 0, entry('"42"', t0, t0 - 100, GIB), idle)
    write_ost(tmp_path / "b.txt", 1, entry("42", t0, t0 - 90, GIB).replace(*sizes))
    found = samples_of(sample_at(collector, t0))
    job = {"component": "ost", "jobid": "42"}
    assert value(found, "lustre_job_write_minimum_size_bytes", **job) == 4096
    assert value(found, "lustre_job_write_maximum_size_bytes", **job) == 16777216
    assert value(found, "lustre_job_write_bytes_total", **job) == 2 * GIB
