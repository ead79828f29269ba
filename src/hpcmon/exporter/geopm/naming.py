"""GEOPM signal names -> Prometheus metric names; the domain goes into labels, not the name.

Rule: ``geopm_`` + lower-case signal name (IOGroup prefixes such as ``NVML::`` kept, with
``::`` turned into ``_``) + unit suffix (``_watts``, ``_joules``, ``_hertz``, ``_celsius``,
``_seconds``) + ``_total`` only for monotone signals. ``CPU_ENERGY`` becomes
``geopm_cpu_energy_joules_total``, ``CPU_POWER`` ``geopm_cpu_power_watts``. Words that
Prometheus' linter (``promtool check metrics``) rejects are rewritten: a metric type in the
name (``CPU_TIMESTAMP_COUNTER`` -> ``geopm_cpu_timestamp_count_total``), an abbreviated
unit, a ``_total`` that the signal's own name ends with, or a gauge ending in a histogram
suffix (``_count``, ``_sum``, ``_bucket``: ``_value`` is added).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

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


def _base_name(signal: str) -> str:
    """The signal name without its IOGroup prefix (``CPUFREQ::`` says nothing of the unit)."""
    return signal.upper().rsplit("::", 1)[-1]


def unit_from_name(signal: str) -> str:
    """Best guess of a signal's unit from its name, for sources without descriptions.

    Raw register values (``MSR::PKG_ENERGY_STATUS#``) have no unit.
    """
    base = _base_name(signal)
    if base.endswith("#"):
        return ""
    if base in ("TIME", "ELAPSED") or base.startswith("TIME"):
        return "seconds"
    for word, unit in _NAME_UNITS:
        if word in base:
            return unit
    return ""


def monotone_from_name(signal: str) -> bool:
    """Best guess of whether a signal only grows, for sources without signal_info()."""
    base = _base_name(signal)
    if base.endswith("#"):
        return False
    if base in ("TIME", "ELAPSED"):
        return True
    return any(word in base for word in _NAME_MONOTONE) and "POWER" not in base


# promtool's lint rejects metric types and abbreviated units as words of a name.
_TYPE_WORDS = {"counter": "count", "gauge": "level", "histogram": "hist", "summary": "summ"}
_ABBREVIATIONS = frozenset(("s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb"))
_ABBREVIATIONS |= {"m", "h", "d"}
_PREFIXES = ("pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo", "mega")
_PREFIXES += ("giga", "tera", "peta", "kibi", "mebi", "gibi", "tebi", "pebi")
_BASE_UNITS = ("seconds", "joules", "watts", "hertz", "bytes", "meters", "grams", "volts")
# Words promtool reads as a non-base unit (milliseconds, kilojoules, minutes, ...).
_NON_BASE_UNITS = frozenset(p + u for p in _PREFIXES for u in _BASE_UNITS) | {
    "minutes",
    "hours",
    "days",
    "weeks",
}


def _name_words(signal: str) -> list[str]:
    """Lower-case words of a signal name, lint-safe: an abbreviation or a non-base unit is
    glued to the word before it (``QUEUE_MS`` -> ``queuems``), a type word renamed."""
    words: list[str] = []
    for word in _NOT_NAME_CHAR.sub("_", signal.lower()).split("_"):
        if not word:
            continue
        if (word in _ABBREVIATIONS or word in _NON_BASE_UNITS) and words:
            words[-1] += word
        else:
            words.append(_TYPE_WORDS.get(word, word))
    if words and (words[0] in _ABBREVIATIONS or words[0] in _NON_BASE_UNITS):  # glue forward
        words[:2] = ["".join(words[:2])] if len(words) > 1 else ["signal"]
    if words and words[-1] == "total":
        words.pop()  # re-added by metric_name for counters only
    return words


@lru_cache(maxsize=4096)
def metric_name(signal: str, unit: str, monotone: bool) -> MetricName:
    base = "_".join(_name_words(signal)) or "signal"
    if unit and not base.endswith("_" + unit):
        base = f"{base}_{unit}"
    elif not monotone and base.rsplit("_", 1)[-1] in ("count", "sum", "bucket"):
        base += "_value"  # those suffixes are reserved for histograms and summaries
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
