"""The one way the hook reads user-controlled inputs: in a forked, bounded child that sends
back only parsed points.

The Slurm epilog runs as root, but its inputs (Darshan logs in a world-writable tree, traces and
reports in the user's scratch) are the job user's. Each source request is read by a child that
first drops to the job's uid, gid and supplementary groups with ``PR_SET_NO_NEW_PRIVS`` (when the
hook runs as root and knows the job's uid), caps its address space (``RLIMIT_AS``) and CPU time
(``RLIMIT_CPU``), refuses inputs that lead out of the configured directories, are not owned by
the reading user or root, or that user cannot read, then runs the source and sends back JSON:
points, error and warning lines, and the bytes of the source's output files. The root parent
never opens an input, never unpickles what the child sends, and writes only the output files the
request names. A child that dies (memory, CPU time, crash) costs only the inputs that make it
die: the parent retries each input alone to find them, then reads the others together.
"""

from __future__ import annotations

import ctypes
import errno
import faulthandler
import json
import logging
import math
import os
import pwd
import re
import resource
import signal
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

from hpcmon.entry import missing_package
from hpcmon.post_job import files
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.points import Point
from hpcmon.post_job.sources import SourceRequest, collect, load_entry, preload, run_source

MIB = 1024 * 1024
MAX_DEFAULT_MEMORY_MIB = 4096
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_EXIT_MEMORY, _EXIT_FAILED = 3, 4
_LIBC = ctypes.CDLL(None, use_errno=True)


def default_memory_limit_mib() -> int:
    """A quarter of the node's memory, at most 4096 MiB (the next job needs the rest)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    return max(64, min(MAX_DEFAULT_MEMORY_MIB, total // 4))


@dataclass(frozen=True)
class ReadPolicy:
    """Who reads a job's inputs and within which bounds.

    ``uid``/``gid``: the job's user; when set, the inputs are checked (links, owner, access)
    and, if the hook runs as root, the child drops to that user. None: read as the invoking
    user without checks (an administrator naming files on the command line)."""

    memory_limit_mib: int
    cpu_seconds: float | None = None
    uid: int | None = None
    gid: int | None = None
    user: str | None = None  # for the supplementary groups

    @property
    def drops(self) -> bool:
        return self.uid is not None and os.geteuid() == 0 and self.uid != 0

    @property
    def reader_uid(self) -> int | None:
        """Whose rights the child reads with (None: no checks)."""
        if self.uid is None:
            return None
        return self.uid if self.drops else os.geteuid()


def job_policy(
    uid: str | int | None,
    gid: str | int | None,
    memory_limit_mib: int,
    cpu_seconds: float | None,
) -> ReadPolicy:
    """The policy for a job's user; ValueError (one line) when a root hook would not know
    which group to read with."""
    if uid is None:
        return ReadPolicy(memory_limit_mib, cpu_seconds)
    number = int(uid)
    try:
        entry = pwd.getpwuid(number)
    except KeyError:
        entry = None
    group = int(gid) if gid not in (None, "") else (entry.pw_gid if entry else None)
    if group is None and os.geteuid() == 0:
        raise ValueError(f"uid {number} has no passwd entry and no gid was given; nothing read")
    user = entry.pw_name if entry else None
    return ReadPolicy(memory_limit_mib, cpu_seconds, number, group, user)


# ------------------------------------------------------------------ the parent
def collect_isolated(
    requests: Sequence[SourceRequest], job: JobContext, policy: ReadPolicy
) -> SourceOutput:
    """Every request read in its own bounded child (see the module docstring)."""
    return collect(requests, job, lambda request, _: _read_request(request, job, policy))


def _inputs(request: SourceRequest) -> list[tuple[int, Path]]:
    return [(slot, Path(p)) for slot, paths in enumerate(request.inputs) for p in paths]


def _restricted(request: SourceRequest, kept: Sequence[tuple[int, Path]]) -> SourceRequest:
    inputs = tuple([p for s, p in kept if s == slot] for slot in range(len(request.inputs)))
    return replace(request, inputs=inputs)


def _read_request(request: SourceRequest, job: JobContext, policy: ReadPolicy) -> SourceOutput:
    try:
        load_entry(request.name)
        preload(request.name)  # imported here: the child may not be allowed to read the code
    except ImportError as exc:
        if missing_package(exc):
            raise  # the extra is not installed: one line for the command, not per source
        return SourceOutput(errors=[f"source not available: {exc}"])
    result = _run_child(request, job, policy)
    if isinstance(result, _Reply):
        return _written(request, result)
    inputs = _inputs(request)
    if len(inputs) == 1:
        return SourceOutput(errors=[f"{inputs[0][1]}: not read: {result}"])
    # find the inputs that kill a child on their own, then read the others together
    failed: list[str] = []
    kept: list[tuple[int, Path]] = []
    for item in inputs:
        alone = _run_child(_restricted(request, [item]), job, policy)
        if isinstance(alone, str):
            failed.append(f"{item[1]}: not read: {alone}")
        else:
            kept.append(item)
    output = SourceOutput()
    if kept:
        together = _run_child(_restricted(request, kept), job, policy)
        if isinstance(together, str):
            names = ", ".join(str(p) for _, p in kept)
            output.errors.append(f"{names}: not read together: {together}")
        else:
            output = _written(_restricted(request, kept), together)
    output.errors[:0] = failed
    return output


@dataclass
class _Reply:
    output: SourceOutput
    outputs: dict[str, bytes] = field(default_factory=dict)


def _run_child(request: SourceRequest, job: JobContext, policy: ReadPolicy) -> _Reply | str:
    """The child's reply, or why it gave none (one phrase, e.g. the limit it reached)."""
    parent_end, child_end = Pipe(duplex=False)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = _EXIT_FAILED
        try:
            parent_end.close()
            code = _child(request, job, policy, child_end, parent)
        except MemoryError:
            code = _EXIT_MEMORY
        finally:
            os._exit(code)
    child_end.close()
    message: bytes | None = None
    blobs: list[bytes] = []
    try:
        message = parent_end.recv_bytes(policy.memory_limit_mib * MIB)
        count = len(json.loads(message).get("outputs", []))
        blobs = [parent_end.recv_bytes(policy.memory_limit_mib * MIB) for _ in range(count)]
    except (EOFError, OSError, ValueError, AttributeError):
        message = None
    finally:
        parent_end.close()
    _, status = os.waitpid(pid, 0)
    if message is not None and os.waitstatus_to_exitcode(status) == 0:
        try:
            return _decode(message, blobs)
        except (ValueError, TypeError, KeyError):
            return "the reading process sent an invalid reply"
    return _fate(status, policy)


def _fate(status: int, policy: ReadPolicy) -> str:
    code = os.waitstatus_to_exitcode(status)
    limit = f"the memory limit of {policy.memory_limit_mib} MiB"
    if code == _EXIT_MEMORY:
        return f"over {limit}"
    if code in (-signal.SIGXCPU, -signal.SIGKILL) and policy.cpu_seconds is not None:
        return f"the reading process was stopped at the CPU time limit of {policy.cpu_seconds:g} s"
    if code < 0:
        return f"the reading process crashed with signal {signal.Signals(-code).name} ({limit})"
    return f"the reading process failed (exit status {code})"


def _decode(message: bytes, blobs: list[bytes]) -> _Reply:
    """The child's JSON, checked field by field (it is only trusted to be the child's)."""
    data = json.loads(message)
    output = SourceOutput(
        errors=[_line(e) for e in data["errors"]], warnings=[_line(w) for w in data["warnings"]]
    )
    for measurement, tags, fields, time_ns in data["points"]:
        if not isinstance(measurement, str) or not isinstance(tags, dict):
            raise ValueError("bad point")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            raise ValueError("bad tags")
        if not isinstance(fields, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float | str | bool)
            for k, v in fields.items()
        ):
            raise ValueError("bad fields")
        if time_ns is not None and (isinstance(time_ns, bool) or not isinstance(time_ns, int)):
            raise ValueError("bad time")
        output.points.append(Point(measurement, tags, fields, time_ns))
    names = [_line(name) for name in data["outputs"]]
    return _Reply(output, dict(zip(names, blobs, strict=True)))


def _line(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not text")
    return value


def _written(request: SourceRequest, reply: _Reply) -> SourceOutput:
    """Write the output files the child produced, only those the request names."""
    output = reply.output
    for name, data in reply.outputs.items():
        if not _named_output(request, name):
            output.errors.append(f"{name}: not an output of this source; not written")
            continue
        try:
            with files.replaced_atomically(name, binary=True) as handle:
                handle.write(data)
        except OSError as exc:
            output.errors.append(f"{name}: cannot write: {exc.strerror or exc}")
    return output


def _named_output(request: SourceRequest, name: str) -> bool:
    """An output option's path, or one numbered after it (``<stem>.<n><suffix>``, one per
    input when a source writes one file each)."""
    path = Path(name)
    for value in request.options.values():
        if not isinstance(value, Path):
            continue
        if path == value:
            return True
        numbered = re.escape(value.stem) + r"\.[0-9]+" + re.escape(value.suffix)
        if path.parent == value.parent and re.fullmatch(numbered, path.name):
            return True
    return False


# ------------------------------------------------------------------ the child
def _child(
    request: SourceRequest, job: JobContext, policy: ReadPolicy, conn: Connection, parent: int
) -> int:
    """Drop, bound, check the inputs, read, send; the exit status."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is not ours
    faulthandler.disable()  # a crash is the parent's one line, not a dump on stderr
    _forget_the_hook(conn.fileno())
    _die_with(parent)
    reader = policy.reader_uid  # decided before the drop changes geteuid()
    if policy.drops:
        _drop_privileges(policy)
        _die_with(parent)  # the change of uid cleared it
    _bound(policy)
    refused: list[str] = []
    if reader is not None:
        kept = []
        for item in _inputs(request):
            problem = input_problem(item[1], request.roots, reader)
            if problem:
                refused.append(f"{item[1]}: refused: {problem}")
            else:
                kept.append(item)
        request = _restricted(request, kept)
    files.MEMORY_LIMIT_MIB = policy.memory_limit_mib
    captured: dict[str, bytes] = {}
    with files.capture_outputs(captured):
        output = run_source(request, job) if _inputs(request) else SourceOutput()
    output.errors[:0] = refused
    message = json.dumps(
        {
            "points": [[p.measurement, p.tags, p.fields, p.time_ns] for p in output.points],
            "errors": output.errors,
            "warnings": output.warnings,
            "outputs": list(captured),
        },
        default=_plain,
    ).encode()
    conn.send_bytes(message)
    for data in captured.values():
        conn.send_bytes(data)
    conn.close()
    return 0


def _forget_the_hook(keep: int) -> None:
    """Nothing of root's beyond the reply pipe: every inherited file descriptor closed
    (spool lock, config, syslog socket, an InfluxDB connection) but the pipe and stdout and
    stderr, stdin from /dev/null, and the credentials gone from the environment."""
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    logging.raiseExceptions = False  # a handler whose socket is closed says nothing
    for name in list(os.environ):
        if secret_variable(name):
            del os.environ[name]


def secret_variable(name: str) -> bool:
    """An environment variable that may hold a credential (the writers' INFLUX_*)."""
    upper = name.upper()
    return upper.startswith("INFLUX") or upper.endswith(("_TOKEN", "_PASSWORD", "_SECRET"))


def _plain(value: Any) -> Any:
    """numpy scalars and the like in points: as Python numbers or text."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _drop_privileges(policy: ReadPolicy) -> None:
    """To the job's user for good: groups first (needs root), then gid, then uid."""
    assert policy.uid is not None and policy.gid is not None
    if policy.user is not None:
        os.initgroups(policy.user, policy.gid)
    else:
        os.setgroups([policy.gid])
    os.setresgid(policy.gid, policy.gid, policy.gid)
    os.setresuid(policy.uid, policy.uid, policy.uid)
    if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if os.getresuid() != (policy.uid,) * 3 or os.getresgid() != (policy.gid,) * 3:
        raise OSError("credentials did not change")


def _die_with(parent: int) -> None:
    """SIGKILL when the hook ends (its time limit, SIGTERM): a child never outlives it."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the line above
        os._exit(_EXIT_FAILED)


def _bound(policy: ReadPolicy) -> None:
    """Address space: what the child inherited plus the limit; CPU: the run's time limit."""
    inherited = _address_space_bytes()
    limit = inherited + policy.memory_limit_mib * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if policy.cpu_seconds is not None:
        seconds = max(1, math.ceil(policy.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))


def _address_space_bytes() -> int:
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def input_problem(path: Path, roots: Sequence[str], uid: int) -> str | None:
    """Why an input must not be read (as the reading user, in the child), or None."""
    try:
        real = Path(os.path.realpath(path))
        real_roots, unusable = [], []
        for root in roots:  # one that cannot be resolved costs only the inputs under it
            try:
                real_roots.append(resolved_root(root))
            except _UntrustedLink as exc:
                unusable.append((root, str(exc)))
            except OSError as exc:
                unusable.append((root, f"{root} cannot be resolved: {exc.strerror or exc}"))
        if roots and not any(real == r or r in real.parents for r in real_roots):
            named = Path(os.path.abspath(path))  # where the pattern found it
            for root, reason in unusable:
                if Path(os.path.abspath(root)) in (named, *named.parents):
                    return f"the configured directory {reason}"
            return "a symbolic link leading out of the configured directories"
        info = os.stat(real)
    except OSError as exc:
        return f"cannot look at it: {exc.strerror or exc}"
    if info.st_uid not in (uid, 0):
        return f"owned by uid {info.st_uid}, neither the job's user (uid {uid}) nor root"
    wanted = os.R_OK | (os.X_OK if stat.S_ISDIR(info.st_mode) else 0)
    if not os.access(real, wanted):
        return f"not readable by the job's user (uid {uid})"
    return None


_MAX_LINKS = 40  # links followed while resolving one directory (the kernel's ELOOP limit)


class _UntrustedLink(Exception):
    """A configured directory leads through a link root does not own (see resolved_root)."""


def resolved_root(root: str) -> Path:
    """``root`` with the symbolic links on its way resolved, each of them owned by root.

    A pattern's directory may hold the job's own names (``/scratch/{user}/{jobid}/``): its
    user could turn ``{jobid}`` into a link to anywhere, and realpath would then move the
    configured directory there. A site's own links (``/scratch`` -> ``/lustre/scratch``) are
    root's; any other raises ``_UntrustedLink``. A part that does not exist ends the walk:
    nothing can be found under it."""
    pending = list(reversed(Path(os.path.join(os.getcwd(), root)).parts[1:]))
    current, links = Path("/"), 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            return candidate.joinpath(*reversed(pending))
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        if info.st_uid != 0:
            raise _UntrustedLink(
                f"{root} leads through {candidate}, a symbolic link owned by uid {info.st_uid}"
                " (only root's links are followed there)"
            )
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", root)
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = Path("/")
        pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
    return current
