"""Where job_stats text comes from: ``lctl get_param``, procfs, or files (a path or a glob).

Every ``read()`` re-reads its source and yields one ``RawText`` per thing it read, with the
text or an error: one file at a time, so a big server's text is never all in memory at once.
Nothing here raises, and lctl runs under a hard timeout and an output cap (its whole process
group is killed), so a hung or runaway Lustre never hangs a scrape or fills the memory.
"""

from __future__ import annotations

import glob
import os
import re
import selectors
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hpcmon.common.process import exited, kill_group

LCTL_PARAMS = ("mdt.*.job_stats", "obdfilter.*.job_stats")
# A line that starts a parameter in ``lctl get_param`` output (``name=``), after its newline.
_PARAM_START = re.compile(rb"\n[A-Za-z_][\w.-]*=")
MAX_ERROR_TEXT = 300


@dataclass(slots=True)
class RawText:
    """One read: ``origin`` names it (``lctl`` or a path); component/target when the path
    already says which target it is (procfs). A failed read has ``text`` None, an ``error``
    and a ``reason`` (``start``, ``exit``, ``timeout``, ``output_limit``, ``read``).
    ``bare`` is False when only ``lctl get_param`` output is valid (no target is ever named
    after the origin)."""

    origin: str
    text: str | None
    error: str | None = None
    component: str | None = None
    target: str | None = None
    reason: str | None = None
    bare: bool = True


class Source(Protocol):
    def read(self, deadline: float | None = None) -> Iterator[RawText]: ...

    def close(self) -> None: ...


DEFAULT_MAX_BYTES = 512 << 20


def _read_file(path: str, max_bytes: int) -> tuple[str | None, str | None, str | None]:
    """(text, error, reason); undecodable bytes stay visible as ``\\xHH``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        return None, f"{path}: cannot read: {exc.strerror or exc}", "read"
    if len(data) > max_bytes:
        return (
            None,
            f"{path}: larger than --jobstats.max-output-bytes ({max_bytes})",
            "output_limit",
        )
    return data.decode("utf-8", "backslashreplace"), None, None


class _Failed(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class LctlSource:
    """``lctl get_param mdt.*.job_stats`` then ``lctl get_param obdfilter.*.job_stats``,
    under one deadline and one output cap.

    Each lctl runs in its own process group; the whole group is killed when lctl exits (a
    grandchild holding the pipe cannot keep the read open), at the deadline, past the cap and
    on ``close()`` (exporter shutdown). Any failure fails the whole source, whatever was
    printed: half an output must never look complete. The one non-zero exit that is not a
    failure is Lustre's own "No such file or directory" for a pattern that matched nothing,
    with nothing on stdout (an OSS has no MDT, an MDS no OST).

    The output is cut into pieces at parameter starts while it is read (a piece is a few MB:
    one or more whole targets), so a big server's output is never held twice (bytes, then
    text) and each piece is freed once parsed."""

    PIECE_BYTES = 8 << 20
    EXIT_GRACE = 1.0  # seconds of reading after lctl exits (a grandchild may hold the pipe)

    def __init__(
        self, lctl: str = "lctl", timeout: float = 10.0, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.lctl = lctl
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def read(self, deadline: float | None = None) -> Iterator[RawText]:
        """``deadline`` (time.monotonic) cuts the timeout short, e.g. to answer a scrape in
        time; the run then fails as a timeout."""
        own = time.monotonic() + self.timeout
        deadline = own if deadline is None else min(deadline, own)
        pieces: list[str] = []
        budget = self.max_bytes
        try:
            for param in LCTL_PARAMS:
                found = self._run(param, deadline, budget)
                budget -= sum(len(piece) for piece in found)
                pieces += found
            if not any(piece.strip() for piece in pieces):
                raise _Failed(f"{self.lctl}: no MDT or OST job_stats on this server", "exit")
        except _Failed as exc:
            yield RawText("lctl", None, str(exc), reason=exc.reason, bare=False)
            return
        pieces.reverse()
        while pieces:
            yield RawText("lctl", pieces.pop(), bare=False)

    def close(self) -> None:
        """Kill every running lctl (process group and all); later reads fail at once."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            kill_group(proc)

    def _run(self, param: str, deadline: float, budget: int) -> list[str]:
        name = self.lctl
        with self._lock:
            if self._closed:
                raise _Failed(f"{name}: exporter shutting down", "start")
            try:
                proc = subprocess.Popen(
                    [name, "get_param", param],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                raise _Failed(f"cannot run {name}: {exc.strerror or exc}", "start") from None
            assert proc.stdout is not None and proc.stderr is not None  # both piped
            self._running.add(proc)
        try:
            pieces, errors = self._collect(proc, deadline, budget)
        finally:
            kill_group(proc)
            with self._lock:
                self._running.discard(proc)
            proc.stdout.close()
            proc.stderr.close()
        code = proc.returncode
        if code == 0:
            return pieces
        message = errors.decode("utf-8", "replace").strip()[:MAX_ERROR_TEXT]
        if not any(pieces) and "No such file or directory" in message:
            return []  # nothing matches this pattern on this server
        raise _Failed(
            f"{name} get_param {param} exited with {code}: {message or 'no message'}", "exit"
        )

    def _collect(
        self, proc: subprocess.Popen[bytes], deadline: float, budget: int
    ) -> tuple[list[str], bytearray]:
        """Read stdout (cut in pieces) and stderr until both close or lctl has exited and
        its grace is over; raises _Failed on the deadline or the cap."""
        name = self.lctl
        assert proc.stdout is not None and proc.stderr is not None  # _run pipes both
        pieces: list[str] = []
        pending, errors = bytearray(), bytearray()
        scanned = cut = total = 0  # pending[:scanned] searched; cut: last parameter start in it
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            grace_end = float("inf")  # once lctl has exited: what it wrote is all there is
            while selector.get_map():
                now = time.monotonic()
                if now >= grace_end:
                    break
                if now >= deadline:
                    raise _Failed(
                        f"{name} did not answer within {self.timeout:g} s; killed", "timeout"
                    )
                if grace_end == float("inf") and exited(proc):
                    grace_end = now + self.EXIT_GRACE
                for key, _ in selector.select(min(deadline - now, grace_end - now, 0.1)):
                    data = os.read(key.fd, 1 << 20)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is proc.stderr:
                        errors += data[: MAX_ERROR_TEXT - len(errors)]
                    else:
                        total += len(data)
                        if total > budget:
                            raise _Failed(
                                f"{name} printed more than --jobstats.max-output-bytes "
                                f"({self.max_bytes} bytes); killed",
                                "output_limit",
                            )
                        pending += data
                        start = max(pending.rfind(b"\n", 0, scanned), 0)
                        for match in _PARAM_START.finditer(pending, start):
                            cut = match.start() + 1
                        scanned = len(pending)
                        if len(pending) >= self.PIECE_BYTES and cut:
                            pieces.append(pending[:cut].decode("utf-8", "backslashreplace"))
                            del pending[:cut]
                            scanned, cut = len(pending), 0
        while not exited(proc):  # not reaped here: kill_group must still find the group
            if time.monotonic() >= deadline:
                raise _Failed(f"{name} did not exit within {self.timeout:g} s; killed", "timeout")
            time.sleep(0.005)
        pieces.append(pending.decode("utf-8", "backslashreplace"))
        return pieces, errors


class ProcfsSource:
    """``<root>/fs/lustre/{mdt,obdfilter}/*/job_stats``; the path names each target."""

    def __init__(self, root: str = "/proc", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root) / "fs" / "lustre"
        self.max_bytes = max_bytes

    def close(self) -> None:
        pass

    def read(self, deadline: float | None = None) -> Iterator[RawText]:
        found = False
        for kind, component in (("mdt", "mdt"), ("obdfilter", "ost")):
            for path in sorted(glob.glob(str(self.root / kind / "*" / "job_stats"))):
                found = True
                # No local name keeps the text: the caller frees it once parsed.
                text, error, reason = _read_file(path, self.max_bytes)
                yield RawText(path, text, error, component, Path(path).parent.name, reason)
        if not found:
            yield RawText(
                str(self.root),
                None,
                f"no job_stats under {self.root}/{{mdt,obdfilter}}/*/",
                reason="read",
            )


class FileSource:
    """A file or glob of files holding ``lctl get_param`` output (or a bare job_stats file)."""

    def __init__(self, pattern: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.pattern = pattern
        self.max_bytes = max_bytes

    def close(self) -> None:
        pass

    def read(self, deadline: float | None = None) -> Iterator[RawText]:
        paths = sorted(glob.glob(self.pattern)) if glob.has_magic(self.pattern) else [self.pattern]
        if not paths:
            yield RawText(self.pattern, None, f"{self.pattern}: no file matches", reason="read")
        for path in paths:
            text, error, reason = _read_file(path, self.max_bytes)
            yield RawText(path, text, error, reason=reason)
