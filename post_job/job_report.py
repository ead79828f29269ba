"""The per-job report (hpcmon-report) the epilog writes next to the points, and only once
InfluxDB acknowledged every one of them: a report of half the points would read as complete.
A failure here is one line, never the epilog's status."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from hpcmon.post_job.delivery import WriterSettings
from hpcmon.post_job.epilog_config import REPORT_FORMATS, EpilogConfig
from hpcmon.post_job.hook import RunReport
from hpcmon.post_job.patterns import output_path
from hpcmon.post_job.slurm import SlurmJob
from hpcmon.post_job.writers import Deadline

log = logging.getLogger("hpcmon.post_job.epilog")


def report_dir_problem(directory: Path) -> str | None:
    """Why the report must not be written there: a directory others can write to would let
    a user swap the report (or the directory) for a link while root writes it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        mode = directory.stat().st_mode
    except OSError as exc:
        return f"{directory}: cannot create: {exc.strerror or exc}"
    if mode & stat.S_IWOTH:
        return f"{directory}: writable by others (mode {stat.S_IMODE(mode):o}); refused"
    return None


def write_job_report(
    config: EpilogConfig,
    job: SlurmJob,
    settings: WriterSettings,
    run: RunReport,
    deadline: Deadline,
) -> Path | None:
    """The job's report, once InfluxDB acknowledged every point (a report of half the points
    would read as complete); a bonus: any failure is one line, never the epilog's status."""
    assert config.report is not None
    delivered = run.points and all(
        not (d.spooled or d.rejected or d.lost or d.problems) for d in run.destinations
    )
    if not delivered:
        log.warning(
            "job=%s report not written: the points are not all in InfluxDB yet "
            "(run hpcmon-report --job-id %s later)",
            job.job_id,
            job.job_id,
        )
        return None
    try:
        from hpcmon.report.api import write_report
        from hpcmon.report.influx import InfluxSettings
    except ImportError as exc:
        log.warning("job=%s report not written: %s (install hpcmon[report])", job.job_id, exc)
        return None
    suffix = REPORT_FORMATS[config.report.format]
    target = Path(output_path(config.report.dir, job, config.cluster)) / f"{job.job_id}.{suffix}"
    problem = report_dir_problem(target.parent)
    if problem:
        log.warning("job=%s report not written: %s", job.job_id, problem)
        return None
    influx = InfluxSettings(
        v1_url=settings.v1_url,
        database=settings.v1_database,
        retention_policy=settings.v1_retention_policy,
        v2_url=settings.v2_url,
        org=settings.v2_org,
        bucket=settings.v2_bucket,
        token_file=config.writers.get("influx_v2", {}).get("token_file"),
    )
    try:
        written = write_report(
            job.job_id,
            config.cluster,
            influx,
            config.report.prometheus_url,
            target,
            deadline=deadline.end,
            fmt=config.report.format,
        )
    except Exception as exc:  # noqa: BLE001 - the points are in: a report failure is one line
        # the type only (the report is built from the job's points); details at debug level
        log.debug("job=%s report failed", job.job_id, exc_info=True)
        reason = str(exc) if isinstance(exc, TimeoutError) else type(exc).__name__
        log.warning("job=%s report not written: %s", job.job_id, reason)
        return None
    log.info("job=%s report written: %s", job.job_id, written)
    return written
