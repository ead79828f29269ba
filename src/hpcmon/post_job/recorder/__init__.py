"""Recorder traces -> InfluxDB points (post-job source, issue 5).

``collect_recorder`` never raises for bad input: each unreadable trace or rank becomes an
error string naming the file and the problem, and the other traces are still converted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpcmon.post_job.files import input_labels, unexpected_error
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.options import option
from hpcmon.post_job.problems import Problems, SourceError
from hpcmon.post_job.recorder.dataframe import (
    MultiRecorderDFHandler,
    RecorderDataFrame,
    RecorderDataReader,
)
from hpcmon.post_job.recorder.points import trace_points
from hpcmon.post_job.recorder.reader import read_recorder_trace

__all__ = [
    "MultiRecorderDFHandler",
    "RecorderDataFrame",
    "RecorderDataReader",
    "collect_recorder",
    "read_recorder_trace",
]


def collect_recorder(
    trace_dirs: Sequence[Path],
    job: JobContext,
    *,
    top_files: int = option("sources.recorder", "top_files").default,
    per_rank_functions: bool = option("sources.recorder", "per_rank_functions").default,
) -> SourceOutput:
    output = SourceOutput()
    paths = [Path(d) for d in trace_dirs]
    for trace_dir, label in zip(paths, input_labels(paths), strict=True):
        problems = Problems(trace_dir)
        try:
            frame = RecorderDataFrame.from_recorder(trace_dir)
            problems.extend(frame.errors)
            output.points.extend(
                trace_points(
                    frame,
                    job.base_tags(),
                    label,
                    top_files=top_files,
                    per_rank_functions=per_rank_functions,
                )
            )
        except SourceError as exc:
            problems.append(str(exc))
        except Exception as exc:  # a hostile trace must never take the job's other data down
            problems.append(unexpected_error(trace_dir, "reading the trace", exc))
        output.errors.extend(problems)
    return output
