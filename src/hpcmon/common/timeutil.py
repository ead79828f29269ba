"""Time conversions shared by every source, so that all points use one clock convention."""

from __future__ import annotations

import time

NS_PER_SECOND = 1_000_000_000


def seconds_to_ns(seconds: float) -> int:
    """Epoch seconds (possibly fractional) to integer nanoseconds, InfluxDB's default precision."""
    return int(round(seconds * NS_PER_SECOND))


def now_ns() -> int:
    return time.time_ns()
