"""GEOPM report records -> InfluxDB points.

Measurements (every point also has the job's base tags, ``jobid`` and ``cluster``):

- ``geopm_report``: one per runtime report; tags ``agent``, ``profile``; fields
  ``geopm_version``, ``geopm_policy`` (not ``policy``: an InfluxQL keyword), ``era``,
  ``start_time`` (as written), ``hosts``, ``regions``, and numeric header or trailer keys
  (``figure_of_merit``).
- ``geopm_region``: tags ``host``, ``region``, ``region_hash``, ``agent``, ``profile``; one field
  per report key.
- ``geopm_totals``: tags ``host``, ``scope`` (application|epoch|unmarked), ``agent``, ``profile``.
- ``geopm_session`` (geopmsession reports): tag ``host``; sampling summary fields.
- ``geopm_session_signal``: tags ``host``, ``signal``; fields count, first, last, min, max,
  mean, std.

Field names are the report keys in snake case with the unit spelt out (``package-energy (J)`` ->
``package_energy_joules``; 1.x ``runtime (sec)`` -> ``runtime_seconds``; 1.x ``kB`` -> bytes).
Every numeric field is a float, even ``count`` (GEOPM averages counts over processes, so they
can be fractional): InfluxDB refuses a field that is an integer in one point and a float in
another.
"""

from __future__ import annotations

import re
from functools import lru_cache

from hpcmon.post_job.geopm_report.model import Report, SessionReport, Value
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point

# Unit as written in the key -> (name in the field, factor to that unit).
UNIT_NAMES: dict[str, tuple[str, float]] = {
    "s": ("seconds", 1.0),
    "sec": ("seconds", 1.0),
    "J": ("joules", 1.0),
    "joules": ("joules", 1.0),
    "W": ("watts", 1.0),
    "watts": ("watts", 1.0),
    "Hz": ("hertz", 1.0),
    "%": ("percent", 1.0),
    "B": ("bytes", 1.0),
    "kB": ("bytes", 1024.0),  # 1.x "geopmctl memory HWM: 144472 kB" is KiB (= 147939328 B)
    "B/s": ("bytes_per_second", 1.0),
    "B/sec": ("bytes_per_second", 1.0),
}
SESSION_SUMMARY_FIELDS = {
    "sample-time-total": "sample_time_total_seconds",
    "sample-count": "sample_count",
    "sample-period-mean": "sample_period_mean_seconds",
    "sample-period-std": "sample_period_std_seconds",
}
HEADER_TEXT_FIELDS = {
    "GEOPM Version": "geopm_version",
    "Policy": "geopm_policy",
    "Start Time": "start_time",
}
_KEY_WITH_UNIT = re.compile(r"(.*?)\s*\(([^()]*)\)")
_NOT_NAME = re.compile(r"[^a-z0-9]+")


def snake_case(text: str) -> str:
    """``CPU_FREQUENCY_STATUS@core-0`` -> ``cpu_frequency_status_core_0``."""
    name = _NOT_NAME.sub("_", text.lower()).strip("_")
    return name or "value"


@lru_cache(maxsize=4096)
def field_for_key(key: str) -> tuple[str, float]:
    """Field name and scale factor for a report key such as ``power (W)``."""
    match = _KEY_WITH_UNIT.fullmatch(key)
    if match is None:
        return snake_case(key), 1.0
    base, unit = match.groups()
    unit_name, scale = UNIT_NAMES.get(unit.strip(), (snake_case(unit), 1.0))
    return f"{snake_case(base)}_{unit_name}", scale


def numeric_fields(values: dict[str, Value]) -> dict[str, FieldValue]:
    """Report values as float fields; text values (rare agent extensions) are left out."""
    fields: dict[str, FieldValue] = {}
    for key, value in values.items():
        if isinstance(value, float):
            name, scale = field_for_key(key)
            fields[name] = value * scale if scale != 1.0 else value
    return fields


def report_points(report: Report, job: JobContext, time_ns: int | None) -> list[Point]:
    """All points of one runtime report, stamped with ``time_ns`` (the report's start)."""
    tags = job.base_tags()
    for key, value in (("agent", report.agent), ("profile", report.profile)):
        if value:
            tags[key] = value
    summary: dict[str, FieldValue] = {
        "era": report.era,
        "hosts": len(report.hosts),
        "regions": sum(len(host.regions) for host in report.hosts),
    }
    for key, value in report.header.items():
        if key in HEADER_TEXT_FIELDS:
            summary[HEADER_TEXT_FIELDS[key]] = value
        elif key not in ("Agent", "Profile"):
            try:
                summary[field_for_key(key)[0]] = float(value)
            except ValueError:
                pass
    points = [Point("geopm_report", dict(tags), summary, time_ns)]
    for host in report.hosts:
        for region in host.regions:
            region_tags = {
                **tags,
                "host": host.name,
                "region": region.name,
                "region_hash": region.hash,
            }
            points.append(
                Point("geopm_region", region_tags, numeric_fields(region.values), time_ns)
            )
        for scope, values in host.totals.items():
            scope_tags = {**tags, "host": host.name, "scope": scope}
            points.append(Point("geopm_totals", scope_tags, numeric_fields(values), time_ns))
    return points


def session_points(session: SessionReport, job: JobContext, time_ns: int | None) -> list[Point]:
    """Points of one geopmsession document (one host, one sampling period)."""
    tags = {**job.base_tags(), "host": session.host}
    summary: dict[str, FieldValue] = {}
    for key, value in session.summary.items():
        summary[SESSION_SUMMARY_FIELDS.get(key) or field_for_key(key)[0]] = value
    if session.sample_time_first:
        summary["sample_time_first"] = session.sample_time_first
    points = [Point("geopm_session", tags, summary, time_ns)]
    for signal in session.signals:
        points.append(
            Point(
                "geopm_session_signal",
                {**tags, "signal": signal.signal},
                dict(signal.stats),
                time_ns,
            )
        )
    return points
