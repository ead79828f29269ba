"""Durable spool: batches a server did not acknowledge wait on disk until a later run sends them.

Layout: ``<spool-dir>/<kind>/`` per server API (``influx-v1``, ``influx-v2``), one file per
batch named ``<created-ns>-<pid>-<seq>.spool`` so names sort oldest first, ``rejected/`` for
lines the server refused (kept for a human, never replayed), ``.lock`` for the replay lock.

A spool file is written atomically (temporary file, fsync, rename, fsync of the directory), so
a crash leaves either the whole batch or nothing. Its first line is a JSON header with the line
count and SHA-256 of the body; each further line is one line-protocol line as a JSON string
(line protocol may hold raw newlines inside string fields, JSON never does). A file is deleted
only after the server acknowledged every line of it; only the holder of the lock replays, so
two epilogs on one node never send the same file twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from post_job.writers import Deadline, ServerWriter, deliver

log = logging.getLogger("hpcmon.post_job.spool")

FORMAT = "hpcmon-spool"
VERSION = 1
SUFFIX = ".spool"
_NAME = re.compile(r"^\d{20}-\d+-\d+\.spool$")
_STALE_TMP_SECONDS = 3600
# One counter per process, not per Spool: two Spool objects of one process must never build
# the same name in the same nanosecond (os.replace would silently overwrite the older batch).
_SEQUENCE = itertools.count(1)


class SpoolFileError(ValueError):
    """A spool file that cannot be trusted (truncated, corrupted, not a spool file)."""


def encode_batch(lines: Sequence[str], kind: str, created_ns: int) -> bytes:
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "created_ns": created_ns,
        "lines": len(lines),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + body


def decode_batch(data: bytes, name: str = "spool file") -> list[str]:
    """Lines of one spool file; SpoolFileError naming the file and problem for anything else."""
    newline = data.find(b"\n")
    if newline < 0:
        raise SpoolFileError(f"{name}: no header line (empty or truncated)")
    try:
        header = json.loads(data[:newline].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SpoolFileError(f"{name}: header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SpoolFileError(f"{name}: not an hpcmon spool file")
    if header.get("version") != VERSION:
        raise SpoolFileError(f"{name}: unsupported spool version {header.get('version')!r}")
    count, digest = header.get("lines"), header.get("sha256")
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(digest, str):
        raise SpoolFileError(f"{name}: header lacks 'lines' or 'sha256'")
    body = data[newline + 1 :]
    if hashlib.sha256(body).hexdigest() != digest:
        raise SpoolFileError(f"{name}: checksum mismatch (truncated or corrupted)")
    if body and not body.endswith(b"\n"):
        raise SpoolFileError(f"{name}: last line is not terminated (truncated)")
    lines: list[str] = []
    for number, raw in enumerate(body.split(b"\n")[:-1], start=2):
        try:
            line = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise SpoolFileError(f"{name}: line {number} is not a JSON string: {exc}") from exc
        if not isinstance(line, str):
            raise SpoolFileError(f"{name}: line {number} is not a JSON string")
        lines.append(line)
    if len(lines) != count:
        raise SpoolFileError(f"{name}: header says {count} lines, found {len(lines)}")
    return lines


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never part."""
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(tmp, "wb") as handle:
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
    lines_sent: int = 0
    lines_rejected: int = 0
    files_left: int = 0
    corrupt: list[str] = field(default_factory=list)
    skipped_locked: bool = False
    unavailable_reason: str | None = None


class Spool:
    """One kind of server's spool directory (``<spool-dir>/<kind>``)."""

    def __init__(self, root: str | Path, kind: str) -> None:
        self.kind = kind
        self.dir = Path(root) / kind
        self.rejected_dir = self.dir / "rejected"

    def _ensure(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self.dir.parent)  # the new directory entry must survive a crash too

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
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if _NAME.match(p.name) and p.is_file())

    def read(self, path: Path) -> list[str]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise SpoolFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        return decode_batch(data, str(path))

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
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        path = self.rejected_dir / f"{time.time_ns():020d}-{os.getpid()}-{next(_SEQUENCE)}.jsonl"
        text = "".join(
            json.dumps({"line": line, "error": reason, "from": source}, ensure_ascii=False) + "\n"
            for line, reason in rejected
        )
        atomic_write(path, text.encode("utf-8"))
        return path

    def quarantine(self, path: Path) -> Path:
        """Move an unreadable spool file aside so it never blocks the queue."""
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
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
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
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


def replay(
    spool: Spool, writer: ServerWriter, deadline: Deadline, request_timeout: float
) -> ReplayResult:
    """Send spooled batches oldest first; stop at the first outage; keep what is unacknowledged."""
    result = ReplayResult()
    files = spool.pending()
    if not files:
        return result
    with spool.replay_lock() as locked:
        if not locked:
            result.skipped_locked = True
            result.files_left = len(files)
            return result
        spool.clean_stale_tmp()
        for path in spool.pending():
            try:
                lines = spool.read(path)
            except FileNotFoundError:
                continue
            except SpoolFileError as exc:
                result.corrupt.append(str(exc))
                spool.quarantine(path)
                continue
            outcome = deliver(writer, lines, deadline, request_timeout)
            result.lines_sent += outcome.written
            result.lines_rejected += len(outcome.rejected)
            spool.reject(outcome.rejected, str(path))
            if outcome.pending:
                if len(outcome.pending) < len(lines):
                    spool.replace(path, outcome.pending)
                result.unavailable_reason = outcome.unavailable_reason
                result.files_left = len(spool.pending())
                break
            spool.remove(path)
            result.files_sent += 1
    return result
