"""Durable spool: the write-ahead log of every line bound for a server, until it acknowledges.

Layout and file format: see ``spool_format`` (reading it needs nothing but the standard
library). A store at its series limit refuses nothing for good: those lines stay queued
(earlier releases filed them under ``rejected/``; ``flush`` queues them again).

A run writes all its lines here *before* the first request (each file written, fsynced,
renamed, directory fsynced), and a file is deleted only after the server acknowledged every
line of it; a file partly acknowledged is rewritten with the rest. So a SIGKILL at any
instant loses nothing: the next run or ``flush`` sends what is left (a line acknowledged just
before the kill may be sent again; InfluxDB keeps one copy of identical points).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcmon.post_job.spool_format import (  # noqa: F401 - re-exported for the spool's users
    FORMAT,
    NAME,
    REJECTED,
    REJECTED_LINES_SUFFIX,
    SUFFIX,
    VERSION,
    DecodedBatch,
    SpoolFileError,
    decode_batch,
    encode_batch,
    pending_files,
    read_batch,
)
from hpcmon.post_job.writers import Deadline, ServerWriter, capacity_problem, deliver

log = logging.getLogger("hpcmon.post_job.spool")

_STALE_TMP_SECONDS = 3600
# One counter per process, not per Spool: two Spool objects of one process must never build
# the same name in the same nanosecond (os.replace would silently overwrite the older batch).
_SEQUENCE = itertools.count(1)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Explicit, not the umask's: the lines are the jobs' (paths, users), so not for every user of
# the node; the exporter's postjob collector reads them as the spool's group.
FILE_MODE, DIR_MODE = 0o640, 0o750


def make_dir(path: Path) -> None:
    """``path`` and its missing parents, each mode 0750 (keeping a set-group-ID bit, by which
    the spool's group passes to what is made in it), each new entry fsynced in its parent (a
    spool root made by this run must survive a crash with what is written in it)."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE | (directory.stat().st_mode & stat.S_ISGID))
        _fsync_dir(directory.parent)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never part."""
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@dataclass
class ReplayResult:
    files_sent: int = 0
    lines_sent: int = 0  # acknowledged, from files of earlier runs
    lines_rejected: int = 0
    own_lines_sent: int = 0  # acknowledged, from the files this run wrote ahead
    own_lines_rejected: int = 0
    files_left: int = 0
    corrupt: list[str] = field(default_factory=list)
    skipped_locked: bool = False
    unavailable_reason: str | None = None
    capacity: bool = False  # stopped because the store is at a series limit


class Spool:
    """One kind of server's spool directory (``<spool-dir>/<kind>``)."""

    def __init__(self, root: str | Path, kind: str) -> None:
        self.kind = kind
        self.dir = Path(root) / kind
        self.rejected_dir = self.dir / REJECTED

    def _ensure(self) -> None:
        if not self.dir.is_dir():
            make_dir(self.dir)

    def add(self, lines: Sequence[str]) -> Path | None:
        """Store one batch durably; returns its path (None for no lines)."""
        if not lines:
            return None
        self._ensure()
        created = time.time_ns()
        path = self.dir / f"{created:020d}-{os.getpid()}-{next(_SEQUENCE)}{SUFFIX}"
        atomic_write(path, encode_batch(lines, self.kind, created))
        return path

    def pending(self) -> list[Path]:
        """Spooled batches, oldest first."""
        return [path for path in pending_files(self.dir) if path.is_file()]

    def read(self, path: Path) -> DecodedBatch:
        return read_batch(path)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        _fsync_dir(path.parent)

    def replace(self, path: Path, lines: Sequence[str]) -> None:
        """Keep only the lines still unacknowledged, under the same name (same place in order)."""
        atomic_write(path, encode_batch(lines, self.kind, time.time_ns()))

    def reject(self, rejected: Sequence[tuple[str, str]], source: str) -> Path | None:
        """Park lines the server refused, with its reasons, for a human to look at."""
        if not rejected:
            return None
        make_dir(self.rejected_dir)
        path = (
            self.rejected_dir
            / f"{time.time_ns():020d}-{os.getpid()}-{next(_SEQUENCE)}{REJECTED_LINES_SUFFIX}"
        )
        text = "".join(
            json.dumps({"line": line, "error": reason, "from": source}, ensure_ascii=False) + "\n"
            for line, reason in rejected
        )
        atomic_write(path, text.encode("utf-8"))
        return path

    def requeue_capacity_refusals(self) -> int:
        """Queue again the lines an earlier release filed under ``rejected/`` because the store
        was at a series limit (good data), under the rejected file's own name so they keep
        their place in order; the other rejected lines stay where they are. Returns the number
        of lines queued. A kill half-way queues some lines twice at worst (identical points).
        Under the replay lock: two runs at once would both queue every line again (and count
        it twice); the run that finds the lock taken leaves the lines to the one holding it."""
        if not self.rejected_dir.is_dir():
            return 0
        with self.replay_lock() as locked:
            return self._requeue_capacity_refusals() if locked else 0

    def _requeue_capacity_refusals(self) -> int:
        queued = 0
        for path in sorted(self.rejected_dir.glob("*.jsonl")):
            try:
                rows = path.read_text(encoding="utf-8").splitlines()
                entries = [json.loads(row) for row in rows if row.strip()]
            except (OSError, UnicodeDecodeError, ValueError):
                continue  # damaged or edited by hand: left for the human it is kept for
            again = [e["line"] for e in entries if _refused_for_capacity(e)]
            if not again:
                continue
            name = path.name.removesuffix(".jsonl") + SUFFIX
            if not NAME.match(name):
                name = f"{time.time_ns():020d}-{os.getpid()}-{next(_SEQUENCE)}{SUFFIX}"
            self._ensure()
            atomic_write(self.dir / name, encode_batch(again, self.kind, time.time_ns()))
            keep = [e for e in entries if not _refused_for_capacity(e)]
            if keep:
                text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in keep)
                atomic_write(path, text.encode("utf-8"))
            else:
                self.remove(path)
            queued += len(again)
        return queued

    def set_aside(self, path: Path, frames: Sequence[bytes]) -> Path:
        """Keep the damaged frames of a spool file, as they were, for inspection."""
        make_dir(self.rejected_dir)
        target = self.rejected_dir / f"{path.name}.{time.time_ns()}.damaged"
        atomic_write(target, b"".join(frame + b"\n" for frame in frames))
        return target

    def quarantine(self, path: Path) -> Path:
        """Move an unreadable spool file aside so it never blocks the queue."""
        make_dir(self.rejected_dir)
        target = self.rejected_dir / (path.name + ".corrupt")
        os.replace(path, target)
        return target

    def clean_stale_tmp(self) -> None:
        """Remove temporary files left by a process killed mid-write (older than an hour)."""
        if not self.dir.is_dir():
            return
        limit = time.time() - _STALE_TMP_SECONDS
        for path in self.dir.glob(".tmp-*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < limit:
                    path.unlink()

    @contextlib.contextmanager
    def replay_lock(self) -> Iterator[bool]:
        """Non-blocking exclusive lock; yields False when another process is replaying."""
        self._ensure()
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _refused_for_capacity(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("line"), str)
        and capacity_problem(str(entry.get("error", ""))) is not None
    )


def replay(
    spool: Spool,
    writer: ServerWriter,
    deadline: Deadline,
    request_timeout: float,
    own: dict[Path, Sequence[str]] | None = None,
) -> ReplayResult:
    """Send spooled batches oldest first, including files written while sending (listed
    again until none is new); stop at the first outage; keep what is unacknowledged.
    ``own``: the files this run wrote ahead and their lines (not read back from disk),
    counted apart from earlier runs' files."""
    own = own or {}
    result = ReplayResult()
    if not spool.pending():
        return result
    with spool.replay_lock() as locked:
        if not locked:
            result.skipped_locked = True
            result.files_left = len(spool.pending())
            return result
        spool.clean_stale_tmp()
        done: set[Path] = set()
        while result.unavailable_reason is None:
            files = [path for path in spool.pending() if path not in done]
            if not files:
                break
            for path in files:
                done.add(path)
                if not _replay_file(spool, path, writer, deadline, request_timeout, own, result):
                    break
        result.files_left = len(spool.pending())
    return result


def _replay_file(
    spool: Spool,
    path: Path,
    writer: ServerWriter,
    deadline: Deadline,
    request_timeout: float,
    own: dict[Path, Sequence[str]],
    result: ReplayResult,
) -> bool:
    """Send one spool file; False when the server stopped taking data."""
    try:
        # this run's own files hold exactly the lines it just wrote: no need to read them back
        batch = DecodedBatch(list(own[path])) if path in own else spool.read(path)
    except FileNotFoundError:  # sent by another process between listing and reading
        return True
    except SpoolFileError as exc:
        result.corrupt.append(f"{exc}; moved to {spool.quarantine(path)}")
        return True
    if batch.damaged:
        where = spool.set_aside(path, batch.damaged)
        result.corrupt.append(f"{'; '.join(batch.problems)} ({where})")
        spool.replace(path, batch.lines)
    elif batch.problems:
        result.corrupt.extend(batch.problems)
    mine = path in own
    outcome = deliver(writer, batch.lines, deadline, request_timeout)
    if mine:
        result.own_lines_sent += outcome.written
        result.own_lines_rejected += len(outcome.rejected)
    else:
        result.lines_sent += outcome.written
        result.lines_rejected += len(outcome.rejected)
    spool.reject(outcome.rejected, str(path))
    if outcome.pending:
        if len(outcome.pending) < len(batch.lines):
            spool.replace(path, outcome.pending)
        result.unavailable_reason = outcome.unavailable_reason
        result.capacity = outcome.capacity
        return False
    spool.remove(path)
    if not mine:
        result.files_sent += 1
    return True
