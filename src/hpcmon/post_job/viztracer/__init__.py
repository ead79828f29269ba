"""VizTracer traces -> cleaned call trees (``--viztracer-out``) and InfluxDB points.

read (reader.py) -> clean (cleaning.py) -> points (points.py); ``collect_viztracer`` is the
post-job source entry point and never raises for bad input.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from pathlib import Path

from hpcmon.post_job.files import input_labels, replaced_atomically, unexpected_error
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.options import option
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.viztracer.cleaning import (
    CleanedViztracerData,
    CleaningOptions,
    CleaningResult,
    FunctionCall,
    FunctionStats,
    clean_trace,
)
from hpcmon.post_job.viztracer.model import ViztracerTrace
from hpcmon.post_job.viztracer.points import (
    TraceSummary,
    function_points,
    merge_function_stats,
    summary_point,
    trace_time_ns,
)
from hpcmon.post_job.viztracer.reader import read_trace

__all__ = [
    "CleanedViztracerData",
    "CleaningOptions",
    "FunctionCall",
    "ViztracerTrace",
    "cleaned_output_paths",
    "collect_viztracer",
    "read_and_clean",
    "read_trace",
    "clean_trace",
]


def collect_viztracer(
    traces: Sequence[Path],
    job: JobContext,
    *,
    cleaned_out: Path | None = None,
    top_functions: int = option("sources.viztracer", "top_functions").default,
    options: CleaningOptions | None = None,
) -> SourceOutput:
    """Points for a job's VizTracer traces; writes the cleaned JSON when ``cleaned_out`` is set.

    One ``viztracer_summary`` point per trace, and ``viztracer_function`` points for the
    ``top_functions`` functions with the most total time over all the job's traces.
    """
    output = SourceOutput()
    paths = [Path(p) for p in traces]
    labels = input_labels(paths)
    out_paths = cleaned_output_paths(cleaned_out, len(paths))
    functions: dict[str, FunctionStats] = {}
    latest_ns: int | None = None
    for path, label, out_path in zip(paths, labels, out_paths, strict=True):
        summary = _clean_one(path, options, out_path, output.errors)
        if summary is None:
            continue
        time_ns = trace_time_ns(summary.trace)
        latest_ns = time_ns if latest_ns is None else max(latest_ns, time_ns)
        output.points.append(summary_point(summary, label, job, time_ns))
        merge_function_stats(functions, summary.result.functions.values())
    if latest_ns is not None:
        output.points.extend(function_points(functions, job, latest_ns, top_functions))
    return output


def cleaned_output_paths(cleaned_out: Path | None, count: int) -> list[Path | None]:
    """Where each trace's cleaned JSON goes: ``cleaned_out`` itself for one trace, else
    ``<stem>.1<suffix>``, ``<stem>.2<suffix>``, ... in the order the traces were given."""
    if cleaned_out is None:
        return [None] * count
    cleaned_out = Path(cleaned_out)
    if count == 1:
        return [cleaned_out]
    return [
        cleaned_out.with_name(f"{cleaned_out.stem}.{i}{cleaned_out.suffix}")
        for i in range(1, count + 1)
    ]


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cycle collector while a trace is loaded and cleaned.

    A million new dicts and tuples make it run repeated full collections that can find
    nothing (a trace has no reference cycles); on the 1.2M-event benchmark trace that is about
    0.3 s of 4 s. Reference counting still frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_and_clean(
    path: Path, options: CleaningOptions | None = None
) -> tuple[ViztracerTrace, CleaningResult]:
    """Read and clean one trace (raises SourceError when nothing could be read)."""
    with _cyclic_gc_paused():
        trace = read_trace(path)
        return trace, clean_trace(trace, options)


def _clean_one(
    path: Path, options: CleaningOptions | None, out_path: Path | None, errors: list[str]
) -> TraceSummary | None:
    try:
        trace, result = read_and_clean(path, options)
        text = result.data.to_json()
    except SourceError as exc:
        errors.append(str(exc))
        return None
    except Exception as exc:  # a bug here must not cost the job its other sources
        errors.append(unexpected_error(path, "reading or cleaning the trace", exc))
        return None
    errors.extend(trace.errors)
    if result.overlapping_calls:
        errors.append(
            f"{path}: {result.overlapping_calls:,} call(s) end after their parent "
            "(not a proper nesting); they were kept under that parent"
        )
    encoded = text.encode("ascii")
    if out_path is not None:
        _write_atomically(out_path, encoded, errors)
    return TraceSummary(trace, result, len(encoded))


def _write_atomically(path: Path, data: bytes, errors: list[str]) -> None:
    try:
        with replaced_atomically(path, binary=True) as handle:
            handle.write(data)
    except OSError as exc:
        errors.append(f"{path}: cannot write the cleaned trace: {exc.strerror or exc}")
