"""Slurm epilog mode: who the job was from Slurm's environment, everything else from a YAML file.

The hook must never hurt users' jobs: it exits 0 unless ``--strict`` or ``strict: true``, and a
watchdog ends it at ``time_limit_seconds`` whatever it is doing (sending stops earlier and
spools what is left). Log locations are glob patterns with placeholders: ``{jobid}``,
``{user}``, ``{uid}``, ``{cluster}``, ``{year}``, ``{month}``, ``{day}`` (integers, so
``{month:02d}`` works) and, for Darshan, ``{logdir}``. Values from the environment are
glob-escaped, so a strange user name cannot widen a pattern.

The run flows one way: epilog_config.py (the file) and slurm.py (the job) -> patterns.py (the
job's input files) -> source requests and writer settings -> hook.run_job -> job_report.py.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from hpcmon.common.config import ConfigError
from hpcmon.post_job.app import epilog_app
from hpcmon.post_job.delivery import WriterSettings
from hpcmon.post_job.epilog_config import (
    SOURCE_INPUTS,
    EpilogConfig,
    load_config,
)
from hpcmon.post_job.hook import run_job
from hpcmon.post_job.job_report import write_job_report
from hpcmon.post_job.lifetime import Watchdog, configure_logging, sending_deadline, stop_on_sigterm
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.patterns import (
    filled_patterns,
    find_files,
    job_days,
    output_path,
    pattern_root,
)
from hpcmon.post_job.reading import ReadPolicy, default_memory_limit_mib, job_policy
from hpcmon.post_job.slurm import SlurmEnvironmentError, SlurmJob, slurm_job
from hpcmon.post_job.sources import SourceRequest

__all__ = ["load_config", "run_epilog", "source_requests", "writer_settings"]

log = logging.getLogger("hpcmon.post_job.epilog")


def source_requests(
    config: EpilogConfig, job: SlurmJob, now: float | None = None
) -> list[SourceRequest]:
    requests: list[SourceRequest] = []
    days = job_days(job, now, config.search_days)
    for source in config.sources:
        inputs = {
            key: find_files(patterns, job, config.cluster, source.logdir, days)
            for key, patterns in source.patterns.items()
        }
        log.info(
            "job=%s source=%s found %s",
            job.job_id,
            source.name,
            " ".join(f"{key}={len(paths)}" for key, paths in inputs.items()),
        )
        if not any(inputs.values()):
            continue
        options = {
            key: (
                Path(output_path(value, job, config.cluster))
                if key in ("signals_out", "cleaned_out")
                else value
            )
            for key, value in source.options.items()
        }
        ordered = tuple(inputs.get(key, []) for key in SOURCE_INPUTS[source.name])
        roots = {
            pattern_root(filled)
            for patterns in source.patterns.values()
            for filled in filled_patterns(patterns, job, config.cluster, source.logdir, days)
        }
        requests.append(SourceRequest(source.name, ordered, options, tuple(sorted(roots))))
    return requests


def writer_settings(
    config: EpilogConfig, job: SlurmJob, environ: Mapping[str, str]
) -> WriterSettings:
    writers = config.writers
    v1, v2 = writers.get("influx_v1", {}), writers.get("influx_v2", {})
    settings = WriterSettings(
        output=output_path(writers["output"], job, config.cluster) if "output" in writers else None,
        v2_url=v2.get("url"),
        v2_org=v2.get("org"),
        v2_bucket=v2.get("bucket"),
        v1_url=v1.get("url"),
        v1_database=v1.get("database"),
        v1_retention_policy=v1.get("retention_policy"),
        spool_dir=config.spool_dir,
        batch_size=writers["batch_size"],
        request_timeout=writers["request_timeout"],
    )
    try:
        settings.add_secrets(v2.get("token_file"), environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return settings


def read_policy(config: EpilogConfig, job: SlurmJob) -> ReadPolicy:
    """The job's user reads the job's inputs (ValueError when the hook cannot tell who that
    is: as root it would otherwise read them with root's rights)."""
    if job.uid is None and os.geteuid() == 0:
        raise ValueError("the job's uid is unknown (no SLURM_JOB_UID, no passwd entry)")
    memory = config.memory_limit_mib or default_memory_limit_mib()
    return job_policy(job.uid, job.gid, memory, config.time_limit)


def run_epilog(
    config_path: Path,
    strict: bool = False,
    environ: Mapping[str, str] | None = None,
    now: float | None = None,
    log_level: str = "info",
) -> int:
    """The whole epilog run; returns the exit status (0 unless strict and something failed)."""
    env = os.environ if environ is None else environ
    configure_logging(log_level)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2 if strict else 0
    strict = strict or config.strict
    configure_logging(log_level, syslog=config.syslog)
    failure = 1 if strict else 0
    with stop_on_sigterm(failure), Watchdog(config.time_limit, exit_code=failure):
        try:
            return _run(config, env, now, failure)
        except Exception as exc:  # noqa: BLE001 - never fail a user's job over a bug of ours
            log.debug("epilog run failed", exc_info=True)
            # the type only: a message may quote an input (its details are in the debug log)
            log.error("internal error: %s", type(exc).__name__)
            return failure


def _run(config: EpilogConfig, env: Mapping[str, str], now: float | None, failure: int) -> int:
    deadline = sending_deadline(config.time_limit)
    try:
        job = slurm_job(env)
    except SlurmEnvironmentError as exc:
        log.error("%s; nothing done", exc)
        return failure
    if job is None:
        log.error("SLURM_JOB_ID is not set: not running as a Slurm epilog")
        return failure
    try:
        settings = writer_settings(config, job, env)
    except ConfigError as exc:
        log.error("%s", exc)
        return failure
    try:
        policy = read_policy(config, job)
    except ValueError as exc:
        log.error("job=%s %s; no input read", job.job_id, exc)
        return failure
    requests = source_requests(config, job, now)
    context = JobContext(job.job_id, config.cluster, job.user, epilog_app(config.app, job))
    report = run_job(context, requests, settings, deadline, policy)
    log.info("job=%s done: points=%d problems=%d", job.job_id, report.points, len(report.problems))
    if config.report is not None:
        write_job_report(config, job, settings, report, deadline)
    return failure if report.problems else 0
