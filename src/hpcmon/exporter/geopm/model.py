"""Typed samples every power backend produces, whatever it reads (GEOPM API, CLI or sysfs).

A backend knows nothing of Prometheus: it turns its source into ``SampleBatch`` records;
the sampler makes counters monotone and derives power, the collector renders metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# geopm::IOGroup::m_signal_behavior_e, as returned by geopmdpy.pio.signal_info()[2].
BEHAVIOR_CONSTANT = 0
BEHAVIOR_MONOTONE = 1
BEHAVIOR_VARIABLE = 2
BEHAVIOR_LABEL = 3


class BackendError(RuntimeError):
    """The backend cannot give samples now; the message says why, for the log and the user."""


@dataclass(frozen=True, slots=True)
class SignalKey:
    """One GEOPM request: signal name, domain name (board, package, gpu, ...) and index."""

    signal: str
    domain: str
    index: int


@dataclass(frozen=True, slots=True)
class Request:
    """A ``SIGNAL DOMAIN INDEX`` line as geopmsession takes it; index None means ``*``."""

    signal: str
    domain: str
    index: int | None

    def line(self) -> str:
        return f"{self.signal} {self.domain} {'*' if self.index is None else self.index}"


@dataclass(slots=True)
class Sample:
    """One value read at one instant.

    ``monotone``: the source says the value only grows (energy, time, cycles).
    ``wrap_range``: for hardware counters that wrap (powercap ``max_energy_range_uj``), the
    range in the same unit as ``value``; None when the source already corrects wraparound.
    """

    key: SignalKey
    value: float
    monotone: bool
    unit: str = ""
    wrap_range: float | None = None


@dataclass(slots=True)
class SampleBatch:
    """Everything one backend read in one interval.

    ``time``: the instant of the read in seconds (any origin, used for differences only).
    ``epoch``: changes when the source restarts, so counters are re-based instead of
    trusting a difference across the restart.
    ``errors``: problems that did not stop the read (one unreadable zone, a bad field).
    ``work_seconds``: for backends that wait for their source's clock, the time spent on the
    read itself (the wait excluded); None when the whole read() call is work.
    """

    source: str
    time: float
    epoch: int
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    work_seconds: float | None = None


class Backend(Protocol):
    source: str
    paced: bool  # True: read() waits for the source's own clock (geopmsession's -p)

    def open(self) -> None: ...

    def read(self) -> SampleBatch: ...

    def close(self) -> None: ...
