"""Independent expectations for the VizTracer tests, computed straight from the trace JSON.

Nothing here uses post_job.viztracer: nesting is found by brute-force interval containment
(numpy), not by the stack the implementation uses.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).parents[1] / "data" / "viztracer"


def load_document(name: str) -> dict:
    path = DATA / name
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def complete_events(name: str) -> list[dict]:
    return [e for e in load_document(name)["traceEvents"] if e["ph"] == "X"]


def brute_force_nesting(events: list[dict]) -> list[tuple[int, int | None]]:
    """(depth, index of parent or None) per event, by interval containment on its thread.

    The parent is the shortest other call on the same (pid, tid) that contains the call;
    depth is the number of calls containing it. Assumes no two calls share an interval.
    """
    result: list[tuple[int, int | None]] = [(0, None)] * len(events)
    by_thread: dict[tuple, list[int]] = {}
    for index, event in enumerate(events):
        by_thread.setdefault((event["pid"], event["tid"]), []).append(index)
    for indices in by_thread.values():
        starts = np.array([events[i]["ts"] for i in indices])
        durations = np.array([events[i]["dur"] for i in indices])
        ends = starts + durations
        for position, index in enumerate(indices):
            contains = (starts <= starts[position]) & (ends >= ends[position])
            contains[position] = False
            depth = int(contains.sum())
            if depth == 0:
                result[index] = (0, None)
                continue
            candidates = np.flatnonzero(contains)
            parent = candidates[np.argmin(durations[candidates])]
            result[index] = (depth, indices[int(parent)])
    return result
