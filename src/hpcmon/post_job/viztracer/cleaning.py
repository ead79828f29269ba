"""Clean a VizTracer trace: rebuild nesting, prune, aggregate, filter, simplify.

Implements ../shared/specs/viztracer-cleaning.md; the definitions (depth, "consecutive") and
the order of the rules are explained in README.md beside this file. In short:

* nesting is rebuilt per (pid, tid) by sorting calls on (start, longest first) and a stack;
* depth is 0-based from the thread's outermost recorded frame (VizTracer's own ``builtins.exec``
  and ``<module>`` frames count), and pruning keeps depths ``0 .. max_depth - 1``, the same
  frames VizTracer's ``--max_stack_depth`` keeps;
* two calls are merged ("called repeatedly in a very short time") when they are adjacent
  siblings (same parent, nothing between them at that level) of the same function, each lasts
  at most ``aggregation_threshold_us`` and the gap from one's end to the next's start is at most
  that too; longer calls stay separate (they are significant on their own). A merged call keeps
  the first start and the last end, its duration is the SUM of the calls' durations and
  ``callCount`` says how many were merged; the merged calls' children become its children;
* default order: prune, aggregate, then filter (a loop of 20,000 sub-microsecond calls,
  1.3 ms in all, survives as one call instead of vanishing), which keeps per-function totals
  closest to the raw trace;
* a call shorter than ``min_duration_us`` goes with its whole subtree (children are never
  longer than their parent).

Per-function totals over the RAW trace (calls, total and self time, deepest depth) are read
off the aggregated tree before pruning and filtering (merging loses nothing they need), so the
points describe the job exactly, not the cleaned picture.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from hpcmon.post_job.viztracer.model import Call, ThreadCalls, ThreadKey, ViztracerTrace

AGGREGATE_FIRST = "aggregate-first"
FILTER_FIRST = "filter-first"
_LINE_NUMBER = re.compile(r":(\d+)\)$")


@dataclass(frozen=True)
class CleaningOptions:
    """The spec's parameters; ``max_depth`` 0 (or less) means no depth limit."""

    min_duration_us: float = 100.0
    max_depth: int = 10
    enable_aggregation: bool = True
    aggregation_threshold_us: float = 500.0
    order: str = AGGREGATE_FIRST  # or FILTER_FIRST, kept to measure the difference

    def __post_init__(self) -> None:
        if self.order not in (AGGREGATE_FIRST, FILTER_FIRST):
            raise ValueError(f"unknown rule order {self.order!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "minDuration": self.min_duration_us,
            "maxDepth": self.max_depth,
            "enableAggregation": self.enable_aggregation,
            "aggregationThreshold": self.aggregation_threshold_us,
            "order": self.order,
        }


@dataclass(slots=True)
class FunctionCall:
    """One call (or a run of merged consecutive calls) in the cleaned trace."""

    id: str
    name: str
    start_time: float  # us, VizTracer's clock (CLOCK_MONOTONIC unless baseTimeNanoseconds)
    end_time: float
    duration: float  # sum of the merged calls' durations (== end - start when call_count is 1)
    depth: int
    thread_id: object
    process_id: object
    parent_id: str | None = None
    children_ids: list[str] = field(default_factory=list)
    is_active: bool = False  # still running when tracing stopped (an unclosed B event)
    line_number: int | None = None
    call_count: int = 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "startTime": round(self.start_time, 3),
            "endTime": round(self.end_time, 3),
            "duration": round(self.duration, 3),
            "depth": self.depth,
            "threadId": self.thread_id,
            "processId": self.process_id,
        }
        if self.parent_id is not None:
            out["parentId"] = self.parent_id
        out["childrenIds"] = self.children_ids
        out["isActive"] = self.is_active
        if self.line_number is not None:
            out["lineNumber"] = self.line_number
        out["callCount"] = self.call_count
        return out


@dataclass(slots=True)
class ThreadInfo:
    process_id: object
    thread_id: object
    process_name: str | None
    thread_name: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "processId": self.process_id,
            "threadId": self.thread_id,
            "processName": self.process_name,
            "threadName": self.thread_name,
        }


@dataclass(slots=True)
class CleanedViztracerData:
    """The spec's output structure, plus provenance (source, options, overflow, threads)."""

    function_calls: list[FunctionCall]
    threads: list[object]
    start_time: float
    end_time: float
    total_duration: float
    source: str = ""
    overflow: bool = False
    complete_from: float | None = None  # after an overflow: calls before this may miss children
    thread_info: list[ThreadInfo] = field(default_factory=list)
    options: CleaningOptions = field(default_factory=CleaningOptions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "functionCalls": [call.to_dict() for call in self.function_calls],
            "threads": self.threads,
            "startTime": round(self.start_time, 3),
            "endTime": round(self.end_time, 3),
            "totalDuration": round(self.total_duration, 3),
            "source": self.source,
            "overflow": self.overflow,
            **({} if self.complete_from is None else {"completeFrom": self.complete_from}),
            "threadInfo": [info.to_dict() for info in self.thread_info],
            "cleaning": self.options.to_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


@dataclass(slots=True)
class FunctionStats:
    """One function over the whole raw trace (all threads and processes)."""

    name: str
    calls: int = 0
    total_us: float = 0.0  # inclusive time, counting only calls not inside a call of itself
    self_us: float = 0.0  # time not spent in recorded children
    max_depth: int = 0


@dataclass(slots=True)
class CleaningResult:
    data: CleanedViztracerData
    functions: dict[str, FunctionStats]  # raw-trace totals, independent of the cleaning
    calls_in: int
    calls_pruned: int  # calls deeper than max_depth (whole subtrees)
    overlapping_calls: int  # calls that end after their parent (clock noise or bad input)


class _Node:
    """A call while the tree is being built; cheap to create because there can be millions."""

    __slots__ = ("name", "start", "end", "duration", "count", "depth", "active", "children")

    def __init__(self, name: str, start: float, end: float, duration: float, depth: int) -> None:
        self.name = name
        self.start = start
        self.end = end
        self.duration = duration
        self.count = 1
        self.depth = depth
        self.active = False
        self.children: list[_Node] = []


def clean_trace(trace: ViztracerTrace, options: CleaningOptions | None = None) -> CleaningResult:
    """Clean every thread of a trace; sorts the trace's call lists in place."""
    options = options or CleaningOptions()
    trace_end = _trace_end(trace)
    totals: dict[str, FunctionStats] = {}
    calls: list[FunctionCall] = []
    infos: list[ThreadInfo] = []
    first_start = math.inf
    last_end = -math.inf
    calls_in = pruned = overlapping = 0
    for key in sorted(trace.threads, key=_thread_sort_key):
        thread = trace.threads[key]
        thread_calls, active = _sorted_calls(thread, trace_end)
        calls_in += len(thread_calls)
        # Aggregation loses nothing the totals need, so they come from the aggregated tree.
        roots, overlaps = _build_tree(thread_calls, active, options, -math.inf)
        overlapping += overlaps
        pruned += _add_function_stats(roots, totals, options.max_depth)
        if roots:
            first_start = min(first_start, roots[0].start)
            last_end = max(last_end, max(root.end for root in roots))
        if options.order == FILTER_FIRST:
            roots, _ = _build_tree(thread_calls, active, options, options.min_duration_us)
        _emit_kept_calls(roots, thread, options, calls)
        infos.append(
            ThreadInfo(
                thread.pid,
                thread.tid,
                trace.process_names.get(thread.pid),
                trace.thread_names.get(key),
            )
        )
    if first_start > last_end:
        first_start = last_end = 0.0
    data = CleanedViztracerData(
        function_calls=calls,
        threads=_unique(info.thread_id for info in infos),
        start_time=first_start,
        end_time=last_end,
        total_duration=last_end - first_start,
        source=trace.path.name,
        overflow=trace.overflow,
        complete_from=trace.complete_from() if trace.overflow else None,
        thread_info=infos,
        options=options,
    )
    for stats in totals.values():
        stats.self_us = max(stats.self_us, 0.0)  # children longer than parents: bad input
    return CleaningResult(data, totals, calls_in, pruned, overlapping)


def _trace_end(trace: ViztracerTrace) -> float:
    """Where unfinished calls end: the last moment the trace saw (only computed when needed)."""
    if not any(thread.unfinished for thread in trace.threads.values()):
        return 0.0
    time_range = trace.time_range()
    return time_range[1] if time_range else 0.0


def _sorted_calls(thread: ThreadCalls, trace_end: float) -> tuple[list[Call], set[tuple]]:
    """The thread's calls in nesting order, unfinished ones running until ``trace_end``."""
    calls = thread.calls
    active = {(start, name) for start, name in thread.unfinished}
    if active:
        calls = calls + [(start, min(start - trace_end, 0.0), name) for start, name in active]
    calls.sort()  # (start, -duration, name): start ascending, outer call first
    return calls, active


def _build_tree(
    calls: list[Call], active: set[tuple], options: CleaningOptions, min_duration: float
) -> tuple[list[_Node], int]:
    """Rebuild one thread's nesting with a stack, merging runs of short repeated calls.

    A node with ``count > 1`` was made of short calls only, so it may grow further.

    ``calls`` must be sorted. Calls shorter than ``min_duration`` are left out with their
    subtree (only for the filter-first order). Returns (roots, calls ending after their parent).
    """
    aggregate = options.enable_aggregation
    threshold = options.aggregation_threshold_us
    roots: list[_Node] = []
    open_ends: list[float] = []  # end of each open call, innermost last
    open_nodes: list[_Node | None] = []  # its node (None: left out with an ancestor)
    overlaps = 0
    has_active = bool(active)
    for start, negative_duration, name in calls:
        end = start - negative_duration
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
            open_nodes.pop()
        is_active = has_active and (start, name) in active
        if open_nodes:
            parent = open_nodes[-1]
            if end > open_ends[-1] + 0.0015:  # beyond the 3-decimal rounding of ts and dur
                overlaps += 1
            siblings = parent.children if parent is not None else None
        else:
            siblings = roots
        node = None
        if siblings is not None and (-negative_duration >= min_duration or is_active):
            if aggregate and siblings and -negative_duration <= threshold and not is_active:
                previous = siblings[-1]
                if (
                    previous.name == name
                    and start - previous.end <= threshold
                    and (previous.count > 1 or previous.duration <= threshold)
                    and not previous.active
                ):
                    previous.count += 1
                    previous.duration -= negative_duration
                    if end > previous.end:
                        previous.end = end
                    node = previous
            if node is None:
                node = _Node(name, start, end, -negative_duration, len(open_ends))
                node.active = is_active
                siblings.append(node)
        # A call still running when tracing stopped contains everything after its start.
        open_ends.append(math.inf if is_active else end)
        open_nodes.append(node)
    return roots, overlaps


def _add_function_stats(
    roots: list[_Node], totals: dict[str, FunctionStats], max_depth: int
) -> int:
    """Add each function's calls, total, self time and deepest depth over a RAW-trace tree.

    A call nested (at any depth) in a call of the same function is not added to the total
    again, so recursion is not counted twice. Returns how many calls pruning will drop.
    """
    limit = max_depth if max_depth > 0 else math.inf
    pruned = 0
    path: list[str] = []  # names from the root to the current node's parent
    on_path: dict[str, int] = {}
    pending = list(reversed(roots))
    while pending:
        node = pending.pop()
        name = node.name
        while len(path) > node.depth:
            on_path[path.pop()] -= 1
        stats = totals.get(name)
        if stats is None:
            stats = totals[name] = FunctionStats(name)
        stats.calls += node.count
        stats.self_us += node.duration - sum(child.duration for child in node.children)
        if not on_path.get(name):
            stats.total_us += node.duration
        if node.depth > stats.max_depth:
            stats.max_depth = node.depth
        if node.depth >= limit:
            pruned += node.count
        if node.children:
            path.append(name)
            on_path[name] = on_path.get(name, 0) + 1
            pending.extend(reversed(node.children))
    return pruned


def _emit_kept_calls(
    roots: list[_Node], thread: ThreadCalls, options: CleaningOptions, out: list[FunctionCall]
) -> None:
    """Prune and filter, then number the kept calls depth-first and link them by id.

    A call deeper than max_depth, or shorter than min_duration (after aggregation), is
    dropped with its whole subtree.
    """
    limit = options.max_depth if options.max_depth > 0 else math.inf
    min_duration = options.min_duration_us
    pending: list[tuple[_Node, FunctionCall | None]] = [(root, None) for root in reversed(roots)]
    while pending:
        node, parent = pending.pop()
        if node.depth >= limit or (node.duration < min_duration and not node.active):
            continue
        call = FunctionCall(
            id=str(len(out)),
            name=node.name,
            start_time=node.start,
            end_time=node.end,
            duration=node.duration,
            depth=node.depth,
            thread_id=thread.tid,
            process_id=thread.pid,
            is_active=node.active,
            line_number=_line_number(node.name),
            call_count=node.count,
        )
        if parent is not None:
            call.parent_id = parent.id
            parent.children_ids.append(call.id)
        out.append(call)
        pending.extend((child, call) for child in reversed(node.children))


def _line_number(name: str) -> int | None:
    """VizTracer names Python functions ``func (/path/file.py:LINE)``; C functions have none."""
    match = _LINE_NUMBER.search(name)
    return int(match.group(1)) if match else None


def _thread_sort_key(key: ThreadKey) -> tuple:
    return tuple((0, value, "") if isinstance(value, int) else (1, 0, str(value)) for value in key)


def _unique(values: Any) -> list[object]:
    seen: dict[object, None] = {}
    for value in values:
        seen.setdefault(value, None)
    return list(seen)


def function_totals(data: CleanedViztracerData) -> dict[str, float]:
    """Per-function total time in the cleaned trace, counted like FunctionStats.total_us.

    A call nested (at any depth) inside a call of the same function on the same thread is not
    counted again. Relies on ``function_calls`` being in depth-first order, as produced above.
    """
    totals: dict[str, float] = {}
    path: list[str] = []
    for call in data.function_calls:
        del path[call.depth :]
        if call.name not in path:
            totals[call.name] = totals.get(call.name, 0.0) + call.duration
        path.append(call.name)
    return totals


def total_time_error(result: CleaningResult) -> float:
    """How far the cleaned trace's per-function totals are from the raw trace's, as one ratio:
    the sum over functions of |cleaned - raw| divided by the sum of the raw totals."""
    cleaned = function_totals(result.data)
    raw_sum = sum(stats.total_us for stats in result.functions.values())
    differences = sum(
        abs(cleaned.get(name, 0.0) - stats.total_us) for name, stats in result.functions.items()
    )
    return differences / raw_sum if raw_sum > 0 else 0.0
