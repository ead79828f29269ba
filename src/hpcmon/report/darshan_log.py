"""A Darshan log itself (optional ``--darshan LOG``) -> typed records.

The log goes through the post-job hook's own pipeline (its reader: PyDarshan in a child
process, so a corrupt log cannot crash the report; its signals and points), the points are
laid out as the hook stores them (post_job/layout.py: per-job tags as fields, times on the
job's lattice) and read back as the database's rows are. The report from a log therefore
equals the report from the points the hook wrote for it: the hook's record holds everything
the rules and pictures use (post_job/darshan/record.py).
"""

from __future__ import annotations

from pathlib import Path

from hpcmon.post_job.layout import stored_points
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.report.model import DarshanData
from hpcmon.report.records import darshan_from_rows, rows_from_points

LOG_JOB = "darshan-log"  # the job id of logs read without one


def _job(job_id: str | None, cluster: str | None) -> JobContext:
    return JobContext(job_id=job_id or LOG_JOB, cluster=cluster or None)


def darshan_from_logs(
    paths: list[Path], job_id: str | None = None, cluster: str | None = None
) -> tuple[DarshanData | None, list[str]]:
    """All logs of the job merged; problems (unreadable logs) as one line each. ``job_id``,
    ``cluster``: the job the logs are read for (its place on the layout's lattice)."""
    from hpcmon.post_job.darshan import collect_darshan

    job = _job(job_id, cluster)
    output = collect_darshan([Path(p) for p in paths], [], job, diagnose=False)
    return _data(output, job), list(output.errors)


def darshan_from_log_objects(logs: list, job_id: str | None = None) -> DarshanData | None:
    """Typed records from the hook reader's ``DarshanLog`` objects (one per log file)."""
    from hpcmon.post_job.darshan import points_of_logs

    if not logs:
        return None
    job = _job(job_id, None)
    return _data(points_of_logs(logs, job), job)


def _data(output: SourceOutput, job: JobContext) -> DarshanData | None:
    data = darshan_from_rows(rows_from_points(stored_points(output.points, job)))
    if data is not None:
        data.source = "Darshan logs"
    return data
