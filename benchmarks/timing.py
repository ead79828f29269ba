"""Timing shared by the benchmarks (each bench_*.py runs as a script, so this is importable)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls: robust to the odd slow run on a shared machine."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
