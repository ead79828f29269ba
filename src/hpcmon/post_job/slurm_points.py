"""Slurm's view of a finished job -> its ``slurm_job`` point: one per job, with or without any
log, so the job list knows every job that ended, how it ended and where it ran."""

from __future__ import annotations

from hpcmon.common.timeutil import now_ns, seconds_to_ns, storable_ns
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point
from hpcmon.post_job.slurm import SlurmJob

SLURM_JOB = "slurm_job"


def slurm_job_point(job: SlurmJob, context: JobContext, now: float | None = None) -> Point:
    """Tags ``jobid``, ``cluster`` (and ``user``, ``app``, added with every point's); fields
    only for what Slurm told. Stamped at the job's start (the job list selects jobs by it, as
    app_run and job_diagnosis are), else its end, else now: a rerun on the same job writes
    the same point again when Slurm gave a time."""
    values: dict[str, FieldValue | None] = {
        "partition": job.partition,
        "nodelist": job.nodelist,
        "num_nodes": job.num_nodes,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "job_name": job.job_name,
        "account": job.account,
        "start": job.start,
        "end": job.end,
    }
    fields = {key: value for key, value in values.items() if value is not None}
    fields["job_id"] = job.job_id  # a tag's value cannot be selected with last()
    times = [seconds_to_ns(t) for t in (job.start, job.end, now) if t is not None]
    stamp_ns = next((ns for ns in times if storable_ns(ns)), None) or now_ns()
    return Point(SLURM_JOB, context.base_tags(), fields, stamp_ns)
