"""One post-job run, in one direction: sources -> points -> lines -> spool -> writers.

Shared by the command line and the Slurm epilog mode (each builds the requests and the
writer settings from its own configuration) so both behave the same. The steps live in their
own modules: sources.py (call the sources), lines.py (points to line protocol), delivery.py
(write ahead into the spool, send, report per destination), lifetime.py (time limit, SIGTERM,
logging).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcmon.post_job.app import identify
from hpcmon.post_job.delivery import DestinationReport, WriterSettings, ship
from hpcmon.post_job.layout import stored_points
from hpcmon.post_job.lifetime import GUARD
from hpcmon.post_job.lines import points_to_lines
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point
from hpcmon.post_job.reading import ReadPolicy, collect_isolated
from hpcmon.post_job.sources import SourceRequest, collect
from hpcmon.post_job.writers import Deadline

log = logging.getLogger("hpcmon.post_job")


@dataclass
class RunReport:
    points: int = 0
    lines: int = 0
    source_errors: list[str] = field(default_factory=list)
    destinations: list[DestinationReport] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = list(self.source_errors)
        for destination in self.destinations:
            found.extend(destination.problems)
        return found


def job_points(read: Sequence[Point], record: Sequence[Point], job: JobContext) -> list[Point]:
    """What the hook stores of a job: the sources' points and its record, with the job's
    application (app.py), in the stored layout (layout.py)."""
    return stored_points(identify([*read, *record], job), job)


def run_job(
    job: JobContext,
    requests: Sequence[SourceRequest],
    settings: WriterSettings,
    deadline: Deadline,
    policy: ReadPolicy | None = None,
    record: Sequence[Point] = (),
) -> RunReport:
    """``policy``: read the inputs in bounded children (reading.py), as the commands do;
    None reads them in this process (library use). ``record``: points about the job that no
    source reads (Slurm's view of it), tagged like the sources' points."""
    GUARD.note = "nothing of this run is spooled yet"
    output = collect(requests, job) if policy is None else collect_isolated(requests, job, policy)
    output.points = job_points(output.points, record, job)
    lines, encode_problems = points_to_lines(output.points)
    report = RunReport(
        points=len(output.points), lines=len(lines), source_errors=output.errors + encode_problems
    )
    for error in report.source_errors:
        log.error("job=%s %s", job.job_id, error)
    report.destinations = ship(lines, settings, deadline)
    for destination in report.destinations:
        log.info("job=%s %s", job.job_id, destination.summary())
        for problem in destination.problems:
            log.error("job=%s %s", job.job_id, problem)
    return report
