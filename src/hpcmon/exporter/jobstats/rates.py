"""Live per-job rates from consecutive reads of the same target.

Rules (issue 2, ``lustre-jobstats-methods.md``): a rate is the difference between two reads of a
target over the time between those reads (the wall clock of each read). ``snapshot_time`` is
never a clock: Lustre sets it to the entry's last update, so a job idle for minutes before a
burst would have its burst spread over the idle time too. A counter that decreases, or a
changed ``start_time``, is a reset: the new value is the increment since the reset. A job seen
for the first time gets a rate when its ``start_time`` allows it (value over the time since
start, or since the previous read if that is later); otherwise its earlier value counts as zero
at the previous read. Rates are never negative, infinite or NaN: a time step shorter than
``MIN_STEP`` says nothing about a speed and gives no rate, and neither does a rate above
``MAX_RATE`` (no Lustre target moves 10^15 bytes or operations a second: such a figure can only
come from a bad clock).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hpcmon.exporter.jobstats.parser import BYTE_OPERATIONS, JobEntry, make_room

MIN_STEP = 1e-3  # seconds
MAX_RATE = 1e15  # per second


def rate_counters(entry: JobEntry) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """What gets a rate: bytes for read_bytes/write_bytes, calls (``samples``) for the rest."""
    names = tuple(entry.ops)
    values = tuple(
        [op.sum if name in BYTE_OPERATIONS else op.samples for name, op in entry.ops.items()]
    )
    return names, values


@dataclass(slots=True)
class _JobState:
    clock: float  # wall clock of the read these values come from
    start_time: float | None
    names: tuple[str, ...]
    values: tuple[int, ...]


@dataclass(slots=True)
class _TargetState:
    wall_clock: float  # of the previous read
    jobs: dict[str, _JobState]


def _per_second(values: Iterable[int], seconds: float) -> tuple[float, ...] | None:
    """Each value over ``seconds``; None when the step is too short or a rate implausible."""
    if not seconds >= MIN_STEP:  # also NaN
        return None
    rates = tuple([value / seconds for value in values])
    return rates if not rates or max(rates) <= MAX_RATE else None


_ZEROS: dict[int, tuple[float, ...]] = {}


def _zeros(count: int) -> tuple[float, ...]:
    found = _ZEROS.get(count)
    if found is None:
        found = _ZEROS[count] = (0.0,) * count
    return found


class RateTracker:
    """Keeps the previous read of every target; ``update`` returns rates per job id.

    A job missing from a target's new read is forgotten (it comes back as a new job).
    Targets that could not be read are simply not updated, so their state survives.
    """

    def __init__(self) -> None:
        self._targets: dict[tuple[str, str], _TargetState] = {}
        self._layouts: dict[tuple[str, ...], tuple[str, ...]] = {}

    def forget_except(self, keep: Iterable[tuple[str, str]]) -> None:
        """Drop targets that no longer exist (keep the ones in ``keep``)."""
        wanted = set(keep)
        for key in [key for key in self._targets if key not in wanted]:
            del self._targets[key]

    def update(
        self, key: tuple[str, str], jobs: Iterable[JobEntry], wall_clock: float
    ) -> dict[str, tuple[tuple[str, ...], tuple[float, ...]]]:
        """Rates of one target's new read, taken at ``wall_clock`` (Unix seconds): jobid ->
        (operation names, per-second values).

        Jobs without a defined rate (first read, no usable time step) are left out.
        """
        previous = self._targets.get(key)
        previous_clock = previous.wall_clock if previous is not None else None
        old_jobs = previous.jobs if previous is not None else {}
        new_jobs: dict[str, _JobState] = {}
        rates: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {}
        for entry in jobs:
            names, values = rate_counters(entry)
            interned = self._layouts.get(names)
            if interned is None:
                make_room(self._layouts)
                interned = self._layouts[names] = names
            names = interned
            state = _JobState(wall_clock, entry.start_time, names, values)
            old = old_jobs.get(entry.jobid)
            if old is None:
                result = self._first_seen(values, wall_clock, entry.start_time, previous_clock)
            else:
                result, keep_old = self._known(old, state)
                if keep_old:
                    state = old
            if result is not None:
                rates[entry.jobid] = (names, result)
            new_jobs[entry.jobid] = state
        self._targets[key] = _TargetState(wall_clock, new_jobs)
        return rates

    @staticmethod
    def _first_seen(
        values: tuple[int, ...],
        clock: float,
        start_time: float | None,
        previous_clock: float | None,
    ) -> tuple[float, ...] | None:
        if start_time is not None:
            since = start_time if previous_clock is None else max(start_time, previous_clock)
            if clock > since:
                return _per_second(values, clock - since)
        if previous_clock is not None and clock > previous_clock:
            return _per_second(values, clock - previous_clock)
        return None

    @staticmethod
    def _known(old: _JobState, new: _JobState) -> tuple[tuple[float, ...] | None, bool]:
        """(rates or None, whether to keep the old state as the base of the next read)."""
        seconds = new.clock - old.clock
        backwards = seconds < 0  # the wall clock was set back: no step known, start again
        restarted = (
            new.start_time is not None
            and old.start_time is not None
            and new.start_time != old.start_time
        )
        if not restarted and new.names == old.names:
            if new.values == old.values:  # an idle job: the common case
                return _zeros(len(new.values)), not backwards and seconds < MIN_STEP
            increments = [now - before for now, before in zip(new.values, old.values, strict=True)]
            if min(increments) >= 0:
                if seconds >= MIN_STEP:
                    return _per_second(increments, seconds), False
                # Too short a step: measured at a later read against the old state.
                return None, not backwards
        # A reset: what the entry holds now happened since it restarted.
        since = old.clock if new.start_time is None else max(new.start_time, old.clock)
        if new.clock > since:
            return _per_second(new.values, new.clock - since), False
        return None, False
