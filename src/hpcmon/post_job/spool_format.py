"""The spool's layout and file format, and reading it: standard library only, so the exporter's
`--collector.postjob` reads a node's spool without the post-job extra (writing and replaying
are in ``spool``).

Layout: ``<spool-dir>/<kind>/`` per server API (``influx-v1``, ``influx-v2``), one file per
batch named ``<created-ns>-<pid>-<seq>.spool`` so names sort oldest first, ``rejected/`` for
lines the server refused and damaged frames (kept for a human, never replayed), ``.lock`` for
the replay lock.

Every file appears whole (written beside, then renamed), is rewritten whole under the same
name when partly sent, and is removed once sent: a reader sees each file once, whole or gone.

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

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Where the deployment examples put the spool (deploy/slurm/post-job.example.yaml); the
# exporter's --postjob.spool-dir default.
DEFAULT_SPOOL_DIR = "/var/spool/hpcmon-post-job"
KINDS = ("influx-v1", "influx-v2")  # one subdirectory per server API (the writers' ``kind``)
REJECTED = "rejected"  # <spool-dir>/<kind>/rejected/: refused lines (*.jsonl), damaged frames
REJECTED_LINES_SUFFIX = ".jsonl"  # one refused line per text line
FORMAT = "hpcmon-spool"
VERSION = 2
SUFFIX = ".spool"
NAME = re.compile(r"^\d{20}-\d+-\d+\.spool$")
KIND = re.compile(r"^[a-z0-9-]{1,32}$")
_CHECK_LENGTH = 16


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
    if not KIND.match(kind):
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
        raise SpoolFileError(f"{name}: header is not JSON") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SpoolFileError(f"{name}: not an hpcmon spool file")
    if header.get("version") != 1:
        raise SpoolFileError(f"{name}: unsupported spool version (only 1 and 2 are known)")
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
            raise SpoolFileError(f"{name}: line {number} is not a JSON string") from exc
        if not isinstance(line, str):
            raise SpoolFileError(f"{name}: line {number} is not a JSON string")
        lines.append(line)
    if len(lines) != count:
        raise SpoolFileError(f"{name}: header says {count} lines, found {len(lines)}")
    return lines


def pending_files(directory: Path) -> list[Path]:
    """Spooled batches in one kind's directory, oldest first ([] when it does not exist)."""
    try:
        names = [entry.name for entry in directory.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(directory / name for name in names if NAME.match(name))


def created_ns(path: Path) -> int:
    """When the batch was first spooled (its name; kept when a partly sent file is rewritten)."""
    return int(path.name[:20])


def read_batch(path: Path) -> DecodedBatch:
    """One spool file's lines; FileNotFoundError when it was sent (removed) meanwhile."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SpoolFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return decode_batch(data, str(path))
