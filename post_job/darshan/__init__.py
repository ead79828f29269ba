"""Darshan source of the post-job hook: logs (binary or darshan-parser text) -> signals -> points.

``collect_darshan`` never raises for bad input: each unreadable or damaged log becomes an error
string naming the file and the problem, and the job's other logs are still processed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

from post_job.darshan.model import DarshanLog
from post_job.darshan.points import log_points
from post_job.darshan.reader_pydarshan import (
    DarshanReadError,
    read_darshan_log_isolated,
    read_darshan_logs_isolated,
)
from post_job.darshan.reader_text import read_parser_text
from post_job.darshan.signals import compute_signals
from post_job.darshan.signals_text import write_signals
from post_job.files import unexpected_error
from post_job.model import JobContext, SourceOutput

__all__ = ["collect_darshan", "read_log", "read_text"]


def read_log(path: Path) -> DarshanLog:
    """A binary log (read in a child process: darshan-util can crash on corrupt logs)."""
    return read_darshan_log_isolated(path)


def read_text(path: Path) -> DarshanLog:
    return read_parser_text(path)


def _read_texts(paths: Sequence[Path]) -> Iterator[tuple[Path, DarshanLog | Exception]]:
    for path in paths:
        try:
            yield path, read_parser_text(path)
        except Exception as exc:  # DarshanReadError, or a bug the loop below reports
            yield path, exc


def collect_darshan(
    logs: Sequence[Path],
    texts: Sequence[Path],
    job: JobContext,
    *,
    top_records: int = 100,
    signals_out: Path | None = None,
) -> SourceOutput:
    output = SourceOutput()
    computed = []
    # binary logs are read by one child process for the whole job (see reader_pydarshan)
    binary = read_darshan_logs_isolated([Path(p) for p in logs])
    for path, outcome in chain(binary, _read_texts([Path(p) for p in texts])):
        try:
            if isinstance(outcome, Exception):
                raise outcome
            log = outcome
            signals = compute_signals(log)
            points = log_points(log.job, signals, job.base_tags(), log.names, top_records)
        except DarshanReadError as exc:
            output.errors.append(str(exc))
            continue
        except Exception as exc:  # a bug or an input no check foresaw: keep the other logs
            output.errors.append(unexpected_error(path, "processing the log", exc))
            continue
        if log.skipped_modules and not log.modules and not log.heatmaps:
            output.errors.append(
                f"{path}: no module with I/O counters (only {', '.join(log.skipped_modules)});"
                " the job's I/O totals are 0 for this log"
            )
        output.errors.extend(log.problems)
        output.errors.extend(signals.problems)
        output.points.extend(points)
        computed.append((log.job, signals))
    if signals_out is not None:
        try:
            write_signals(Path(signals_out), computed)
        except OSError as exc:
            output.errors.append(f"{signals_out}: cannot write signals: {exc.strerror or exc}")
    return output
