"""Log locations: glob patterns with placeholders (``{jobid}``, ``{user}``, ``{uid}``,
``{cluster}``, ``{year}``, ``{month}``, ``{day}``, ``{logdir}``), filled for each day of the
job. Values from the environment are glob-escaped, so a strange user name cannot widen a
pattern; a pattern gets plain names only (no attribute or index access from a config file)."""

from __future__ import annotations

import datetime as dt
import glob
import os
import re
import string
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpcmon.common.config import ConfigError
from hpcmon.post_job.slurm import SlurmJob

MAX_DAYS = 62
PLACEHOLDERS = ("jobid", "user", "uid", "cluster", "year", "month", "day", "logdir")
_SAMPLE = {
    "jobid": "1",
    "user": "u",
    "uid": "0",
    "cluster": "c",
    "year": 2024,
    "month": 1,
    "day": 1,
    "logdir": "/l",
}


_MAX_WIDTH = 64


class _PlainFormatter(string.Formatter):
    """str.format limited to plain names: no attribute or index access from a config file."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        if not field_name.isidentifier():
            raise ValueError(f"placeholder {{{field_name}}} is not a plain name")
        if field_name not in kwargs:
            raise KeyError(field_name)
        return kwargs[field_name], field_name

    def format_field(self, value: Any, format_spec: str) -> Any:
        if any(int(digits) > _MAX_WIDTH for digits in re.findall(r"\d+", format_spec)):
            raise ValueError(f"format {format_spec!r} is wider than {_MAX_WIDTH}")
        return super().format_field(value, format_spec)


_FORMATTER = _PlainFormatter()


def expand_pattern(pattern: str, values: Mapping[str, Any]) -> str:
    return _FORMATTER.vformat(pattern, (), dict(values))


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a pattern with unknown placeholders or bad braces when the config is loaded."""
    try:
        expand_pattern(pattern, _SAMPLE)
    except KeyError as exc:
        raise ConfigError(
            f"{where}: unknown placeholder {{{exc.args[0]}}} in {pattern!r}; "
            f"known: {', '.join(PLACEHOLDERS)}"
        ) from None
    except (ValueError, IndexError, TypeError) as exc:
        raise ConfigError(f"{where}: bad pattern {pattern!r}: {exc}") from None


def job_days(job: SlurmJob, now: float | None = None, search_days: int = 2) -> list[dt.date]:
    """Local dates to search: every day from job start to end; when Slurm gives neither time,
    today and the ``search_days - 1`` days before (a job's logs are dated by its start)."""
    start = job.start if job.start is not None else job.end
    end = job.end if job.end is not None else job.start
    if start is not None and end is not None:  # Slurm gave one of them at least
        first = dt.date.fromtimestamp(start)
        last = dt.date.fromtimestamp(end)
        if last < first:
            first, last = last, first
        first = max(first, last - dt.timedelta(days=MAX_DAYS - 1))
        return [first + dt.timedelta(days=k) for k in range((last - first).days + 1)]
    today = dt.date.fromtimestamp(time.time() if now is None else now)
    return [today - dt.timedelta(days=k) for k in range(search_days - 1, -1, -1)]


def expansion_values(
    job: SlurmJob, cluster: str | None, day: dt.date, logdir: str | None
) -> dict[str, Any]:
    """Placeholder values; text from the environment is glob-escaped."""
    return {
        "jobid": glob.escape(job.job_id),
        "user": glob.escape(job.user or ""),
        "uid": glob.escape(job.uid or ""),
        "cluster": glob.escape(cluster or ""),
        "year": day.year,
        "month": day.month,
        "day": day.day,
        "logdir": logdir or "",
    }


def filled_patterns(
    patterns: list[str],
    job: SlurmJob,
    cluster: str | None,
    logdir: str | None,
    days: list[dt.date],
) -> set[str]:
    """The patterns with their placeholders filled, for each of the given days."""
    filled: set[str] = set()
    for day in days:
        values = expansion_values(job, cluster, day, logdir)
        filled.update(expand_pattern(pattern, values) for pattern in patterns)
    return filled


def find_files(
    patterns: list[str],
    job: SlurmJob,
    cluster: str | None,
    logdir: str | None,
    days: list[dt.date],
) -> list[Path]:
    """Every existing path matched by the patterns on any of the given days, sorted, unique."""
    found: set[str] = set()
    for filled in filled_patterns(patterns, job, cluster, logdir, days):
        found.update(glob.glob(filled))
    return [Path(p) for p in sorted(found)]


def pattern_root(filled: str) -> str:
    """The directory a filled pattern's files are in: the pattern up to its first wildcard
    (the inputs found there must not be links leading elsewhere)."""
    wild = re.search(r"[*?[]", filled)
    fixed = filled[: wild.start()] if wild else filled
    return fixed if fixed.endswith("/") and wild else os.path.dirname(fixed) or "/"


def output_path(pattern: str, job: SlurmJob, cluster: str | None) -> str:
    """An output file name (no glob): placeholders filled with plain values, dated today."""
    today = dt.date.today()
    return expand_pattern(
        pattern,
        {
            "jobid": job.job_id,
            "user": job.user or "",
            "uid": job.uid or "",
            "cluster": cluster or "",
            "year": today.year,
            "month": today.month,
            "day": today.day,
            "logdir": "",
        },
    )
