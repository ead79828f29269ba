"""Darshan logs in either form -> ``DarshanLog`` records: binary logs through PyDarshan
(reader_pydarshan.py, in a child process: darshan-util can crash on corrupt logs) and
darshan-parser text (reader_text.py). A log that cannot be read at all is a SourceError.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

from hpcmon.post_job.darshan.model import DarshanLog
from hpcmon.post_job.darshan.reader_pydarshan import (
    read_darshan_log_isolated,
    read_darshan_logs_isolated,
)
from hpcmon.post_job.darshan.reader_text import read_parser_text


def read_log(path: Path) -> DarshanLog:
    """A binary log (read in a child process: darshan-util can crash on corrupt logs)."""
    return read_darshan_log_isolated(path)


def read_text(path: Path) -> DarshanLog:
    return read_parser_text(path)


def read_logs(
    logs: Sequence[Path], texts: Sequence[Path], header: bool = False
) -> Iterator[tuple[Path, DarshanLog | Exception]]:
    """Each input with its log or the exception that stopped it (binary logs first, read by
    one child process for the whole job, which starts on them at once; then the texts).
    ``header``: binary logs' header blocks too (texts always have theirs)."""
    return chain(read_darshan_logs_isolated(logs, header=header), _read_texts(texts))


def _read_texts(paths: Sequence[Path]) -> Iterator[tuple[Path, DarshanLog | Exception]]:
    for path in paths:
        try:
            yield path, read_parser_text(path)
        except Exception as exc:  # SourceError, or a bug collect_darshan reports
            yield path, exc
