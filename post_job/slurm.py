"""Who the finished job was, from the environment Slurm gives epilogs; anything that is not
what Slurm would set is refused, never used (the values end up in tags and file names)."""

from __future__ import annotations

import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from hpcmon.common.jobid import slurm_job_id, slurm_job_id_problem, user_name_problem


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str | None
    uid: str | None
    start: float | None
    end: float | None
    job_name: str | None = None  # SLURM_JOB_NAME (user's text: the epilog's app: may use it)
    gid: str | None = None


def _epoch(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < 1e11 else None


class SlurmEnvironmentError(ValueError):
    """Slurm's environment holds something that is not what Slurm would set (one line)."""


def slurm_job(environ: Mapping[str, str]) -> SlurmJob | None:
    """The finished job as Slurm describes it to epilogs (None outside Slurm).

    The values end up in tags and file names: anything that is not a Slurm job id, a user
    name or a uid is refused (SlurmEnvironmentError), never used."""
    job_id = slurm_job_id(dict(environ))
    if job_id is None:
        return None
    problem = slurm_job_id_problem(job_id)
    if problem:
        raise SlurmEnvironmentError(problem)
    user = environ.get("SLURM_JOB_USER", "").strip() or None
    uid = environ.get("SLURM_JOB_UID", "").strip() or None
    if user is not None and user_name_problem(user):
        raise SlurmEnvironmentError(f"SLURM_JOB_USER: {user_name_problem(user)}")
    gid = environ.get("SLURM_JOB_GID", "").strip() or None
    for name, value in (("SLURM_JOB_UID", uid), ("SLURM_JOB_GID", gid)):
        if value is not None and not (value.isascii() and value.isdigit() and len(value) <= 10):
            raise SlurmEnvironmentError(f"{name}={value[:40]!r} is not a number")
    if user is None and uid is not None:
        try:
            user = pwd.getpwuid(int(uid)).pw_name
        except KeyError:
            user = None
    if uid is None and user is not None:
        try:
            uid = str(pwd.getpwnam(user).pw_uid)
        except KeyError:
            uid = None
    return SlurmJob(
        job_id,
        user,
        uid,
        _epoch(environ.get("SLURM_JOB_START_TIME")),
        _epoch(environ.get("SLURM_JOB_END_TIME")),
        environ.get("SLURM_JOB_NAME") or None,
        gid,
    )
