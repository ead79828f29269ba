"""A job's Darshan log written by the real hook into a real InfluxDB 1.6.7, and hpcmon-report's
JSON from that database or from the log (both CLIs run in-process, as their users run them)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Literal, overload

from hpcmon.post_job.app import identify
from hpcmon.post_job.cli import main as post_job_main
from hpcmon.post_job.layout import stored_points
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines
from hpcmon.post_job.slurm import SlurmJob
from hpcmon.post_job.slurm_points import slurm_job_point
from hpcmon.report.cli import main as report_main

DATABASE = "hpcmon"
CLUSTER = "test"


def hook_writes(influx, log: Path, job_id: str, spool: Path) -> None:
    """``hpcmon-post-job --darshan LOG`` into the database; every line must be acknowledged."""
    status = post_job_main(
        [
            "--job-id",
            job_id,
            "--cluster",
            CLUSTER,
            "--darshan",
            str(log),
            "--influx.v1-url",
            influx.url,
            "--influx.database",
            DATABASE,
            "--spool-dir",
            str(spool),
        ]
    )
    assert status == 0, f"hpcmon-post-job exit {status} on {log.name}"


def slurm_point(job: SlurmJob, cluster: str | None = CLUSTER) -> Point:
    """The epilog hook's slurm_job point of the job, with the ``user`` tag the hook adds to
    every point of a job (hpcmon.post_job.app.identify)."""
    context = JobContext(job.job_id, cluster, job.user)
    return identify([slurm_job_point(job, context)], context)[0]


def stored_slurm_points(job: SlurmJob, cluster: str | None = CLUSTER) -> list[Point]:
    """``slurm_point`` as the hook stores it (post_job/layout.py): ``jobid`` a field, its
    time on the job's lattice, and the job's ``job_index`` point, through which the report
    finds the job."""
    return stored_points([slurm_point(job, cluster)], JobContext(job.job_id, cluster, job.user))


def write_points(influx, points: list[Point], database: str = DATABASE) -> None:
    """Points through the project's own line protocol (Point.to_line), as the hook sends
    them; InfluxDB must accept every line."""
    request = urllib.request.Request(
        f"{influx.url}/write?db={database}&precision=ns",
        data=to_lines(points).encode("utf-8"),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204


def stored_text(text: str) -> str:
    """What InfluxDB keeps of a string field the encoder wrote: a line break as the two
    characters backslash, n (post_job/points.py)."""
    return text.replace("\n", "\\n").replace("\r", "\\r")


@overload
def report(job_id: str, out: Path, *source: str, fmt: Literal["json"] = "json") -> dict: ...
@overload
def report(job_id: str, out: Path, *source: str, fmt: Literal["text", "html"]) -> str: ...
@overload
def report(job_id: str, out: Path, *source: str, fmt: str) -> dict | str: ...
def report(job_id: str, out: Path, *source: str, fmt: str = "json") -> dict | str:
    """``hpcmon-report --format FMT`` with the given source flags; the JSON as a dict."""
    status = report_main(
        ["--job-id", job_id, "--cluster", CLUSTER, "--format", fmt, "--output", str(out), *source]
    )
    assert status == 0, f"hpcmon-report exit {status}"
    text = out.read_text()
    return json.loads(text) if fmt == "json" else text


def from_database(influx) -> tuple[str, ...]:
    return ("--influx.v1-url", influx.url, "--influx.database", DATABASE)


def from_log(log: Path) -> tuple[str, ...]:
    return ("--darshan", str(log))
