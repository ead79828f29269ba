"""GEOPM reports (``--geopm-report FILE``) -> InfluxDB points.

Reads ``geopm_report(7)`` files of the YAML era (2.x/3.x) and of the 1.x text era, and
``geopmsession -r`` reports (YAML with one or more documents, or CSV). Points carry the report's
own time: ``Start Time`` for runtime reports (local time with no zone in the file, read as UTC),
``sample-time-first`` for session documents. A report with no readable time uses the report
file's modification time instead (stable across re-runs on the same job); session documents
without time get that time plus their index in nanoseconds, so they do not overwrite each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpcmon.post_job.files import file_time_ns, unexpected_error
from hpcmon.post_job.geopm_report.model import Report
from hpcmon.post_job.geopm_report.points import report_points, session_points
from hpcmon.post_job.geopm_report.reader import parse_report_file
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.problems import Problems

__all__ = ["collect_geopm_report"]


def collect_geopm_report(reports: Sequence[Path], job: JobContext) -> SourceOutput:
    """Points for every report file; bad files become error messages, never exceptions."""
    output = SourceOutput()
    for path in reports:
        problems = Problems(path)  # the file's one capped collector, shared with the reader
        result = parse_report_file(path, problems)
        modified_ns: int | None = None  # read, and said, once per file
        for index, record in enumerate(result.reports):
            time_ns = record.start_time_ns
            if time_ns is None:
                if modified_ns is None:
                    modified_ns = file_time_ns(path)
                    problems.append(
                        f"{path}: no readable start time; points use the file's modification time"
                    )
                time_ns = modified_ns + index
            try:
                if isinstance(record, Report):
                    output.points.extend(report_points(record, job, time_ns))
                else:
                    output.points.extend(session_points(record, job, time_ns))
            except Exception as exc:  # noqa: BLE001 - one bad record must not cost the rest
                problems.append(unexpected_error(path, "converting to points", exc))
        output.errors.extend(problems)
    return output
