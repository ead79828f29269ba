"""VizTracer summaries -> InfluxDB points (``viztracer_function``, ``viztracer_summary``).

Knows nothing of the JSON format: it turns the cleaning's records into points. Times are in
seconds in field names ending ``_seconds`` (VizTracer measures microseconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hpcmon.post_job.files import file_time_ns
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point
from hpcmon.post_job.viztracer.cleaning import CleaningResult, FunctionStats, total_time_error
from hpcmon.post_job.viztracer.model import ViztracerTrace

US_PER_SECOND = 1_000_000


@dataclass(slots=True)
class TraceSummary:
    """What one trace was and what the cleaning made of it."""

    trace: ViztracerTrace
    result: CleaningResult
    bytes_out: int  # size of the cleaned JSON (compact, UTF-8)


def trace_time_ns(trace: ViztracerTrace) -> int:
    """A deterministic epoch time for a trace's points.

    VizTracer's ``ts`` is CLOCK_MONOTONIC, not epoch time. With ``baseTimeNanoseconds`` (traces
    saved by the inline API) the end of the trace is converted exactly; otherwise the trace
    file's modification time is used: VizTracer writes the file when tracing ends, and it does
    not change when the hook runs again on the same job.
    """
    if trace.base_time_ns is not None:
        time_range = trace.time_range()
        if time_range is not None:
            return trace.base_time_ns + round(time_range[1] * 1000)
        return trace.base_time_ns
    return file_time_ns(trace.path)


def merge_function_stats(into: dict[str, FunctionStats], more: Iterable[FunctionStats]) -> None:
    """Add one trace's per-function totals to the job's (several traces = one job)."""
    for stats in more:
        known = into.get(stats.name)
        if known is None:
            into[stats.name] = FunctionStats(
                stats.name, stats.calls, stats.total_us, stats.self_us, stats.max_depth
            )
            continue
        known.calls += stats.calls
        known.total_us += stats.total_us
        known.self_us += stats.self_us
        known.max_depth = max(known.max_depth, stats.max_depth)


def top_functions(functions: Mapping[str, FunctionStats], count: int) -> list[FunctionStats]:
    """The ``count`` functions with the most total time (ties by name, so the choice is stable)."""
    if count <= 0:
        return []
    ranked = sorted(functions.values(), key=lambda s: (-s.total_us, s.name))
    return ranked[:count]


def function_points(
    functions: Mapping[str, FunctionStats], job: JobContext, time_ns: int, count: int
) -> list[Point]:
    points = []
    for rank, stats in enumerate(top_functions(functions, count), start=1):
        points.append(
            Point(
                "viztracer_function",
                {**job.base_tags(), "function": stats.name},
                {
                    "calls": stats.calls,
                    "total_time_seconds": stats.total_us / US_PER_SECOND,
                    "self_time_seconds": stats.self_us / US_PER_SECOND,
                    "max_depth": stats.max_depth,
                    "rank": rank,
                },
                time_ns,
            )
        )
    return points


def summary_point(summary: TraceSummary, trace_label: str, job: JobContext, time_ns: int) -> Point:
    trace, result = summary.trace, summary.result
    data = result.data
    events_out = len(data.function_calls)
    fields: dict[str, float | int | str | bool] = {
        "events_in": trace.event_count,
        "calls_in": result.calls_in,
        "ignored_events": trace.ignored_count,
        "events_out": events_out,
        "file_bytes": trace.file_bytes,
        "bytes_in": trace.json_bytes,
        "bytes_out": summary.bytes_out,
        "total_duration_seconds": data.total_duration / US_PER_SECOND,
        "threads": len(data.thread_info),
        "processes": len({info.process_id for info in data.thread_info}),
        "functions": len(result.functions),
        "pruned_calls": result.calls_pruned,
        "unfinished_calls": sum(len(t.unfinished) for t in trace.threads.values()),
        "overflow": trace.overflow,
        "time_error_ratio": total_time_error(result),
    }
    if trace.json_bytes > 0:
        fields["reduction_ratio"] = 1 - summary.bytes_out / trace.json_bytes
    if result.calls_in > 0:
        fields["event_reduction_ratio"] = 1 - events_out / result.calls_in
    else:
        fields["na_reasons"] = "event_reduction_ratio:no_calls"  # as Darshan: signal:reason
    if trace.version:
        fields["viztracer_version"] = trace.version
    return Point("viztracer_summary", {**job.base_tags(), "trace": trace_label}, fields, time_ns)
