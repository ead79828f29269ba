"""Typed records for GEOPM reports, independent of how they are stored or written.

Values keep the report's own keys (``"package-energy (J)"``); numbers are floats (GEOPM prints
them with 6 significant digits, ``2e+09`` included), anything else stays the text as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

Value = float | str

# Scopes of the per-host totals, as named in the report and as written in the ``scope`` tag.
SCOPE_BY_SECTION = {
    "Application Totals": "application",
    "Epoch Totals": "epoch",
    "Unmarked Totals": "unmarked",
}


@dataclass(slots=True)
class Region:
    name: str
    hash: str
    values: dict[str, Value] = field(default_factory=dict)


@dataclass(slots=True)
class HostReport:
    name: str
    regions: list[Region] = field(default_factory=list)
    totals: dict[str, dict[str, Value]] = field(default_factory=dict)  # scope -> values
    extras: dict[str, str] = field(default_factory=dict)  # agent keys, e.g. "Frequency map"


@dataclass(slots=True)
class Report:
    """One ``geopm_report(7)`` file (YAML era 2.x/3.x, or the 1.x text era)."""

    path: Path
    era: str  # "yaml" or "text-1.x"
    header: dict[str, str] = field(default_factory=dict)  # every top-level key, as written
    start_time_ns: int | None = None
    hosts: list[HostReport] = field(default_factory=list)

    @property
    def version(self) -> str | None:
        return self.header.get("GEOPM Version")

    @property
    def agent(self) -> str | None:
        return self.header.get("Agent")

    @property
    def profile(self) -> str | None:
        return self.header.get("Profile")

    @property
    def policy(self) -> str | None:
        return self.header.get("Policy")


@dataclass(slots=True)
class SignalStats:
    """One signal's summary in a geopmsession report (count, first, last, min, max, mean, std)."""

    signal: str
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class SessionReport:
    """One document (one host, one sampling period) of a ``geopmsession -r`` report."""

    path: Path
    form: str  # "geopmsession-yaml" or "geopmsession-csv"
    host: str
    sample_time_first: str | None = None
    start_time_ns: int | None = None
    summary: dict[str, float] = field(default_factory=dict)  # sample-time-total, sample-count...
    signals: list[SignalStats] = field(default_factory=list)


@dataclass
class ParseResult:
    reports: list[Report | SessionReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
