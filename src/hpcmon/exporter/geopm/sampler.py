"""The sampling thread: reads a backend every interval and publishes an immutable snapshot.

Counters are made truly monotone here (hardware wraparound added back, source restarts
re-based), and power is derived from energy over the last interval where the backend gives
only energy. Scrapes only read the latest snapshot, so any number of Prometheus servers see
the same values and nothing is reset by a scrape.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hpcmon.exporter.collector import Periodic, ProblemLog
from hpcmon.exporter.geopm.model import Backend, BackendError, Sample, SampleBatch, SignalKey

log = logging.getLogger("hpcmon.exporter.geopm")

MAX_BACKOFF_SECONDS = 60.0
LOG_REPEAT_SECONDS = 600.0  # the same problem is logged again at most this often
# No single energy signal of one node (CPU package, DRAM, board, GPU) draws anything near
# 20 kW (a node with 8 GPUs draws about 10 kW): more energy in one interval is a bad reading
# (firmware glitch, hostile sysfs), not energy spent. One second more than the interval
# allows for when, within the read, each zone was read.
MAX_PLAUSIBLE_WATTS = 20_000.0
PLAUSIBLE_SLACK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Reading:
    """One value to expose: the signal it comes from, whether it is a counter, its unit."""

    key: SignalKey
    value: float
    monotone: bool
    unit: str
    source: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """All a scrape needs, published at once by the sampler thread."""

    seq: int
    readings: tuple[Reading, ...] = ()
    up: dict[str, bool] = field(default_factory=dict)
    sample_seconds: dict[str, float] = field(default_factory=dict)
    errors_total: dict[str, int] = field(default_factory=dict)
    counter_resets_total: dict[str, int] = field(default_factory=dict)
    last_error: str = ""


@dataclass(slots=True)
class _Counter:
    raw: float
    total: float
    time: float
    epoch: int
    live: bool = True


class CounterTracker:
    """Turns raw monotone readings into counters that never go down.

    A small decrease within the declared wrap range (the number of values the hardware
    counter takes) is a hardware wraparound: the rest of the range is added back. Any other
    decrease, a source restart (new epoch) or a signal that went away and came back re-bases
    the counter: the interval is not counted, the total keeps its value. So does an energy
    step above ``MAX_PLAUSIBLE_WATTS``, reported as a problem. A NaN sample (the signal is there
    but gave no value) leaves the counter as it was, so the next good reading continues it.
    The first reading of a signal starts the total at the raw value.
    """

    def __init__(self) -> None:
        self._counters: dict[tuple[str, SignalKey], _Counter] = {}
        self.resets: dict[str, int] = {}

    def update(
        self,
        source: str,
        sample: Sample,
        now: float,
        epoch: int,
        problems: list[str] | None = None,
    ) -> tuple[float, float | None, float]:
        """(total, energy added since the last reading or None, seconds since it).

        A step re-based because it is implausible is described in ``problems``.
        """
        slot = (source, sample.key)
        counter = self._counters.get(slot)
        if counter is None:
            self._counters[slot] = _Counter(sample.value, sample.value, now, epoch)
            return sample.value, None, 0.0
        if counter.epoch != epoch or not counter.live:
            counter.raw, counter.time, counter.epoch, counter.live = sample.value, now, epoch, True
            return counter.total, None, 0.0
        delta = sample.value - counter.raw
        elapsed = now - counter.time
        if delta < 0:
            wrap = sample.wrap_range
            # A wrap moves the counter by less than half its range in one interval (RAPL's
            # range lasts minutes at full power); a larger jump is a reset, e.g. a reloaded
            # driver, and adding the range would invent up to a whole range of energy.
            if wrap and counter.raw < wrap and sample.value < wrap and delta + wrap < wrap / 2:
                delta += wrap
            else:
                self.resets[source] = self.resets.get(source, 0) + 1
                log.info(
                    "%s %s %s %d went down (%r -> %r): counter re-based",
                    source,
                    sample.key.signal,
                    sample.key.domain,
                    sample.key.index,
                    counter.raw,
                    sample.value,
                )
                counter.raw, counter.time = sample.value, now
                return counter.total, None, 0.0
        if sample.unit == "joules" and delta > MAX_PLAUSIBLE_WATTS * (
            elapsed + PLAUSIBLE_SLACK_SECONDS
        ):
            if problems is not None:
                problems.append(
                    f"{sample.key.signal} {sample.key.domain} {sample.key.index}: "
                    f"{delta:.6g} J in {elapsed:.3g} s is more than {MAX_PLAUSIBLE_WATTS:g} W "
                    "could draw: not counted, counter re-based"
                )
            counter.raw, counter.time = sample.value, now
            return counter.total, None, 0.0
        counter.raw, counter.time = sample.value, now
        counter.total += delta
        return counter.total, delta, elapsed

    def mark_missing(self, source: str, present: set[SignalKey]) -> None:
        """Signals absent from a read are re-based when they come back."""
        for (counter_source, key), counter in self._counters.items():
            if counter_source == source and key not in present:
                counter.live = False


def readings_from_batch(batch: SampleBatch, tracker: CounterTracker) -> list[Reading]:
    """Exposed values for one batch: counters corrected, power derived where missing."""
    readings: list[Reading] = []
    given = {s.key for s in batch.samples}
    derived: list[Reading] = []
    for sample in batch.samples:
        value = sample.value
        if not math.isfinite(value):
            continue  # GEOPM's first sample of a derivative signal is NaN: nothing to show
        if not sample.monotone:
            readings.append(Reading(sample.key, value, False, sample.unit, batch.source))
            continue
        total, delta, elapsed = tracker.update(
            batch.source, sample, batch.time, batch.epoch, batch.errors
        )
        readings.append(Reading(sample.key, total, True, sample.unit, batch.source))
        signal = sample.key.signal
        if sample.unit == "joules" and signal.endswith("_ENERGY") and delta is not None:
            power_key = SignalKey(
                signal[: -len("ENERGY")] + "POWER", sample.key.domain, sample.key.index
            )
            if power_key not in given and elapsed > 0:
                derived.append(Reading(power_key, delta / elapsed, False, "watts", batch.source))
    tracker.mark_missing(batch.source, {s.key for s in batch.samples if s.monotone})
    return readings + derived


class _Candidate:
    """A backend with its restart state (failures so far, when to try again)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.failures = 0
        self.retry_at = 0.0
        self.opened_at = 0.0
        self.epoch = 0

    def backoff(self, now: float) -> float:
        self.failures += 1
        delay = min(MAX_BACKOFF_SECONDS, 2.0 ** (self.failures - 1))
        self.retry_at = now + delay
        return delay


class Sampler:
    """Runs the first backend that opens (in preference order) at a fixed interval.

    A backend that fails to open or to read is closed and retried with exponential backoff
    (1 s, 2 s, ... 60 s); meanwhile ``geopm_up`` is 0 and the scrape still succeeds. The
    backoff is forgotten once a backend has run for 60 s, so a child that dies after a few
    rows is not restarted every second.
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._candidates = [_Candidate(b) for b in backends]
        self._clock = clock
        self._active: _Candidate | None = None
        self._tracker = CounterTracker()
        self._errors: dict[str, int] = {}
        self._last_error = ""
        self._problems = ProblemLog(log, repeat_seconds=LOG_REPEAT_SECONDS, limit=1000)
        self._sample_seconds: dict[str, float] = {}
        self._seq = 0
        self._periodic = Periodic(
            "geopm-sampler", self.sample_once, interval, paced=self._paced, clock=clock
        )
        self.snapshot = Snapshot(0, up={c.backend.source: False for c in self._candidates})

    # ------------------------------------------------------------------ one step
    def _error(self, source: str, message: str) -> None:
        self._errors[source] = self._errors.get(source, 0) + 1
        self._last_error = message
        self._problems.warn(f"{source}: {message}")

    def _open_backend(self) -> None:
        now = self._clock()
        for candidate in self._candidates:
            if now < candidate.retry_at:
                continue
            try:
                candidate.backend.open()
            except BackendError as exc:
                delay = candidate.backoff(now)
                self._error(candidate.backend.source, f"{exc} (retry in {delay:g} s)")
                continue
            except Exception as exc:  # noqa: BLE001 - a backend bug must not kill the thread
                delay = candidate.backoff(now)
                self._error(
                    candidate.backend.source, f"cannot open: {exc!r} (retry in {delay:g} s)"
                )
                continue
            candidate.epoch += 1
            candidate.opened_at = now
            self._active = candidate
            log.info("geopm: sampling with the %s backend", candidate.backend.source)
            return

    def sample_once(self) -> Snapshot:
        """Read the active backend once (opening one if needed) and publish a snapshot."""
        if self._active is None:
            self._open_backend()
        readings: list[Reading] = []
        active = self._active
        if active is not None:
            source = active.backend.source
            started = time.perf_counter()
            try:
                batch = active.backend.read()
            except Exception as exc:  # noqa: BLE001 - includes BackendError; keep sampling
                if self._periodic.stopping.is_set():  # stop() closed the backend under us
                    return self.snapshot
                delay = active.backoff(self._clock())
                message = str(exc) if isinstance(exc, BackendError) else f"read failed: {exc!r}"
                self._error(source, f"{message} (retry in {delay:g} s)")
                self._close(active)
                self._active = None
            else:
                if batch.work_seconds is not None:  # do not count waiting for the child's row
                    started = time.perf_counter() - batch.work_seconds
                batch.epoch = active.epoch * 1_000_000 + batch.epoch
                readings = readings_from_batch(batch, self._tracker)
                for problem in batch.errors:
                    self._error(source, problem)
                if self._clock() - active.opened_at >= MAX_BACKOFF_SECONDS:
                    active.failures = 0
            self._sample_seconds[source] = time.perf_counter() - started
        self._seq += 1
        up_source = self._active.backend.source if self._active else None
        self.snapshot = Snapshot(
            seq=self._seq,
            readings=tuple(readings),
            up={
                c.backend.source: c.backend.source == up_source  # read this interval
                for c in self._candidates
            },
            sample_seconds=dict(self._sample_seconds),
            errors_total=dict(self._errors),
            counter_resets_total=dict(self._tracker.resets),
            last_error=self._last_error,
        )
        return self.snapshot

    @staticmethod
    def _close(candidate: _Candidate) -> None:
        try:
            candidate.backend.close()
        except Exception:  # noqa: BLE001
            log.exception("closing %s", candidate.backend.source)

    # ------------------------------------------------------------------ thread
    def _paced(self) -> bool:
        """The active backend's own clock (geopmsession -p) sets the pace."""
        return self._active is not None and self._active.backend.paced

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stopping.set()
        active = self._active
        if active is not None and active.backend.paced:
            self._close(active)  # wakes a read() that waits on the child's output
        self._periodic.stop(timeout=10)
        if self._active is not None:
            self._close(self._active)
            self._active = None
