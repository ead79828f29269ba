"""GEOPM signal names -> Prometheus metric names; the domain goes into labels, not the name.

Rule: ``geopm_`` + lower-case signal name (IOGroup prefixes such as ``NVML::`` kept, with
``::`` turned into ``_``) + unit suffix (``_watts``, ``_joules``, ``_hertz``, ``_celsius``,
``_seconds``) + ``_total`` only for monotone signals. ``CPU_ENERGY`` becomes
``geopm_cpu_energy_joules_total``, ``CPU_POWER`` ``geopm_cpu_power_watts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

UNITS = ("watts", "joules", "hertz", "celsius", "seconds")

# GEOPM's own unit words (IOGroup::M_UNITS) in signal descriptions -> our suffix.
_DESCRIPTION_UNITS = {
    "watts": "watts",
    "joules": "joules",
    "hertz": "hertz",
    "celsius": "celsius",
    "seconds": "seconds",
    "none": "",
}
_UNITS_LINE = re.compile(r"^\s*units:\s*(\w+)", re.MULTILINE | re.IGNORECASE)
_NOT_NAME_CHAR = re.compile(r"[^a-z0-9_]+")

# Signal name words that give the unit when no description is available (geopmsession,
# powercap). Order matters: CPU_POWER_LIMIT... is watts, CPU_ENERGY joules.
_NAME_UNITS = (
    ("TIME_WINDOW", "seconds"),
    ("TEMPERATURE", "celsius"),
    ("ENERGY", "joules"),
    ("POWER", "watts"),
    ("FREQUENCY", "hertz"),
    ("FREQ", "hertz"),
)
_NAME_MONOTONE = ("ENERGY", "CYCLES", "INSTRUCTIONS_RETIRED", "TIMESTAMP_COUNTER")


@dataclass(frozen=True, slots=True)
class MetricName:
    name: str  # full exposition name, with _total for counters
    kind: str  # "counter" or "gauge"
    unit: str
    help: str


def unit_from_description(description: str) -> str | None:
    """The unit a GEOPM signal description declares (``units: hertz``), None if absent."""
    match = _UNITS_LINE.search(description or "")
    if match is None:
        return None
    return _DESCRIPTION_UNITS.get(match.group(1).lower())


def unit_from_name(signal: str) -> str:
    """Best guess of a signal's unit from its name, for sources without descriptions."""
    upper = signal.upper()
    base = upper.rsplit("::", 1)[-1]
    if base in ("TIME", "ELAPSED") or base.startswith("TIME"):
        return "seconds"
    for word, unit in _NAME_UNITS:
        if word in upper:
            return unit
    return ""


def monotone_from_name(signal: str) -> bool:
    """Best guess of whether a signal only grows, for sources without signal_info()."""
    upper = signal.upper()
    base = upper.rsplit("::", 1)[-1]
    if base in ("TIME", "ELAPSED"):
        return True
    return any(word in upper for word in _NAME_MONOTONE) and "POWER" not in base


@lru_cache(maxsize=4096)
def metric_name(signal: str, unit: str, monotone: bool) -> MetricName:
    base = _NOT_NAME_CHAR.sub("_", signal.lower()).strip("_") or "signal"
    base = re.sub(r"_+", "_", base)
    if base[0].isdigit():
        base = "_" + base
    if monotone and base.endswith("_total"):
        base = base[: -len("_total")]
    if unit and not base.endswith("_" + unit):
        base = f"{base}_{unit}"
    name = f"geopm_{base}"
    if monotone:
        return MetricName(
            name + "_total",
            "counter",
            unit,
            f"GEOPM signal {signal} ({unit or 'no unit'}), monotone, "
            "hardware wraparound and restarts corrected.",
        )
    return MetricName(name, "gauge", unit, f"GEOPM signal {signal} ({unit or 'no unit'}).")
