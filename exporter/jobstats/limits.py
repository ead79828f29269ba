"""Ways to keep a big server's per-job series under a budget (issue 17).

- ``TopJobs`` (``--jobstats.top-jobs N``): per target, the N jobs that moved the most bytes
  plus operations since the previous sample keep their own series; every other job is summed
  into one ``jobid="other"`` entry whose counters only ever grow (see ``TopJobs.fold``).
- ``SeriesCap`` (``--jobstats.max-series N``): at most N per-job series per sample, whole jobs,
  most active first; what is cut is counted, never silently lost.

Everything here works on parsed ``JobEntry`` records, before they are packed for rendering.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from hpcmon.exporter.jobstats.parser import BYTE_OPERATIONS, U64_MAX, JobEntry, OpStats
from hpcmon.exporter.jobstats.render import Layout

OTHER = "other"
Rates = dict[str, tuple[tuple[str, ...], tuple[float, ...]]]


def job_series(layout: Layout, rated: bool, rates: Collection[str]) -> int:
    """Per-job series one job gives in the exposition (exactly what render_blocks writes)."""
    count = 0
    for index, kind in ((layout.read, "read_bytes"), (layout.write, "write_bytes")):
        if index >= 0:
            count += 4 + (rated and kind in rates)
    count += layout.stats_count * (1 + (rated and "operations" in rates))
    return count + layout.latency_count


@dataclass(slots=True)
class _OtherOp:
    unit: str
    samples: int = 0
    sum: int = 0


@dataclass(slots=True)
class _TargetState:
    counters: dict[str, tuple[float | None, dict[str, tuple[int, int]]]]  # jobid -> start, ops
    top: frozenset[str]
    other: dict[str, _OtherOp] = field(default_factory=dict)


def _counters(entry: JobEntry) -> dict[str, tuple[int, int]]:
    return {name: (op.samples, op.sum) for name, op in entry.ops.items()}


def _increase(
    now: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]] | None
) -> dict[str, tuple[int, int]]:
    """Per operation, what (samples, sum) grew by; a counter that went down was reset, so
    its increase is its new value; a job not seen before brings its whole value."""
    if before is None:
        return now
    grown = {}
    for name, (samples, total) in now.items():
        old_samples, old_total = before.get(name, (0, 0))
        grown[name] = (
            samples - old_samples if samples >= old_samples else samples,
            total - old_total if total >= old_total else total,
        )
    return grown


def _movement(increase: Mapping[str, tuple[int, int]]) -> int:
    """Bytes plus operations: the ranking of --jobstats.top-jobs."""
    return sum(
        samples + (total if name in BYTE_OPERATIONS else 0)
        for name, (samples, total) in increase.items()
    )


class TopJobs:
    """``--jobstats.top-jobs N``, with the state it needs per target.

    The rule, at each sample of a target: the N jobs with the largest increase of bytes plus
    operations since the previous sample (a new job: its whole value; ties by the jobs' totals
    of bytes plus operations, then by job id) keep
    their series. ``other`` grows by the increase of every job that is not in the top N now,
    and by the increase of every job that has just entered the top N (its own series starts
    now, so ``rate()`` would not see that step). ``other`` therefore never decreases, and on
    a target's first sample it is exactly the sum of the jobs outside the top N.
    A job whose id is ``other`` is always folded into ``other``.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._targets: dict[tuple[str, str], _TargetState] = {}

    def forget_except(self, keep: Iterable[tuple[str, str]]) -> None:
        wanted = set(keep)
        for key in [key for key in self._targets if key not in wanted]:
            del self._targets[key]

    def fold(
        self, key: tuple[str, str], jobs: list[JobEntry], rates: Rates | None
    ) -> tuple[list[JobEntry], Rates | None]:
        """The target's top N jobs plus ``other``, and their rates (None: rates are off)."""
        previous = self._targets.get(key)
        before = previous.counters if previous is not None else {}
        counters = {}
        increases = {}
        for entry in jobs:
            now = _counters(entry)
            counters[entry.jobid] = (entry.start_time, now)
            old = before.get(entry.jobid)
            restarted = old is not None and old[0] != entry.start_time
            increases[entry.jobid] = _increase(now, None if old is None or restarted else old[1])
        # Ties (an idle file system: every increase is 0) go to the largest totals, so the
        # top set stays as it was instead of flipping to the lowest job ids.
        ranked = sorted(
            (entry for entry in jobs if entry.jobid != OTHER),
            key=lambda entry: (
                -_movement(increases[entry.jobid]),
                -_movement(counters[entry.jobid][1]),
                entry.jobid,
            ),
        )
        top = ranked[: self.keep]
        top_ids = frozenset(entry.jobid for entry in top)
        other = previous.other if previous is not None else {}
        was_top = previous.top if previous is not None else frozenset()
        folded = [entry for entry in jobs if entry.jobid not in top_ids]
        entering = [entry for entry in top if entry.jobid not in was_top and entry.jobid in before]
        for entry in [*folded, *entering]:
            for name, (samples, total) in increases[entry.jobid].items():
                unit = entry.ops[name].unit
                op = other.get(name)
                if op is None:
                    op = other[name] = _OtherOp(unit)
                elif unit == "usecs":
                    op.unit = unit
                op.samples = min(op.samples + samples, U64_MAX)
                op.sum = min(op.sum + total, U64_MAX)
        self._targets[key] = _TargetState(counters, top_ids, other)
        entry = _other_entry(other, folded)
        if rates is None:
            return [*top, entry], None
        kept = {job.jobid: rates[job.jobid] for job in top if job.jobid in rates}
        summed = _summed_rates(entry, folded, rates, rated=previous is not None)
        if summed is not None:
            kept[OTHER] = summed
        return [*top, entry], kept


def _other_entry(other: Mapping[str, _OtherOp], folded: list[JobEntry]) -> JobEntry:
    ops = {}
    for name, op in other.items():
        present = [entry.ops[name] for entry in folded if name in entry.ops]
        used = [stats for stats in present if stats.samples]
        ops[name] = OpStats(
            op.samples,
            op.unit,
            min(stats.min for stats in used) if used else 0,
            max(stats.max for stats in used) if used else 0,
            op.sum,
            None,
        )
    snapshots = [entry.snapshot_time for entry in folded if entry.snapshot_time is not None]
    return JobEntry(OTHER, max(snapshots) if snapshots else None, None, None, ops)


def _summed_rates(
    entry: JobEntry, folded: list[JobEntry], rates: Rates, rated: bool
) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """Rates of ``other``: the sum of its jobs' rates (None before the target has a rate)."""
    names = tuple(entry.ops)
    totals = dict.fromkeys(names, 0.0)
    for job in folded:
        found = rates.get(job.jobid)
        if found is None:
            continue
        rated = True
        for name, value in zip(*found, strict=True):
            totals[name] += value
    return (names, tuple(totals.values())) if rated else None
