"""Recorder traces -> InfluxDB points (post-job source, issue 5).

``collect_recorder`` never raises for bad input: each unreadable trace or rank becomes an
error string naming the file and the problem, and the other traces are still converted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from post_job.model import JobContext, SourceOutput
from post_job.recorder.dataframe import (
    MultiRecorderDFHandler,
    RecorderDataFrame,
    RecorderDataReader,
)
from post_job.recorder.points import trace_points
from post_job.recorder.reader import RecorderTraceError, read_recorder_trace

__all__ = [
    "MultiRecorderDFHandler",
    "RecorderDataFrame",
    "RecorderDataReader",
    "RecorderTraceError",
    "collect_recorder",
    "read_recorder_trace",
]


def collect_recorder(
    trace_dirs: Sequence[Path],
    job: JobContext,
    *,
    top_files: int = 50,
    per_rank_functions: bool = False,
) -> SourceOutput:
    output = SourceOutput()
    names = [Path(d).name for d in trace_dirs]
    for trace_dir, name in zip(trace_dirs, names, strict=True):
        trace_dir = Path(trace_dir)
        label = name if names.count(name) == 1 else str(trace_dir)
        try:
            frame = RecorderDataFrame.from_recorder(trace_dir)
            output.errors.extend(f"recorder: {problem}" for problem in frame.errors)
            output.points.extend(
                trace_points(
                    frame,
                    job.base_tags(),
                    label,
                    top_files=top_files,
                    per_rank_functions=per_rank_functions,
                )
            )
        except RecorderTraceError as exc:
            output.errors.append(f"recorder: {exc}")
        except Exception as exc:  # a hostile trace must never take the job's other data down
            output.errors.append(
                f"recorder: {trace_dir}: unreadable trace ({type(exc).__name__}: {exc})"
            )
    return output
