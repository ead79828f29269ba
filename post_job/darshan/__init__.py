"""Darshan source of the post-job hook: logs (binary or darshan-parser text) -> signals -> points.

``collect_darshan`` never raises for bad input: each unreadable or damaged log becomes an error
string naming the file and the problem, and the job's other logs are still processed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

from post_job.darshan.model import DarshanLog, header_problems
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
from post_job.options import option

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


_SUFFIXES = (".gz", ".txt", ".darshan")


def log_labels(paths: Sequence[Path]) -> dict[Path, str]:
    """The ``log`` tag of each input: its file name without ``.darshan``/``.txt``/``.gz``
    (Darshan names are unique per process: user, exe, job id, start, hash), so a binary log
    and its darshan-parser text share the tag; the whole path when two different files of
    one run would share a name."""

    def stem(path: Path) -> str:
        name = path.name
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
        return name

    labels = {path: stem(path) for path in paths}
    by_label: dict[str, set[Path]] = {}
    for path, label in labels.items():
        by_label.setdefault(label, set()).add(path)
    for same in by_label.values():
        if len(same) > 1:
            for path in same:
                labels[path] = str(path)
    return labels


def collect_darshan(
    logs: Sequence[Path],
    texts: Sequence[Path],
    job: JobContext,
    *,
    top_records: int = option("sources.darshan", "top_records").default,
    signals_out: Path | None = None,
) -> SourceOutput:
    output = SourceOutput()
    computed = []
    logs, texts = [Path(p) for p in logs], [Path(p) for p in texts]
    labels = log_labels([*logs, *texts])
    # binary logs are read by one child process for the whole job (see reader_pydarshan)
    binary = read_darshan_logs_isolated(logs)
    for path, outcome in chain(binary, _read_texts(texts)):
        try:
            if isinstance(outcome, Exception):
                raise outcome
            log = outcome
            refused, flagged = header_problems(log.job, time.time())
            if refused:
                output.errors.append(f"{path}: implausible header, log refused: {refused}")
                continue
            if flagged:
                values = ", ".join(f"{name}={value}" for name, value in flagged.items())
                output.errors.append(
                    f"{path}: implausible header value(s) left out of the points: {values}"
                )
            signals = compute_signals(log)
            tags = {**job.base_tags(), "log": labels[path]}
            points = log_points(
                log.job,
                signals,
                tags,
                log.names,
                top_records,
                flagged=set(flagged),
                partial_modules=log.partial_modules,
            )
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
        output.warnings.extend(log.warnings)
        output.warnings.extend(signals.warnings)
        output.points.extend(points)
        computed.append((log.job, signals))
    if signals_out is not None:
        try:
            write_signals(Path(signals_out), computed)
        except OSError as exc:
            output.errors.append(f"{signals_out}: cannot write signals: {exc.strerror or exc}")
    return output
