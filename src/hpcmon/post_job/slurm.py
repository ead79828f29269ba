"""Who the finished job was and how it ended, as Slurm tells the epilog: its environment
first, then, for what the node epilog is not given (Slurm 22.05 gives it no job name, times,
account or exit code), one question to slurmctld (slurm_controller.py). Anything that is not
what Slurm would set is refused, never used: the values end up in tags and file names."""

from __future__ import annotations

import dataclasses
import itertools
import os
import pwd
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from hpcmon.common.jobid import (
    SLURM_NAME,
    slurm_job_id,
    slurm_job_id_problem,
    user_name_problem,
)

MAX_NODES = 1_000_000  # hosts of a node list read at most (Slurm's largest clusters: ~10^5)
MAX_JOB_NAME = 200  # Slurm's own limit is 1024; a name is the user's text: cut, never refused


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str | None
    uid: str | None
    start: float | None
    end: float | None
    job_name: str | None = None  # the user's text: the epilog's app: may use it
    gid: str | None = None
    partition: str | None = None
    nodelist: str | None = None  # Slurm's compressed form, e.g. n[1-2]
    num_nodes: int | None = None
    account: str | None = None
    exit_code: int | None = None  # the job's exit status (0-255) ...
    exit_signal: int | None = None  # ... and the signal that ended it (0: none)

    def completed_by(self, other: SlurmJob) -> SlurmJob:
        """This job with each value it lacks taken from ``other`` (the controller's view)."""
        missing = {
            f.name: getattr(other, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is None and f.name != "job_id"
        }
        return dataclasses.replace(self, **missing)


@dataclass(frozen=True)
class SlurmNode:
    """Where this epilog runs: the node's own name and the job's node list (compressed)."""

    name: str | None
    job_nodelist: str | None


def _epoch(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < 1e11 else None


class SlurmEnvironmentError(ValueError):
    """Slurm's environment holds something that is not what Slurm would set (one line)."""


# A node list adds to Slurm's names (SLURM_NAME) the brackets, commas and dashes of its
# compressed form. Anything else is not Slurm's.
_NODELIST = re.compile(r"[A-Za-z0-9_.\-\[\],]{1,4096}")


def slurm_name(value: str | None) -> str | None:
    """A node, partition or account name as Slurm writes them, else None."""
    value = (value or "").strip()
    return value if SLURM_NAME.fullmatch(value) else None


def slurm_nodelist(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if _NODELIST.fullmatch(value) and value.count("[") == value.count("]") else None


def job_name_value(value: str | None) -> str | None:
    """A job name as a value to keep (the user's own text: cut, control characters kept out)."""
    if not value:
        return None
    cleaned = "".join(ch if ch.isprintable() else "\ufffd" for ch in value[:MAX_JOB_NAME])
    return cleaned or None


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
    nodelist = job_nodelist(environ)
    return SlurmJob(
        job_id,
        user,
        uid,
        _epoch(environ.get("SLURM_JOB_START_TIME")),
        _epoch(environ.get("SLURM_JOB_END_TIME")),
        job_name_value(environ.get("SLURM_JOB_NAME")),
        gid,
        partition=slurm_name(environ.get("SLURM_JOB_PARTITION")),
        nodelist=nodelist,
        num_nodes=slurm_count(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")),
        account=slurm_name(environ.get("SLURM_JOB_ACCOUNT")),
        **job_exit(environ),
    )


_EXIT_CODE2 = re.compile(r"([0-9]{1,3}):([0-9]{1,3})")


def job_exit(environ: Mapping[str, str]) -> dict[str, int]:
    """``exit_code`` and ``exit_signal`` from SLURM_JOB_EXIT_CODE2 (``3:0``, ``0:9``), else
    from SLURM_JOB_EXIT_CODE (the job script's wait status); nothing when neither is Slurm's.
    Slurm 22.05 gives both to the node epilog too, not only to EpilogSlurmctld."""
    match = _EXIT_CODE2.fullmatch(environ.get("SLURM_JOB_EXIT_CODE2", "").strip())
    if match and int(match[1]) <= 255 and int(match[2]) <= 128:
        return {"exit_code": int(match[1]), "exit_signal": int(match[2])}
    status = slurm_count(environ.get("SLURM_JOB_EXIT_CODE"))
    if status is None or status > 0xFFFF:
        return {}
    if os.WIFSIGNALED(status):
        return {"exit_code": 0, "exit_signal": os.WTERMSIG(status)}
    if os.WIFEXITED(status):
        return {"exit_code": os.WEXITSTATUS(status), "exit_signal": 0}
    return {}


def slurm_count(value: str | None) -> int | None:
    """A count as Slurm writes it (node count, wait status): up to 7 digits, else None."""
    value = (value or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 7 else None


def job_nodelist(environ: Mapping[str, str]) -> str | None:
    """The job's nodes (compressed): SLURM_JOB_NODELIST where Slurm gives it (prolog, job
    steps, EpilogSlurmctld), SLURM_NODELIST in the node epilog of 22.05 and later."""
    for key in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        if environ.get(key, "").strip():
            return slurm_nodelist(environ[key])
    return None


def slurm_node(environ: Mapping[str, str]) -> SlurmNode:
    return SlurmNode(slurm_name(environ.get("SLURMD_NODENAME")), job_nodelist(environ))


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def first_node(nodelist: str) -> str | None:
    """The first host of a compressed node list, as ``scontrol show hostnames`` lists it
    (``n[1-2],m3`` -> ``n1``; ``r[07-08]-n[1,3]`` -> ``r07-n1``): each bracket holds ranges
    and the first range's first number is written as it stands (zero padding kept). Only the
    first host is needed, so nothing is expanded (a list of 100,000 nodes costs nothing)."""
    depth, end = 0, len(nodelist)
    for index, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = index
            break
    head = nodelist[:end]
    if not head:
        return None
    host = _BRACKET.sub(lambda m: re.split(r"[,-]", m.group(1), maxsplit=1)[0], head)
    return host if SLURM_NAME.fullmatch(host) else None


def node_position(nodelist: str, node: str) -> int | None:
    """Where ``node`` stands in the job's node list as ``scontrol show hostnames`` expands it
    (``n[1-3]``, ``n3`` -> 2; the first bracket of a name varies slowest, zero padding as the
    range's first number writes it); None when the list is malformed or lacks the node."""
    position = 0
    for item in _top_level_items(nodelist):
        hosts = _expanded(item)
        if hosts is None:
            return None
        for host in hosts:
            if host == node:
                return position
            position += 1
            if position >= MAX_NODES:
                return None  # no cluster has that many: a hostile list, not read to its end
    return None


def _top_level_items(nodelist: str) -> list[str]:
    """``a[1-2],b`` -> ``a[1-2]``, ``b``: the commas outside brackets separate names."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(nodelist[start:index])
            start = index + 1
    items.append(nodelist[start:])
    return items


def _expanded(item: str) -> Iterator[str] | None:
    """The hosts of one bracketed name, lazily; None when it is not one."""
    parts = re.split(r"(\[[^\[\]]*\])", item)  # literals at even places, brackets at odd
    choices: list[list[str]] = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            if "[" in part or "]" in part:
                return None
            choices.append([part])
            continue
        numbers = []
        for piece in part[1:-1].split(","):
            low, dash, high = piece.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                return None
            first, last = int(low), int(high) if dash else int(low)
            if last < first or last - first >= MAX_NODES:
                return None
            numbers.append((first, last, len(low)))
        choices.append(
            [f"{n:0{width}d}" for first, last, width in numbers for n in range(first, last + 1)]
        )
    if not SLURM_NAME.fullmatch("".join(c[0] for c in choices)):
        return None
    return ("".join(host) for host in itertools.product(*choices))


def reads_job_inputs(node: SlurmNode) -> bool:
    """Whether this node reads the job-wide inputs: the job's first node does, every other
    one leaves them to it. Without both the node's name and the job's node list, the node
    cannot tell and reads them (as a one-node job would)."""
    if node.name is None or node.job_nodelist is None:
        return True
    first = first_node(node.job_nodelist)
    return first is None or first == node.name
