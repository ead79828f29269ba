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
import zlib
from collections.abc import Collection, Mapping
from pathlib import Path

from hpcmon.common.config import ConfigError
from hpcmon.post_job.app import JOB_NAME, epilog_app
from hpcmon.post_job.delivery import WriterSettings
from hpcmon.post_job.epilog_config import (
    SCOPES,
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
from hpcmon.post_job.slurm import (
    MAX_NODES,
    SlurmEnvironmentError,
    SlurmJob,
    SlurmNode,
    node_position,
    reads_job_inputs,
    slurm_job,
    slurm_node,
)
from hpcmon.post_job.slurm_controller import ask_controller
from hpcmon.post_job.slurm_points import slurm_job_point
from hpcmon.post_job.sources import SourceRequest

__all__ = ["load_config", "run_epilog", "source_requests", "writer_settings"]

log = logging.getLogger("hpcmon.post_job.epilog")


def source_requests(
    config: EpilogConfig,
    job: SlurmJob,
    now: float | None = None,
    scopes: Collection[str] = SCOPES,
) -> list[SourceRequest]:
    """The requests of the configured sources whose ``scope`` is in ``scopes`` (a node that
    is not the job's first reads only the ``node`` ones) and whose patterns match files."""
    requests: list[SourceRequest] = []
    days = job_days(job, now, config.search_days)
    for source in config.sources:
        if source.scope not in scopes:
            continue
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
    config: EpilogConfig, job: SlurmJob | None, environ: Mapping[str, str]
) -> WriterSettings:
    """The config's writers; without a job (``flush --config``) no output file."""
    writers = config.writers
    v1, v2 = writers.get("influx_v1", {}), writers.get("influx_v2", {})
    output = writers.get("output")
    settings = WriterSettings(
        output=output_path(output, job, config.cluster) if output and job is not None else None,
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
    node = slurm_node(env)
    job_wide = reads_job_inputs(node)
    if not job_wide and not any(s.scope == "node" for s in config.sources):
        log.debug("job=%s another node reads the job's inputs; nothing to do here", job.job_id)
        return 0
    if job_wide or _needs_controller(config, job):
        job = job.completed_by(
            ask_controller(job.job_id, config.slurm.squeue, config.slurm.timeout, env)
        )
    requests = source_requests(config, job, now, SCOPES if job_wide else ("node",))
    if not job_wide and not requests:
        return 0
    app = epilog_app(config.app, job)
    context = JobContext(
        job.job_id,
        config.cluster,
        job.user,
        app,
        None if job_wide else node.name,
        0 if job_wide else _position(node),
    )
    record = [slurm_job_point(job, context)] if job_wide else []
    report = run_job(context, requests, settings, deadline, policy, record)
    log.info("job=%s done: points=%d problems=%d", job.job_id, report.points, len(report.problems))
    if config.report is not None and job_wide:
        write_job_report(config, job, settings, report, deadline)
    return failure if report.problems else 0


def _position(node: SlurmNode) -> int:
    """A node's place in its job's node list (layout.py stamps its index point there); a
    node that cannot find itself there (no Slurm does that) takes a place past any list."""
    found = node_position(node.job_nodelist or "", node.name or "")
    if found is not None:
        return found
    return MAX_NODES + zlib.crc32((node.name or "").encode()) % MAX_NODES


def _needs_controller(config: EpilogConfig, job: SlurmJob) -> bool:
    """Whether a node that reads only node-local inputs must ask slurmctld anyway: for the job
    name of ``app: "{job_name}"``, or for the job's days when a node pattern is dated. The
    job's first node always asks (the job's record needs what only slurmctld knows)."""
    dated = any(
        "{year" in pattern or "{month" in pattern or "{day" in pattern
        for source in config.sources
        if source.scope == "node"
        for patterns in source.patterns.values()
        for pattern in patterns
    )
    needs_name = config.app is not None and JOB_NAME in config.app and job.job_name is None
    return needs_name or (dated and job.start is None and job.end is None)
