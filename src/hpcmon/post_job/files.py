"""File handling every post-job part shares, so that all sources behave alike for users.

- ``read_input``: an input file's bytes, gunzipped when it is gzip data (sites archive their
  traces and text logs compressed), with the same "<file>: <problem>" errors for every source;
- ``open_regular_file``, ``read_regular_file``: a file refused unless it is a regular file
  when opened (a user can swap a checked file for a FIFO, whose open would block the hook);
- ``replaced_atomically``: outputs (line protocol, signals file, cleaned traces) are written
  beside their target and renamed over it, so a re-run or a crash never leaves half a file;
- ``file_time_ns``: the deterministic fallback time for data that carries none (the input
  file's modification time does not change when the hook runs again on the same job);
- ``input_labels``: tag values naming a job's input files or directories, distinct even
  when two share a name, so one input's points never overwrite another's;
- ``unexpected_error``: the one "<file>: <problem>" line for an error no check foresaw.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from hpcmon.post_job.problems import Problems, SourceError

GZIP_MAGIC = b"\x1f\x8b"
# Set in a reading child (reading.py): the memory limit named by errors, and where the
# source's output files go instead of the disk (the parent writes them).
MEMORY_LIMIT_MIB: int | None = None
_CAPTURED: dict[str, bytes] | None = None


@contextlib.contextmanager
def capture_outputs(into: dict[str, bytes]) -> Iterator[None]:
    """Within the block, ``replaced_atomically`` keeps each file's bytes in ``into``."""
    global _CAPTURED
    previous, _CAPTURED = _CAPTURED, into
    try:
        yield
    finally:
        _CAPTURED = previous


def not_a_regular_file(path: str | Path) -> str | None:
    """``"<file>: <problem>"`` when ``path`` is not a regular file (a FIFO or device would
    block the hook or never end; a directory cannot be read), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return f"{path}: cannot read: Is a directory"
    if not stat.S_ISREG(mode):
        return f"{path}: not a regular file (FIFO, socket or device); not read"
    return None


def open_regular_file(path: str | Path) -> int:
    """A file descriptor of ``path`` opened for reading; SourceError when it cannot be opened
    or is not a regular file.

    Checked on the file opened, not only on its name: between a check of the name and the
    open, a user who owns the directory can put a FIFO there, and opening a FIFO waits for a
    writer (the hook would hang until its time limit). Opened without waiting (O_NONBLOCK),
    checked with fstat, then made blocking again for the reads."""
    problem = not_a_regular_file(path)  # also refuses devices before they are opened
    if problem:
        raise SourceError(problem)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceError(f"{path}: not a regular file (FIFO, socket or device); not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: str | Path, limit: int = -1) -> bytes:
    """The bytes of ``path`` (at most ``limit``; all when -1), refused unless it is a regular
    file when opened (``open_regular_file``)."""
    fd = open_regular_file(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def read_input(path: Path, errors: list[str] | Problems) -> tuple[bytes, int]:
    """The file's content (gunzipped when it starts with the gzip magic, whatever its name)
    and its size on disk. A truncated gzip stream keeps its readable prefix and adds a line to
    ``errors``; an unreadable file, one that is not a regular file, or corrupt gzip data
    raises SourceError."""
    raw = read_regular_file(path)
    file_bytes = len(raw)
    if raw[:2] == GZIP_MAGIC:
        raw = _gunzip(raw, path, errors)
    return raw, file_bytes


def _gunzip(data: bytes, path: Path, errors: list[str] | Problems) -> bytes:
    """Decompress, keeping the readable prefix of a truncated gzip stream."""
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data) + decompressor.flush()
    except zlib.error as exc:
        raise SourceError(f"{path}: corrupt gzip data: {exc}") from exc
    if not decompressor.eof:
        errors.append(f"{path}: gzip stream is truncated after {len(out):,} bytes")
    return out


@contextlib.contextmanager
def replaced_atomically(path: str | Path, *, binary: bool = False) -> Iterator[IO[Any]]:
    """A handle on a temporary file beside ``path`` that replaces ``path`` once the block ends
    without error (flushed to disk first); on error the temporary file is removed."""
    if _CAPTURED is not None:
        buffer: Any = io.BytesIO() if binary else io.StringIO()
        yield buffer
        data = buffer.getvalue()
        _CAPTURED[str(path)] = data if binary else data.encode("utf-8")
        return
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def file_time_ns(path: str | Path) -> int:
    """The file's modification time in epoch ns (0 when it cannot be read)."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def input_labels(paths: Sequence[Path]) -> list[str]:
    """Names of the inputs: file names; full paths when two share a name; with the position
    too when the same path was given twice (one set of points each, none overwritten)."""
    for labels in ([path.name for path in paths], [str(path) for path in paths]):
        if len(set(labels)) == len(labels):
            return labels
    return [f"{path}#{index}" for index, path in enumerate(paths, start=1)]


def unexpected_error(path: str | Path, doing: str, exc: BaseException) -> str:
    """``<file>: unexpected error while <doing> (<Type>: <message>)``: the catch-all line for
    a bug or an input no check foresaw (the job's other inputs are still processed). The
    exception's type only: its message may quote the file (a parser's "could not convert
    'xyz'")."""
    if isinstance(exc, MemoryError):
        limit = f" of {MEMORY_LIMIT_MIB} MiB" if MEMORY_LIMIT_MIB else ""
        return f"{path}: not read: over the memory limit{limit} while {doing}"
    return f"{path}: unexpected error while {doing} ({type(exc).__name__})"
