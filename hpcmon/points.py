"""The one point type every post-job source produces, and its InfluxDB line protocol.

Encoding is delegated to influxdb-client's ``Point`` so escaping rules are the library's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from influxdb_client import Point as _InfluxPoint
from influxdb_client.domain.write_precision import WritePrecision

FieldValue = float | int | str | bool


@dataclass(slots=True)
class Point:
    measurement: str
    tags: dict[str, str] = field(default_factory=dict)
    fields: dict[str, FieldValue] = field(default_factory=dict)
    time_ns: int | None = None

    def to_line(self) -> str:
        """One line of line protocol; NaN/inf fields are dropped (InfluxDB cannot store them).

        Line breaks in string fields are written as ``\\n``/``\\r``: a raw one splits the line
        (VictoriaMetrics then drops the whole point, and a line-protocol file breaks).
        """
        point = _InfluxPoint(self.measurement)
        for key, value in sorted(self.tags.items()):
            if value is not None and value != "":
                point.tag(key, str(value))
        for key, value in self.fields.items():
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                continue
            if isinstance(value, str) and ("\n" in value or "\r" in value):
                value = value.replace("\r", "\\r").replace("\n", "\\n")
            point.field(key, value)
        if self.time_ns is not None:
            point.time(self.time_ns, WritePrecision.NS)
        return point.to_line_protocol()


def to_lines(points: Iterable[Point]) -> str:
    """Line protocol for many points, skipping points with no field (InfluxDB rejects those)."""
    lines = [line for line in (p.to_line() for p in points) if line]
    return "\n".join(lines) + ("\n" if lines else "")
