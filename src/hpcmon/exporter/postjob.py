"""``--collector.postjob``: the node's post-job spool (what the epilog hook could not deliver
yet), so a node that has been unable to deliver for a day is seen (alert
HpcmonPostJobBacklog) instead of being found when its disk fills.

Read at every scrape (a directory listing per server kind). The spool's own reading code
(``hpcmon.post_job.spool_format``, standard library only) decodes each file; a file is decoded
once and remembered by inode, size and modification time, so a long backlog costs a listing.
The hook may write or flush at the same moment: spool files appear whole, are rewritten whole
under the same name and disappear whole, and each listed name is read once, so no line is
counted twice; a file gone between the listing and the read was sent, and is not counted.
A spool directory that does not exist is an empty spool (0), not an error; one the exporter
may not read (it needs the spool's group) is ``hpcmon_postjob_spool_up 0`` and one log line,
with no other figure for that kind (a 0 there would read as "nothing waiting").
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from hpcmon.common import metric_names as names
from hpcmon.exporter.collector import FamilyCollector, ProblemLog, add_flag, register
from hpcmon.post_job.spool_format import (
    DEFAULT_SPOOL_DIR,
    KINDS,
    REJECTED,
    REJECTED_LINES_SUFFIX,
    SpoolFileError,
    created_ns,
    pending_files,
    read_batch,
)

log = logging.getLogger("hpcmon.exporter.postjob")


@dataclass(frozen=True, slots=True)
class Backlog:
    """One server kind's spool (``<spool-dir>/<kind>``) at one instant."""

    kind: str
    files: int = 0  # spool files waiting
    lines: int = 0  # lines in them that a replay will send
    oldest_ns: int | None = None  # when the oldest waiting file was first spooled
    rejected_files: int = 0  # files in rejected/: refused lines, damaged frames, corrupt files
    rejected_lines: int = 0  # lines the server refused as bad data (rejected/*.jsonl)
    readable: bool = True  # False: the exporter may not read it; the figures are unknown


_Key = tuple[int, int, int]  # inode, size, mtime_ns: a rewritten file is a new key


class SpoolReader:
    """Reads a spool directory into ``Backlog`` records; remembers each file's count."""

    def __init__(self, root: Path, problems: ProblemLog) -> None:
        self.root = root
        self.problems = problems
        self._counts: dict[Path, tuple[_Key, int]] = {}
        self._lock = threading.Lock()  # concurrent scrapes share the remembered counts

    def backlogs(self) -> list[Backlog]:
        with self._lock:
            seen: set[Path] = set()
            result = [self._readable_backlog(kind, seen) for kind in KINDS]
            for path in self._counts.keys() - seen:
                del self._counts[path]
            return result

    def _readable_backlog(self, kind: str, seen: set[Path]) -> Backlog:
        try:
            return self._backlog(kind, seen)
        except OSError as exc:  # not FileNotFoundError: a file gone was sent (see _count)
            self.problems.warn(
                f"post-job spool {self.root / kind}: cannot read: {exc.strerror or exc} "
                "(the exporter's user needs the spool's group)"
            )
            return Backlog(kind, readable=False)

    def _backlog(self, kind: str, seen: set[Path]) -> Backlog:
        directory = self.root / kind
        files = lines = 0
        oldest: int | None = None
        for path in pending_files(directory):
            count = self._count(path, self._spooled_lines)
            if count is None:
                continue  # sent and removed since the listing
            seen.add(path)
            files += 1
            lines += count
            oldest = created_ns(path) if oldest is None else min(oldest, created_ns(path))
        rejected_files = rejected_lines = 0
        for path in _rejected_files(directory / REJECTED):
            count = 0
            if path.name.endswith(REJECTED_LINES_SUFFIX):
                count = self._count(path, _text_lines)
                if count is None:
                    continue
                seen.add(path)
            rejected_files += 1
            rejected_lines += count
        return Backlog(kind, files, lines, oldest, rejected_files, rejected_lines)

    def _count(self, path: Path, count_lines) -> int | None:
        """The file's line count (remembered while it is unchanged); None once it is gone."""
        try:
            info = path.stat()
        except FileNotFoundError:
            return None
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        known = self._counts.get(path)
        if known is not None and known[0] == key:
            return known[1]
        try:
            count = count_lines(path)
        except FileNotFoundError:
            return None
        self._counts[path] = (key, count)
        return count

    def _spooled_lines(self, path: Path) -> int:
        try:
            batch = read_batch(path)
        except SpoolFileError as exc:  # the next flush moves it to rejected/ as .corrupt
            if isinstance(exc.__cause__, PermissionError):
                raise exc.__cause__ from None  # not corrupt: unknown to this user
            self.problems.warn(f"post-job spool: {exc}")
            return 0
        for problem in batch.problems:
            self.problems.warn(f"post-job spool: {problem}")
        return len(batch.lines)


def _rejected_files(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [
                Path(e.path)
                for e in entries
                if not e.name.startswith(".") and e.is_file(follow_symlinks=False)
            ]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _text_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


@register
class PostJobCollector(FamilyCollector):
    name = "postjob"
    description = "Post-job spool of the node: lines waiting, their age, lines refused"
    enabled_by_default = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_flag(
            parser,
            "--postjob.spool-dir",
            default=DEFAULT_SPOOL_DIR,
            help="the post-job hook's --spool-dir (spool_dir in its configuration)",
        )

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        self.reader = SpoolReader(Path(options.postjob_spool_dir), ProblemLog(log, limit=1000))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        backlogs = self.reader.backlogs()
        now_ns = time.time_ns()
        up = GaugeMetricFamily(
            names.POSTJOB_SPOOL_UP,
            "Whether the exporter could read the spool (0: it needs the spool's group).",
            labels=["kind"],
        )
        for backlog in backlogs:
            up.add_metric([backlog.kind], float(backlog.readable))
        yield up
        families = [
            (names.POSTJOB_SPOOL_LINES, "Lines waiting in the spool to be sent.", "lines"),
            (names.POSTJOB_SPOOL_FILES, "Spool files waiting to be sent.", "files"),
            (
                names.POSTJOB_SPOOL_OLDEST_AGE,
                "Age of the oldest waiting line (0 when none).",
                "oldest",
            ),
            (
                names.POSTJOB_REJECTED_LINES,
                "Lines the server refused as bad data, kept in rejected/ (never replayed).",
                "rejected_lines",
            ),
            (
                names.POSTJOB_REJECTED_FILES,
                "Files in rejected/: refused lines, damaged frames, corrupt spool files.",
                "rejected_files",
            ),
        ]
        for name, documentation, field in families:
            family = GaugeMetricFamily(name, documentation, labels=["kind"])
            for backlog in backlogs:
                if not backlog.readable:
                    continue
                if field == "oldest":
                    oldest = backlog.oldest_ns
                    value = 0.0 if oldest is None else max(now_ns - oldest, 0) / 1e9
                else:
                    value = float(getattr(backlog, field))
                family.add_metric([backlog.kind], value)
            yield family
