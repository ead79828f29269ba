"""A Darshan log itself (optional ``--darshan LOG``) -> typed records.

The log goes through the post-job hook's own pipeline (its reader: PyDarshan in a child
process, so a corrupt log cannot crash the report; its signals and points) and the points are
read back as the database's rows are. The report from a log therefore equals the report from
the points the hook wrote for it: the hook's record holds everything the rules and pictures
use (post_job/darshan/record.py).
"""

from __future__ import annotations

from pathlib import Path

from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.report.model import DarshanData
from hpcmon.report.records import darshan_from_rows, rows_from_points

_JOB = JobContext(job_id="darshan-log")


def darshan_from_logs(paths: list[Path]) -> tuple[DarshanData | None, list[str]]:
    """All logs of the job merged; problems (unreadable logs) as one line each."""
    from hpcmon.post_job.darshan import collect_darshan

    output = collect_darshan([Path(p) for p in paths], [], _JOB, diagnose=False)
    return _data(output), list(output.errors)


def darshan_from_log_objects(logs: list) -> DarshanData | None:
    """Typed records from the hook reader's ``DarshanLog`` objects (one per log file)."""
    from hpcmon.post_job.darshan import points_of_logs

    if not logs:
        return None
    return _data(points_of_logs(logs, _JOB))


def _data(output: SourceOutput) -> DarshanData | None:
    data = darshan_from_rows(rows_from_points(output.points))
    if data is not None:
        data.source = "Darshan logs"
    return data
