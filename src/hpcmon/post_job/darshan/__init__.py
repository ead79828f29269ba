"""Darshan source of the post-job hook: logs (binary or darshan-parser text) -> signals -> points.

``collect_darshan`` never raises for bad input: each unreadable or damaged log becomes an error
string naming the file and the problem, and the job's other logs are still processed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from hpcmon.post_job.darshan.diagnosis import diagnosis_points
from hpcmon.post_job.darshan.model import DarshanLog, JobInfo, header_problems
from hpcmon.post_job.darshan.points import log_points
from hpcmon.post_job.darshan.reader import read_log, read_logs, read_text
from hpcmon.post_job.darshan.signals import LogSignals, compute_signals
from hpcmon.post_job.darshan.signals_text import write_signals
from hpcmon.post_job.files import unexpected_error
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.options import option
from hpcmon.post_job.problems import Problems, SourceError

__all__ = ["collect_darshan", "points_of_logs", "read_log", "read_text"]


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
    diagnose: bool = True,
) -> SourceOutput:
    """``diagnose``: also the job's ``job_diagnosis`` points (the report, which runs its
    rules itself, does without)."""
    logs, texts = [Path(p) for p in logs], [Path(p) for p in texts]
    reading = read_logs(logs, texts, header=signals_out is not None)  # under way from here
    output = SourceOutput()
    computed: list[tuple[JobInfo, LogSignals]] = []
    diagnosed: list[DarshanLog] = []  # the logs that gave points: the job's diagnosis
    labels = log_labels([*logs, *texts])
    for path, outcome in reading:
        problems = Problems(path)
        tags = {**job.base_tags(), "log": labels[path]}
        converted = _log_points(path, outcome, tags, top_records, problems, output)
        if converted is not None:
            assert not isinstance(outcome, Exception)  # an exception gives no points
            computed.append(converted)
            diagnosed.append(outcome)
        output.errors.extend(problems)
    if diagnose:
        _diagnosis(diagnosed, job, output)
    if signals_out is not None:
        try:
            write_signals(Path(signals_out), computed)
        except OSError as exc:
            output.errors.append(f"{signals_out}: cannot write signals: {exc.strerror or exc}")
    return output


def _diagnosis(logs: list[DarshanLog], job: JobContext, output: SourceOutput) -> None:
    """The job's ``job_diagnosis`` points into ``output`` (which holds the logs' points so
    far); a failure costs only them."""
    try:
        output.points.extend(diagnosis_points(logs, list(output.points), job))
    except Exception as exc:  # a bug or an input no check foresaw: keep the log points
        output.errors.append(unexpected_error(f"job {job.job_id}", "diagnosing its logs", exc))


def points_of_logs(
    logs: Sequence[DarshanLog],
    job: JobContext,
    *,
    top_records: int = option("sources.darshan", "top_records").default,
) -> SourceOutput:
    """What ``collect_darshan`` gives for logs already read (the report reads a log through
    the very points the hook writes, so both give the same report)."""
    output = SourceOutput()
    paths = [Path(log.source) for log in logs]
    labels = log_labels(paths)
    for path, log in zip(paths, logs, strict=True):
        problems = Problems(path)
        tags = {**job.base_tags(), "log": labels[path]}
        _log_points(path, log, tags, top_records, problems, output)
        output.errors.extend(problems)
    return output


def _log_points(
    path: Path,
    outcome: DarshanLog | Exception,
    tags: dict[str, str],
    top_records: int,
    problems: Problems,
    output: SourceOutput,
) -> tuple[JobInfo, LogSignals] | None:
    """One log's points and warnings into ``output``, its problems into ``problems``; the
    log's header and signals (for the signals file), None when the log gave nothing."""
    try:
        if isinstance(outcome, Exception):
            raise outcome
        log = outcome
        refused, flagged = header_problems(log.job, time.time())
        if refused:
            problems.append(f"{path}: implausible header, log refused: {refused}")
            return None
        if flagged:
            values = ", ".join(f"{name}={value}" for name, value in flagged.items())
            problems.append(f"{path}: implausible header value(s) left out of the points: {values}")
        signals = compute_signals(log)
        points = log_points(
            log.job,
            signals,
            tags,
            log.names,
            top_records,
            flagged=set(flagged),
            partial_modules=log.partial_modules,
        )
    except SourceError as exc:
        problems.append(str(exc))
        return None
    except Exception as exc:  # a bug or an input no check foresaw: keep the other logs
        problems.append(unexpected_error(path, "processing the log", exc))
        return None
    if log.skipped_modules and not log.modules and not log.heatmaps:
        problems.append(
            f"{path}: no module with I/O counters (only {', '.join(log.skipped_modules)});"
            " the job's I/O totals are 0 for this log"
        )
    problems.extend(log.problems)
    problems.extend(signals.problems)
    output.warnings.extend(log.warnings)
    output.warnings.extend(signals.warnings)
    output.points.extend(points)
    return log.job, signals
