"""points -> lines: the line protocol of a run's points, every line stamped with a time."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hpcmon.common.timeutil import now_ns
from hpcmon.post_job.points import Point


def points_to_lines(
    points: Sequence[Point], run_time_ns: int | None = None
) -> tuple[list[str], list[str]]:
    """Line protocol per point plus problems. A point without time gets the run's time so that
    spooled and replayed copies stay identical (sources should always give one)."""
    lines: list[str] = []
    problems: list[str] = []
    untimed: dict[str, int] = {}
    stamp = now_ns() if run_time_ns is None else run_time_ns
    for point in points:
        if point.time_ns is None:
            untimed[point.measurement] = untimed.get(point.measurement, 0) + 1
            point = dataclasses.replace(point, time_ns=stamp)
        try:
            line = point.to_line()
        except Exception as exc:  # noqa: BLE001 - one bad point must not cost the others
            problems.append(f"point {point.measurement!r}: cannot encode: {exc}")
            continue
        if line:
            lines.append(line)
    for measurement, count in sorted(untimed.items()):
        problems.append(
            f"{count} {measurement} point(s) had no timestamp; stamped with the run time"
        )
    return lines, problems
