"""Where job_stats text comes from: ``lctl get_param``, procfs, or files (a path or a glob).

Every ``read()`` re-reads its source and yields one ``RawText`` per thing it read, with the
text or an error: one file at a time, so a big server's text is never all in memory at once.
Nothing here raises, and lctl runs under a hard timeout (its whole process group is killed),
so a hung Lustre never hangs a scrape.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

LCTL_PARAMS = ("mdt.*.job_stats", "obdfilter.*.job_stats")
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
    """``lctl get_param mdt.*.job_stats obdfilter.*.job_stats`` with a timeout."""

    def __init__(self, lctl: str = "lctl", timeout: float = 10.0) -> None:
        self.command = [lctl, "get_param", *LCTL_PARAMS]
        self.timeout = timeout

    def read(self) -> Iterator[RawText]:
        yield self._run()

    def _run(self) -> RawText:
        try:
            proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            return RawText("lctl", None, f"cannot run {self.command[0]}: {exc.strerror or exc}")
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            return RawText("lctl", None, f"{self.command[0]} did not answer within "
                                         f"{self.timeout:g} s; killed")
        text = out.decode("utf-8", "replace")
        if proc.returncode != 0 and not text.strip():
            message = err.decode("utf-8", "replace").strip()[:MAX_ERROR_TEXT]
            return RawText("lctl", None, f"{self.command[0]} exited with {proc.returncode}: "
                                         f"{message or 'no output'}")
        # A non-zero exit with output is normal on a server that has OSTs but no MDT:
        # lctl complains about the pattern that matched nothing and prints the rest.
        return RawText("lctl", text)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.communicate(timeout=2)
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
                text, error = _read_file(path)
                yield RawText(path, text, error, component, Path(path).parent.name)
        if not found:
            yield RawText(str(self.root), None,
                          f"no job_stats under {self.root}/{{mdt,obdfilter}}/*/")


class FileSource:
    """A file or glob of files holding ``lctl get_param`` output (or a bare job_stats file)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def read(self) -> Iterator[RawText]:
        paths = sorted(glob.glob(self.pattern)) if glob.has_magic(self.pattern) else [
            self.pattern]
        if not paths:
            yield RawText(self.pattern, None, f"{self.pattern}: no file matches")
        for path in paths:
            text, error = _read_file(path)
            yield RawText(path, text, error)
