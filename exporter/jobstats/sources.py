"""Where job_stats text comes from: ``lctl get_param``, procfs, or files (a path or a glob).

Every ``read()`` re-reads its source and yields one ``RawText`` per thing it read, with the
text or an error: one file at a time, so a big server's text is never all in memory at once.
Nothing here raises, and lctl runs under a hard timeout (its whole process group is killed),
so a hung Lustre never hangs a scrape.
"""

from __future__ import annotations

import glob
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

LCTL_PARAMS = ("mdt.*.job_stats", "obdfilter.*.job_stats")
# A line that starts a parameter in ``lctl get_param`` output (``name=``), after its newline.
_PARAM_START = re.compile(rb"\n[A-Za-z_][\w.-]*=")
MAX_ERROR_TEXT = 300


@dataclass(slots=True)
class RawText:
    """One read: ``origin`` names it (``lctl`` or a path); component/target when the path
    already says which target it is (procfs)."""

    origin: str
    text: str | None
    error: str | None = None
    component: str | None = None
    target: str | None = None


class Source(Protocol):
    def read(self) -> Iterator[RawText]: ...


def _read_file(path: str) -> tuple[str | None, str | None]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return None, f"{path}: cannot read: {exc.strerror or exc}"
    return data.decode("utf-8", "replace"), None


class LctlSource:
    """``lctl get_param mdt.*.job_stats obdfilter.*.job_stats`` with a timeout.

    The output is cut into pieces at parameter starts while it is read (a piece is a few MB:
    one or more whole targets), so a big server's output is never held twice (bytes, then
    text) and each piece is freed once parsed."""

    PIECE_BYTES = 8 << 20

    def __init__(self, lctl: str = "lctl", timeout: float = 10.0) -> None:
        self.command = [lctl, "get_param", *LCTL_PARAMS]
        self.timeout = timeout

    def read(self) -> Iterator[RawText]:
        pieces, error = self._run()
        if error is not None:
            yield RawText("lctl", None, error)
            return
        pieces.reverse()
        while pieces:
            yield RawText("lctl", pieces.pop())

    def _run(self) -> tuple[list[str], str | None]:
        name = self.command[0]
        try:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return [], f"cannot run {name}: {exc.strerror or exc}"
        late = f"{name} did not answer within {self.timeout:g} s; killed"
        deadline = time.monotonic() + self.timeout
        pieces: list[str] = []
        pending, errors = bytearray(), bytearray()
        scanned = cut = 0  # pending[:scanned] searched; cut: last parameter start in it
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                selector.register(proc.stderr, selectors.EVENT_READ)
                while selector.get_map():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return [], late
                    for key, _ in selector.select(remaining):
                        data = os.read(key.fd, 1 << 20)
                        if not data:
                            selector.unregister(key.fileobj)
                        elif key.fileobj is proc.stderr:
                            errors += data[: MAX_ERROR_TEXT - len(errors)]
                        else:
                            pending += data
                            start = max(pending.rfind(b"\n", 0, scanned), 0)
                            for match in _PARAM_START.finditer(pending, start):
                                cut = match.start() + 1
                            scanned = len(pending)
                            if len(pending) >= self.PIECE_BYTES and cut:
                                pieces.append(pending[:cut].decode("utf-8", "replace"))
                                del pending[:cut]
                                scanned, cut = len(pending), 0
            proc.wait(max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            return [], late
        finally:
            if proc.returncode is None:
                self._kill(proc)
            proc.stdout.close()
            proc.stderr.close()
        pieces.append(pending.decode("utf-8", "replace"))
        if proc.returncode != 0 and not any(piece.strip() for piece in pieces):
            message = errors.decode("utf-8", "replace").strip()[:MAX_ERROR_TEXT]
            return [], f"{name} exited with {proc.returncode}: {message or 'no output'}"
        # A non-zero exit with output is normal on a server that has OSTs but no MDT:
        # lctl complains about the pattern that matched nothing and prints the rest.
        return pieces, None

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass


class ProcfsSource:
    """``<root>/fs/lustre/{mdt,obdfilter}/*/job_stats``; the path names each target."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = Path(root) / "fs" / "lustre"

    def read(self) -> Iterator[RawText]:
        found = False
        for kind, component in (("mdt", "mdt"), ("obdfilter", "ost")):
            for path in sorted(glob.glob(str(self.root / kind / "*" / "job_stats"))):
                found = True
                # No local name keeps the text: the caller frees it once parsed.
                yield RawText(path, *_read_file(path), component, Path(path).parent.name)
        if not found:
            yield RawText(
                str(self.root), None, f"no job_stats under {self.root}/{{mdt,obdfilter}}/*/"
            )


class FileSource:
    """A file or glob of files holding ``lctl get_param`` output (or a bare job_stats file)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def read(self) -> Iterator[RawText]:
        paths = sorted(glob.glob(self.pattern)) if glob.has_magic(self.pattern) else [self.pattern]
        if not paths:
            yield RawText(self.pattern, None, f"{self.pattern}: no file matches")
        for path in paths:
            yield RawText(path, *_read_file(path))
