"""A job's Darshan log written by the real hook into a real InfluxDB 1.6.7, and hpcmon-report's
JSON from that database or from the log (both CLIs run in-process, as their users run them)."""

from __future__ import annotations

import json
from pathlib import Path

from hpcmon.post_job.cli import main as post_job_main
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
