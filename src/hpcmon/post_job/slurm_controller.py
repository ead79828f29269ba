"""The one question to slurmctld about a finished job: what the node epilog is not told.

Slurm 22.05 gives the node epilog no job name and no start or end time (only EpilogSlurmctld
gets them), so the job's first node asks once, with ``squeue`` in a fixed output format, at
most ``slurm.timeout_seconds``. The job name is the user's own text and may hold any
character, the separator included: it is the last column and takes the rest of the answer, so
nothing the user chose can shift Slurm's own columns. Times come as epoch seconds
(``SLURM_TIME_FORMAT=%s``), whatever the time zones of the node and the controller.
``squeue --json`` is not used: 22.05's ignores ``-j`` and lists another job.

A failure (no squeue, no answer in time, a job slurmctld no longer knows, an answer that is
not what squeue prints) is one line, and the job keeps what the environment told."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping

from hpcmon.post_job.slurm import (
    SlurmJob,
    job_name_value,
    slurm_count,
    slurm_name,
    slurm_nodelist,
)

log = logging.getLogger("hpcmon.post_job.epilog")

# job id | partition | account | nodes | node list | start | end | job name (the rest)
SQUEUE_FORMAT = "%A|%P|%a|%D|%N|%S|%e|%j"
_COLUMNS = 8
MAX_ANSWER = 64 * 1024


class ControllerAnswerError(ValueError):
    """squeue answered something that is not its answer about this job (one line)."""


def squeue_command(squeue: str, job_id: str) -> list[str]:
    return [squeue, "--noheader", "--states=all", "--jobs", job_id, "--format", SQUEUE_FORMAT]


def parse_squeue(job_id: str, answer: str) -> SlurmJob:
    """The job as squeue's line in SQUEUE_FORMAT describes it (ControllerAnswerError)."""
    if not answer.strip():
        raise ControllerAnswerError("slurmctld does not know the job (any more)")
    text = answer[:-1] if answer.endswith("\n") else answer
    columns = text.split("|", _COLUMNS - 1)
    if len(columns) != _COLUMNS or columns[0] != job_id:
        raise ControllerAnswerError("squeue's answer is not one line about this job")
    _, partition, account, nodes, nodelist, start, end, name = columns
    return SlurmJob(
        job_id,
        None,
        None,
        _epoch(start),
        _epoch(end),
        job_name_value(name),
        partition=slurm_name(partition),
        nodelist=slurm_nodelist(nodelist),
        num_nodes=slurm_count(nodes),
        account=slurm_name(account) if account != "(null)" else None,
    )


def _epoch(text: str) -> float | None:
    """Epoch seconds; squeue writes N/A, Unknown or 0 for a time it does not have."""
    if not (text.isascii() and text.isdigit() and len(text) <= 11):
        return None
    return float(text) if 0 < int(text) < 1e11 else None


def ask_controller(
    job_id: str, squeue: str, timeout: float, environ: Mapping[str, str] | None = None
) -> SlurmJob:
    """What slurmctld knows of the job; an empty record (and one line) when it cannot say."""
    env = dict(os.environ if environ is None else environ)
    env["SLURM_TIME_FORMAT"] = "%s"
    try:
        done = subprocess.run(
            squeue_command(squeue, job_id),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise ControllerAnswerError(f"squeue exited with {done.returncode}")
        if len(done.stdout) > MAX_ANSWER:
            raise ControllerAnswerError(f"squeue's answer is longer than {MAX_ANSWER} bytes")
        return parse_squeue(job_id, done.stdout.decode("utf-8", "replace"))
    except subprocess.TimeoutExpired:
        reason = f"no answer within {timeout:g} s"
    except OSError as exc:
        reason = f"cannot run {squeue}: {exc.strerror or exc}"
    except ControllerAnswerError as exc:
        reason = str(exc)
    log.warning(
        "job=%s slurmctld not asked: %s; job name and times unknown (app from Darshan, "
        "logs searched over the last days)",
        job_id,
        reason,
    )
    return SlurmJob(job_id, None, None, None, None)
