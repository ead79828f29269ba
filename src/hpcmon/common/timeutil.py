"""Time conversions shared by every source, so that all points use one clock convention."""

from __future__ import annotations

import time

NS_PER_SECOND = 1_000_000_000
# The times InfluxDB stores (int64 ns, both ends reserved): 1677-09-21 to 2262-04-11.
MIN_TIME_NS = -(2**63) + 2
MAX_TIME_NS = 2**63 - 2


def storable_ns(ns: int) -> bool:
    """Whether InfluxDB can store a point at ``ns`` (a time from a damaged file may not)."""
    return MIN_TIME_NS <= ns <= MAX_TIME_NS


def seconds_to_ns(seconds: float) -> int:
    """Epoch seconds (possibly fractional) to integer nanoseconds, InfluxDB's default precision."""
    return int(round(seconds * NS_PER_SECOND))


def now_ns() -> int:
    return time.time_ns()
