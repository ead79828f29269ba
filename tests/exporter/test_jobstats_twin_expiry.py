"""Per target (no --jobstats.aggregate): a job listed both quoted and unquoted on one target
is one series; when one of the twins expires (Lustre's job_cleanup_interval) while the other
stays, that series must not fall (Prometheus would count all of it again as a restart).

The entries are the real Lustre 2.14 capture (DDN OST) used by the aggregate-expiry tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.exporter.test_jobstats_aggregate_expiry import (
    APPEAR,
    EXPIRE,
    GIB,
    GROW,
    PROMTOOL,
    RESET,
    SLOTS,
    entry,
    promtool_accepts,
    sample_at,
    steps,
    write_ost,
)
from tests.exporter.test_jobstats_collector import make_collector, samples_of, value

T0 = 1723114647.887515895


def file_flags(glob: str) -> list[str]:
    return ["--jobstats.source=file", f"--jobstats.path={glob}"]


def written(found: dict, ost: int, jobid: str = "42") -> tuple[float | None, float | None]:
    """(write_bytes_total, write_bytes_per_second) of the job on OST ``ost``."""
    job = {"component": "ost", "target": f"fs-OST{ost:04x}", "jobid": jobid}
    return (
        value(found, "lustre_job_write_bytes_total", **job),
        value(found, "lustre_job_write_bytes_per_second", **job),
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")
@pytest.mark.parametrize("expires", ['"42"', "42"])
def test_twin_expiring_keeps_the_series_from_falling(tmp_path: Path, expires: str) -> None:
    # OST 0 lists job 42 quoted (30 GiB) and unquoted (5 GiB). One twin expires while the
    # other writes 1 GiB more: a plain sum fell to 31 or 6 GiB, and Prometheus counted
    # that again as written in 10 s.
    path = tmp_path / "ost0.txt"
    collector = make_collector(*file_flags(str(path)))
    starts = {'"42"': 1723102025.057286226, "42": 1723102030.5}
    sizes = {'"42"': 30 * GIB, "42": 5 * GIB}
    write_ost(path, 0, *(entry(jobid, T0, starts[jobid], sizes[jobid]) for jobid in starts))
    first = sample_at(collector, T0)
    assert written(samples_of(first), 0)[0] == 35 * GIB
    (stays,) = set(starts) - {expires}
    write_ost(path, 0, entry(stays, T0 + 10, starts[stays], sizes[stays] + GIB))
    second = sample_at(collector, T0 + 10)
    assert written(samples_of(second), 0) == (36 * GIB, pytest.approx(GIB / 10))
    # The expired twin comes back as a new entry, from 0: added on top.
    write_ost(
        path,
        0,
        entry(stays, T0 + 20, starts[stays], sizes[stays] + GIB),
        entry(expires, T0 + 20, T0 + 15, GIB // 2),
    )
    third = sample_at(collector, T0 + 20)
    assert written(samples_of(third), 0) == (36 * GIB + GIB // 2, pytest.approx(GIB / 20))
    # Gone from the OST: the series goes, and the job's state with it.
    write_ost(path, 0, entry("7", T0 + 30, T0, GIB))
    fourth = sample_at(collector, T0 + 30)
    assert written(samples_of(fourth), 0) == (None, None)
    assert not collector.twin_sums.components()
    for body in (first, second, third, fourth):
        promtool_accepts(body)


def test_twins_are_summed_per_target_and_forgotten_with_it(tmp_path: Path) -> None:
    # Twins of job 42 on OST 0 only; OST 1 lists it once. One twin expires on OST 0: OST 1's
    # series is its entry as listed. Then OST 0's file goes away: so does its state.
    collector = make_collector(*file_flags(str(tmp_path / "*.txt")))
    write_ost(
        tmp_path / "a.txt", 0, entry('"42"', T0, T0 - 100, 8 * GIB), entry("42", T0, T0 - 90, GIB)
    )
    write_ost(tmp_path / "b.txt", 1, entry("42", T0, T0 - 80, 2 * GIB))
    sample_at(collector, T0)
    write_ost(tmp_path / "a.txt", 0, entry("42", T0 + 10, T0 - 90, 2 * GIB))
    write_ost(tmp_path / "b.txt", 1, entry("42", T0 + 10, T0 - 80, 3 * GIB))
    found = samples_of(sample_at(collector, T0 + 10))
    assert written(found, 0) == (10 * GIB, pytest.approx(GIB / 10))
    assert written(found, 1) == (3 * GIB, pytest.approx(GIB / 10))
    assert collector.twin_sums.components() == [("ost", "fs-OST0000")]
    (tmp_path / "a.txt").unlink()
    sample_at(collector, T0 + 20)
    assert not collector.twin_sums.components()


# ---------------------------------------------------------------- property
# The plans of the aggregate property: per step, per (OST, quoted) slot of job 42, an action.
OSTS = sorted({ost for ost, _quoted in SLOTS})


def lustre_step(slots: dict, actions: list, now: float, births: int) -> int:
    """Apply one step's actions to the entries Lustre holds (slot -> start, bytes); a new
    entry starts from 0 at a start time of its own. Returns the entries born so far."""
    for slot, (action, amount) in zip(SLOTS, actions, strict=True):
        old = slots.pop(slot, None)
        if action == EXPIRE:
            continue
        if action in (APPEAR, RESET) or (old is None and action == GROW):
            births += 1
            slots[slot] = (now - 5 + births / 1000, amount * GIB // 3)
        elif old is not None:
            slots[slot] = (old[0], old[1] + (amount * GIB if action == GROW else 0))
    return births


def list_or_block(path: Path, ost: int, entries: list[str], readable: bool) -> None:
    """The OST's job_stats file, or a directory in its place (matched, cannot be read)."""
    if path.is_dir():
        path.rmdir()
    if readable:
        write_ost(path, ost, *entries)
    else:
        path.unlink(missing_ok=True)
        path.mkdir()


class Life:
    """What one OST's series of job 42 should do, from what was last read of its entries.

    Once both twins were read together the job is held: from then on until no entry is
    listed, the series is what every entry of that life last read (by start time) adds up
    to. Before that, the single entry is the series as it is."""

    def __init__(self) -> None:
        self.held = False
        self.grown: dict[float, int] = {}  # entry (by start time) -> bytes as last read
        self.seen: list[tuple[int, float, int]] = []  # (step, series, truth) while held


@settings(deadline=None)  # up to 8 samples each, on a machine shared with other work
@given(steps)
def test_twin_series_only_grows_by_what_the_twins_grew(plan: list) -> None:
    """Random lives of job 42's quoted and unquoted entries on three OSTs (expiring, coming
    back from 0, reset in place, OSTs unreadable for a while): once held, each OST's series
    never decreases and between any two samples grows by exactly what its entries grew by;
    the live rate is that growth over the read interval. Nothing is held for an OST without
    the job."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        collector = make_collector(*file_flags(str(root / "*.txt")))
        slots: dict[tuple[int, bool], tuple[float, int]] = {}  # what Lustre holds: start, bytes
        lives = {ost: Life() for ost in OSTS}
        births = 0
        for number, (actions, unreadable) in enumerate(plan):
            now = T0 + 10 * number
            births = lustre_step(slots, actions, now, births)
            listed: dict[int, list[tuple[float, int]]] = {}  # readable OST -> its entries
            for ost in OSTS:
                parts = {quoted: slots[(ost, quoted)] for quoted in (False, True)
                         if (ost, quoted) in slots}  # fmt: skip
                texts = [entry('"42"' if quoted else "42", now, *part)
                         for quoted, part in parts.items()]  # fmt: skip
                list_or_block(root / f"ost{ost}.txt", ost, texts, ost not in unreadable)
                if ost not in unreadable:
                    listed[ost] = list(parts.values())
            found = samples_of(sample_at(collector, now))
            for ost, life in lives.items():
                key = ("ost", f"fs-OST{ost:04x}")
                total, rate = written(found, ost)
                if ost not in listed:  # unread: no series, the state kept as it was
                    assert total is None
                    assert ("42" in collector.twin_sums.held(key)) == life.held
                    continue
                parts = listed[ost]
                if not parts:  # no entry left: the series and its state are gone
                    assert total is None
                    assert not collector.twin_sums.held(key)
                    lives[ost] = Life()
                    continue
                assert total is not None  # an entry is listed: the series is there
                if len(parts) == 2 and not life.held:
                    life.held = True
                    life.grown = {}
                if not life.held:
                    assert total == parts[0][1]
                    continue
                life.grown.update(parts)
                truth = sum(life.grown.values())
                if life.seen and life.seen[-1][0] == number - 1:
                    assert rate == pytest.approx((total - life.seen[-1][1]) / 10)
                life.seen.append((number, total, truth))
                for _step, before, before_truth in life.seen:
                    assert total - before == truth - before_truth >= 0
