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
class _Job:
    """What is kept of a listed job until the next sample (dropped once Lustre stops listing
    it, so memory follows the listing)."""

    start: float | None
    counters: dict[str, tuple[int, int]]  # Lustre's (samples, sum) per operation
    shown: dict[str, tuple[int, int]]  # the last value of each of its own series, if any


@dataclass(slots=True)
class _TargetState:
    jobs: dict[str, _Job]
    top: frozenset[str]  # the jobs shown in their own series at this sample
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


def _absorb(other: dict[str, _OtherOp], name: str, unit: str, samples: int, total: int) -> None:
    op = other.get(name)
    if op is None:
        op = other[name] = _OtherOp(unit)
    elif unit == "usecs":
        op.unit = unit
    op.samples = min(op.samples + samples, U64_MAX)
    op.sum = min(op.sum + total, U64_MAX)


class TopJobs:
    """``--jobstats.top-jobs N``, with the state it needs per target.

    The rule, at each sample of a target: the N jobs with the largest increase of bytes plus
    operations since the previous sample (a new job: its whole value; ties by the jobs' totals
    of bytes plus operations, then by job id) keep their series. Every increase of every job
    goes to exactly one exposed series: to the job's own series when that series was shown at
    the previous sample too and the counter did not restart, else to ``other``. A job's own
    series therefore moves only by what it did while shown: it starts at 0 (when the target
    lists a counter for the first time, e.g. at its first sample: at Lustre's value, and
    ``other`` at the sum of the jobs outside the top N), resumes where it stopped when the
    job comes back, and stays flat across a restart. So ``increase()`` summed over the job
    series and ``other`` is, over any window, what all the jobs did after that first sample:
    no increase is seen twice, none is lost, and no series goes down unless Lustre dropped
    the job (Prometheus joins its old series to the new one that starts at 0, which counts
    nothing). A job whose id is ``other`` is always folded into ``other``.
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
        before = previous.jobs if previous is not None else {}
        was_top = previous.top if previous is not None else frozenset()
        other = previous.other if previous is not None else {}
        listed: dict[str, _Job] = {}
        increases = {}
        for entry in jobs:
            now = _counters(entry)
            old = before.get(entry.jobid)
            restarted = old is not None and old.start != entry.start_time
            increases[entry.jobid] = _increase(
                now, None if old is None or restarted else old.counters
            )
            listed[entry.jobid] = _Job(entry.start_time, now, old.shown if old is not None else {})
        # Ties (an idle file system: every increase is 0) go to the largest totals, so the
        # top set stays as it was instead of flipping to the lowest job ids.
        ranked = sorted(
            (entry for entry in jobs if entry.jobid != OTHER),
            key=lambda entry: (
                -_movement(increases[entry.jobid]),
                -_movement(listed[entry.jobid].counters),
                entry.jobid,
            ),
        )
        top = ranked[: self.keep]
        top_ids = frozenset(entry.jobid for entry in top)
        # A counter no series had yet (the target's first sample, or a first job after an
        # empty one): every series of it starts now, at Lustre's value, so the sums over
        # jobid are exact there; increase() only counts from the next sample on.
        fresh = {name for entry in top for name in entry.ops if name not in other}
        folded = [entry for entry in jobs if entry.jobid not in top_ids]
        for entry in folded:
            for name, (samples, total) in increases[entry.jobid].items():
                _absorb(other, name, entry.ops[name].unit, samples, total)
        going_on = was_top & top_ids
        shown = [
            _show(entry, listed[entry.jobid], before, going_on, fresh, increases, other)
            for entry in top
        ]
        self._targets[key] = _TargetState(listed, top_ids, other)
        entry = _other_entry(other, folded)
        if rates is None:
            return [*shown, entry], None
        kept = {job.jobid: rates[job.jobid] for job in top if job.jobid in rates}
        summed = _summed_rates(entry, folded, rates, rated=previous is not None or bool(rates))
        if summed is not None:
            kept[OTHER] = summed
        return [*shown, entry], kept


def _show(
    entry: JobEntry,
    job: _Job,
    before: Mapping[str, _Job],
    going_on: frozenset[str],
    fresh: set[str],
    increases: Mapping[str, Mapping[str, tuple[int, int]]],
    other: dict[str, _OtherOp],
) -> JobEntry:
    """``entry`` with the values of its own series: a counter grows by the job's increase
    when its series was shown at the previous sample and did not restart; otherwise
    ``other`` takes that increase (it counted the job while it was out, or Prometheus would
    not see the step) and the series keeps its last value (0 if it has none)."""
    old = before.get(entry.jobid)
    if old is not None and (entry.jobid not in going_on or old.start != entry.start_time):
        old = None
    shown = dict(job.shown)
    ops = {}
    for name, now in job.counters.items():
        op = entry.ops[name]
        if name in fresh:
            value, lost = now, (0, 0)
        else:
            last = old.counters.get(name) if old is not None else None
            kept, grown = shown.get(name, (0, 0)), increases[entry.jobid][name]
            on = [last is not None and now[i] >= last[i] for i in (0, 1)]
            value = (
                min(kept[0] + grown[0], U64_MAX) if on[0] else kept[0],
                min(kept[1] + grown[1], U64_MAX) if on[1] else kept[1],
            )
            lost = (0 if on[0] else grown[0], 0 if on[1] else grown[1])
        _absorb(other, name, op.unit, *lost)  # also 0: ``other`` has every counter from now on
        shown[name] = value
        ops[name] = OpStats(value[0], op.unit, op.min, op.max, value[1], None)
    job.shown = shown
    return JobEntry(entry.jobid, entry.snapshot_time, entry.start_time, entry.elapsed_time, ops)


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
