"""Durable spool: the write-ahead log of every line bound for a server, until it acknowledges.

Layout: ``<spool-dir>/<kind>/`` per server API (``influx-v1``, ``influx-v2``), one file per
batch named ``<created-ns>-<pid>-<seq>.spool`` so names sort oldest first, ``rejected/`` for
lines the server refused and damaged frames (kept for a human, never replayed), ``.lock`` for
the replay lock. A store at its series limit refuses nothing for good: those lines stay queued
(earlier releases filed them under ``rejected/``; ``flush`` queues them again).

A run writes all its lines here *before* the first request (each file written, fsynced,
renamed, directory fsynced), and a file is deleted only after the server acknowledged every
line of it; a file partly acknowledged is rewritten with the rest. So a SIGKILL at any
instant loses nothing: the next run or ``flush`` sends what is left (a line acknowledged just
before the kill may be sent again; InfluxDB keeps one copy of identical points).

Format (version 2), one frame per text line, each with its own check, so a damaged byte costs
only the frame it falls in (one line, or two when it hits the newline between them):

    hpcmon-spool 2 <kind> <created-ns> <line-count> <check>
    <check> <line protocol line as a JSON string (ASCII)>
    ...

``<check>`` is 16 hex digits of BLAKE2b over the rest of the frame. Good lines of a damaged
file are replayed; the damaged frames go to ``rejected/<file>.damaged`` as they were. Version 1
files (a JSON header with one SHA-256 over the body) written by earlier releases are still
read; a damaged one is set aside whole.
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

from hpcmon.post_job.writers import Deadline, ServerWriter, capacity_problem, deliver

log = logging.getLogger("hpcmon.post_job.spool")

FORMAT = "hpcmon-spool"
VERSION = 2
SUFFIX = ".spool"
_NAME = re.compile(r"^\d{20}-\d+-\d+\.spool$")
_KIND = re.compile(r"^[a-z0-9-]{1,32}$")
_CHECK_LENGTH = 16
_STALE_TMP_SECONDS = 3600
# One counter per process, not per Spool: two Spool objects of one process must never build
# the same name in the same nanosecond (os.replace would silently overwrite the older batch).
_SEQUENCE = itertools.count(1)


class SpoolFileError(ValueError):
    """A spool file that cannot be trusted at all (not a spool file, unknown version)."""


@dataclass
class DecodedBatch:
    """What could be read from one spool file."""

    lines: list[str]  # every line whose frame checked out, in order
    damaged: list[bytes] = field(default_factory=list)  # frames that failed their check
    problems: list[str] = field(default_factory=list)  # "<file>: <problem>" lines


def _check(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECK_LENGTH // 2).hexdigest().encode("ascii")


def _frame(payload: bytes) -> bytes:
    return _check(payload) + b" " + payload + b"\n"


def encode_batch(lines: Sequence[str], kind: str, created_ns: int) -> bytes:
    if not _KIND.match(kind):
        raise ValueError(f"bad spool kind {kind!r}")
    header = f"{FORMAT} {VERSION} {kind} {int(created_ns)} {len(lines)}".encode("ascii")
    parts = [header + b" " + _check(header) + b"\n"]
    parts.extend(_frame(json.dumps(line).encode("ascii")) for line in lines)
    return b"".join(parts)


def _unframe(raw: bytes) -> str | None:
    """The line in one frame, or None when the frame is damaged."""
    if len(raw) < _CHECK_LENGTH + 3 or raw[_CHECK_LENGTH : _CHECK_LENGTH + 1] != b" ":
        return None
    payload = raw[_CHECK_LENGTH + 1 :]
    if _check(payload) != raw[:_CHECK_LENGTH]:
        return None
    try:
        line = json.loads(payload.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return line if isinstance(line, str) else None


def _header_count(raw: bytes) -> int | None:
    """The line count of a good version 2 header frame, None when it is damaged."""
    body, _, check = raw.rpartition(b" ")
    if _check(body) != check:
        return None
    words = body.split(b" ")
    if len(words) != 5 or not words[4].isdigit():
        return None
    return int(words[4])


def decode_batch(data: bytes, name: str = "spool file") -> DecodedBatch:
    """Lines of one spool file, keeping the good frames of a damaged one; SpoolFileError for a
    file that is not a spool file at all."""
    if data.startswith(b"{"):
        return DecodedBatch(_decode_v1(data, name))
    frames = data.split(b"\n")
    tail = frames.pop()  # b"" when the file ends with a newline, as every frame does
    expected = _header_count(frames[0]) if frames else None
    result = DecodedBatch([])
    for raw in frames[1:]:
        line = _unframe(raw)
        if line is None:
            result.damaged.append(raw)
        else:
            result.lines.append(line)
    if tail:
        result.damaged.append(tail)
        result.problems.append(f"{name}: last frame is not terminated (truncated)")
    found = len(result.lines) + len(result.damaged)
    if expected is None:
        if not result.lines:
            raise SpoolFileError(f"{name}: not an hpcmon spool file, or damaged beyond use")
        result.damaged.insert(0, frames[0])
        result.problems.append(f"{name}: header frame is damaged")
    elif expected != found:
        result.problems.append(f"{name}: header says {expected} line(s), found {found}")
    if result.damaged:
        result.problems.append(f"{name}: {len(result.damaged)} damaged frame(s) set aside")
    return result


def _decode_v1(data: bytes, name: str) -> list[str]:
    """Version 1: JSON header with the SHA-256 of the whole body (all or nothing)."""
    newline = data.find(b"\n")
    if newline < 0:
        raise SpoolFileError(f"{name}: no header line (empty or truncated)")
    try:
        header = json.loads(data[:newline].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SpoolFileError(f"{name}: header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SpoolFileError(f"{name}: not an hpcmon spool file")
    if header.get("version") != 1:
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

    def read(self, path: Path) -> DecodedBatch:
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

    def requeue_capacity_refusals(self) -> int:
        """Queue again the lines an earlier release filed under ``rejected/`` because the store
        was at a series limit (good data), under the rejected file's own name so they keep
        their place in order; the other rejected lines stay where they are. Returns the number
        of lines queued. A kill half-way queues some lines twice at worst (identical points)."""
        if not self.rejected_dir.is_dir():
            return 0
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
            if not _NAME.match(name):
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
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        target = self.rejected_dir / f"{path.name}.{time.time_ns()}.damaged"
        atomic_write(target, b"".join(frame + b"\n" for frame in frames))
        return target

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
