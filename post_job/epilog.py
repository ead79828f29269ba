"""Slurm epilog mode: who the job was from Slurm's environment, everything else from a YAML file.

The hook must never hurt users' jobs: it exits 0 unless ``--strict`` or ``strict: true``, and a
watchdog ends it at ``time_limit_seconds`` whatever it is doing (sending stops earlier and
spools what is left). Log locations are glob patterns with placeholders: ``{jobid}``,
``{user}``, ``{uid}``, ``{cluster}``, ``{year}``, ``{month}``, ``{day}`` (integers, so
``{month:02d}`` works) and, for Darshan, ``{logdir}``. Values from the environment are
glob-escaped, so a strange user name cannot widen a pattern.
"""

from __future__ import annotations

import datetime as dt
import glob
import logging
import os
import pwd
import re
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcmon.config import ConfigError, load_yaml_mapping
from hpcmon.jobid import slurm_job_id, slurm_job_id_problem, user_name_problem
from post_job.delivery import WriterSettings
from post_job.hook import RunReport, run_job
from post_job.lifetime import Watchdog, configure_logging, sending_deadline, stop_on_sigterm
from post_job.model import JobContext
from post_job.options import option, source_options
from post_job.sources import SourceRequest
from post_job.writers import Deadline, url_problem

log = logging.getLogger("hpcmon.post_job.epilog")

DEFAULT_TIME_LIMIT: float = option("", "time_limit_seconds").config_default()
DEFAULT_SEARCH_DAYS: int = option("", "search_days").config_default()
# Darshan's runtime names logs <logdir>/<year>/<month>/<day>/<user>_<exe>_id<jobid>_...darshan
# with month and day unpadded, from the local time at which the application started.
DARSHAN_DEFAULT_PATTERN = "{logdir}/{year}/{month}/{day}/{user}_*_id{jobid}_*.darshan"
MAX_DAYS = 62

# source -> config keys holding input patterns, in the order of the entry's arguments
_SOURCE_INPUTS: dict[str, tuple[str, ...]] = {
    "darshan": ("logs", "texts"),
    "recorder": ("dirs",),
    "viztracer": ("traces",),
    "geopm_report": ("reports",),
}
# source -> {config key: contract keyword} of the output file options (patterns); the typed
# options come from the registry (post_job/options.py)
_SOURCE_PATHS: dict[str, dict[str, str]] = {
    "darshan": {"signals_out": "signals_out"},
    "recorder": {},
    "viztracer": {"cleaned_out": "cleaned_out"},
    "geopm_report": {},
}
_TOP_KEYS = {
    "cluster",
    "time_limit_seconds",
    "search_days",
    "strict",
    "log",
    "spool_dir",
    "writers",
    "sources",
    "report",
}
_REPORT_KEYS = {"dir", "format", "prometheus_url"}
REPORT_FORMATS = {"html": "html", "json": "json", "text": "txt"}  # format -> file suffix
_WRITER_KEYS = {"output", "influx_v2", "influx_v1", "batch_size", "request_timeout_seconds"}


@dataclass
class SourceConfig:
    name: str
    patterns: dict[str, list[str]]  # input key -> glob patterns
    options: dict[str, Any]  # contract keyword -> value (paths still patterns)
    logdir: str | None = None


@dataclass
class EpilogConfig:
    cluster: str | None = None
    time_limit: float = DEFAULT_TIME_LIMIT
    search_days: int = DEFAULT_SEARCH_DAYS  # days back to search when Slurm gives no times
    strict: bool = False
    syslog: bool = False
    spool_dir: str | None = None
    writers: dict[str, Any] = field(default_factory=dict)
    sources: list[SourceConfig] = field(default_factory=list)
    report: ReportConfig | None = None


@dataclass(frozen=True)
class ReportConfig:
    """The per-job report (hpcmon-report) written next to the points once they are in."""

    dir: str  # a pattern with {jobid} {user} {uid} {cluster} {year} {month} {day}
    format: str = "html"
    prometheus_url: str | None = None  # Lustre rates, power and alerts of the job


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    user: str | None
    uid: str | None
    start: float | None
    end: float | None


def _where(path: Path | str, key: str) -> str:
    return f"{path}: {key}"


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(value).__name__}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(key) for key in data if key not in allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string")
    return value


def _url(value: Any, where: str) -> str:
    problem = url_problem(_text(value, where))
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return value


def _patterns(value: Any, where: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where} must be a pattern or a list of patterns")
    patterns = [_text(item, f"{where}[{index}]") for index, item in enumerate(items)]
    for pattern in patterns:
        check_pattern(pattern, where)
    return patterns


def parse_config(data: Mapping[str, Any], path: Path | str = "config") -> EpilogConfig:
    """Validate the YAML mapping; ConfigError naming the file and key for anything wrong."""
    _check_keys(data, _TOP_KEYS, str(path))
    config = EpilogConfig()
    if data.get("cluster") is not None:
        config.cluster = _text(data["cluster"], _where(path, "cluster"))
    for key in ("time_limit_seconds", "search_days"):
        if key in data:
            value = option("", key).from_config(data[key], _where(path, key))
            setattr(config, "time_limit" if key == "time_limit_seconds" else key, value)
    if "strict" in data:
        config.strict = option("", "strict").from_config(data["strict"], _where(path, "strict"))
    if "log" in data:
        if data["log"] not in ("stderr", "syslog"):
            raise ConfigError(f"{_where(path, 'log')} must be 'stderr' or 'syslog'")
        config.syslog = data["log"] == "syslog"
    if data.get("spool_dir") is not None:
        config.spool_dir = _text(data["spool_dir"], _where(path, "spool_dir"))
    config.writers = _parse_writers(_mapping(data.get("writers"), _where(path, "writers")), path)
    sources = _mapping(data.get("sources"), _where(path, "sources"))
    _check_keys(sources, set(_SOURCE_INPUTS), _where(path, "sources"))
    for name, raw in sources.items():
        config.sources.append(
            _parse_source(name, _mapping(raw, _where(path, f"sources.{name}")), path)
        )
    servers = {"influx_v1", "influx_v2"} & set(config.writers)
    if not servers and "output" not in config.writers:
        # standard output would end in the epilog's log (or nowhere): refuse instead
        raise ConfigError(f"{_where(path, 'writers')}: give output, influx_v2 or influx_v1")
    if "report" in data:
        config.report = _parse_report(_mapping(data["report"], _where(path, "report")), path)
        if not servers:
            raise ConfigError(f"{_where(path, 'report')} needs writers.influx_v2 or influx_v1")
    if config.spool_dir and not servers:
        raise ConfigError(f"{_where(path, 'spool_dir')} needs writers.influx_v2 or influx_v1")
    return config


def _parse_report(data: Mapping[str, Any], path: Path | str) -> ReportConfig:
    _check_keys(data, _REPORT_KEYS, _where(path, "report"))
    if "dir" not in data:
        raise ConfigError(f"{_where(path, 'report')}: give dir (a pattern, e.g. /reports/{{user}})")
    directory = _text(data["dir"], _where(path, "report.dir"))
    check_pattern(directory, _where(path, "report.dir"))
    fmt = data.get("format", "html")
    if fmt not in REPORT_FORMATS:
        raise ConfigError(f"{_where(path, 'report.format')} must be one of html, json, text")
    url = data.get("prometheus_url")
    if url is not None:
        url = _url(url, _where(path, "report.prometheus_url"))
    return ReportConfig(directory, fmt, url)


def _parse_writers(data: Mapping[str, Any], path: Path | str) -> dict[str, Any]:
    _check_keys(data, _WRITER_KEYS, _where(path, "writers"))
    writers: dict[str, Any] = {}
    if data.get("output") is not None:
        writers["output"] = _text(data["output"], _where(path, "writers.output"))
        check_pattern(writers["output"], _where(path, "writers.output"))
    if data.get("influx_v2") is not None:
        v2 = _mapping(data["influx_v2"], _where(path, "writers.influx_v2"))
        _check_keys(v2, {"url", "org", "bucket", "token_file"}, _where(path, "writers.influx_v2"))
        writers["influx_v2"] = {
            key: _text(v2.get(key), _where(path, f"writers.influx_v2.{key}"))
            for key in ("url", "org", "bucket")
        }
        _url(v2["url"], _where(path, "writers.influx_v2.url"))
        if v2.get("token_file") is not None:
            writers["influx_v2"]["token_file"] = _text(
                v2["token_file"], _where(path, "writers.influx_v2.token_file")
            )
    if data.get("influx_v1") is not None:
        v1 = _mapping(data["influx_v1"], _where(path, "writers.influx_v1"))
        _check_keys(v1, {"url", "database", "retention_policy"}, _where(path, "writers.influx_v1"))
        writers["influx_v1"] = {
            key: _text(v1.get(key), _where(path, f"writers.influx_v1.{key}"))
            for key in ("url", "database")
        }
        _url(v1["url"], _where(path, "writers.influx_v1.url"))
        if v1.get("retention_policy") is not None:
            writers["influx_v1"]["retention_policy"] = _text(
                v1["retention_policy"], _where(path, "writers.influx_v1.retention_policy")
            )
    for key, name in (("batch_size", "batch_size"), ("request_timeout_seconds", "request_timeout")):
        item = option("writers", key)
        writers[name] = item.from_config(
            data.get(key, item.config_default()), _where(path, f"writers.{key}")
        )
    return writers


def _parse_source(name: str, data: Mapping[str, Any], path: Path | str) -> SourceConfig:
    where = _where(path, f"sources.{name}")
    inputs, paths, typed = _SOURCE_INPUTS[name], _SOURCE_PATHS[name], source_options(name)
    allowed = set(inputs) | set(paths) | set(typed) | ({"logdir"} if name == "darshan" else set())
    _check_keys(data, allowed, where)
    source = SourceConfig(name, {}, {})
    if name == "darshan" and data.get("logdir") is not None:
        source.logdir = _text(data["logdir"], f"{where}.logdir")
        if data.get("logs") is None:
            source.patterns["logs"] = [DARSHAN_DEFAULT_PATTERN]
    for key in inputs:
        if data.get(key) is not None:
            source.patterns[key] = _patterns(data[key], f"{where}.{key}")
    if not source.patterns:
        raise ConfigError(
            f"{where}: give at least one of {', '.join(inputs)}"
            + (" or logdir" if name == "darshan" else "")
        )
    for key, item in typed.items():
        if data.get(key) is not None:
            source.options[item.keyword] = item.from_config(data[key], f"{where}.{key}")
    for key, keyword in paths.items():
        if data.get(key) is not None:
            source.options[keyword] = _text(data[key], f"{where}.{key}")
            check_pattern(source.options[keyword], f"{where}.{key}")
    return source


def load_config(path: Path | str) -> EpilogConfig:
    return parse_config(load_yaml_mapping(path), path)


# ---------------------------------------------------------------- patterns
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
    if job.start is not None or job.end is not None:
        first = dt.date.fromtimestamp(job.start if job.start is not None else job.end)
        last = dt.date.fromtimestamp(job.end if job.end is not None else job.start)
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


def find_files(
    patterns: list[str],
    job: SlurmJob,
    cluster: str | None,
    logdir: str | None,
    days: list[dt.date],
) -> list[Path]:
    """Every existing path matched by the patterns on any of the given days, sorted, unique."""
    found: set[str] = set()
    for day in days:
        values = expansion_values(job, cluster, day, logdir)
        for pattern in patterns:
            found.update(glob.glob(expand_pattern(pattern, values)))
    return [Path(p) for p in sorted(found)]


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


def source_requests(
    config: EpilogConfig, job: SlurmJob, now: float | None = None
) -> list[SourceRequest]:
    requests: list[SourceRequest] = []
    days = job_days(job, now, config.search_days)
    for source in config.sources:
        inputs = {
            key: find_files(patterns, job, config.cluster, source.logdir, days)
            for key, patterns in source.patterns.items()
        }
        log.info(
            "job=%s source=%s found %s",
            job.job_id,
            source.name,
            " ".join(f"{key}={len(paths)}" for key, paths in inputs.items()),
        )
        if not any(inputs.values()):
            continue
        options = {
            key: (
                Path(output_path(value, job, config.cluster))
                if key in ("signals_out", "cleaned_out")
                else value
            )
            for key, value in source.options.items()
        }
        ordered = tuple(inputs.get(key, []) for key in _SOURCE_INPUTS[source.name])
        requests.append(SourceRequest(source.name, ordered, options))
    return requests


def writer_settings(
    config: EpilogConfig, job: SlurmJob, environ: Mapping[str, str]
) -> WriterSettings:
    writers = config.writers
    v1, v2 = writers.get("influx_v1", {}), writers.get("influx_v2", {})
    settings = WriterSettings(
        output=output_path(writers["output"], job, config.cluster) if "output" in writers else None,
        v2_url=v2.get("url"),
        v2_org=v2.get("org"),
        v2_bucket=v2.get("bucket"),
        v1_url=v1.get("url"),
        v1_database=v1.get("database"),
        v1_retention_policy=v1.get("retention_policy"),
        spool_dir=config.spool_dir,
        batch_size=writers["batch_size"],
        request_timeout=writers["request_timeout"],
    )
    try:
        settings.add_secrets(v2.get("token_file"), environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return settings


def _epoch(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < 1e11 else None


class SlurmEnvironmentError(ValueError):
    """Slurm's environment holds something that is not what Slurm would set (one line)."""


def slurm_job(environ: Mapping[str, str]) -> SlurmJob | None:
    """The finished job as Slurm describes it to epilogs (None outside Slurm).

    The values end up in tags and file names: anything that is not a Slurm job id, a user
    name or a uid is refused (SlurmEnvironmentError), never used."""
    job_id = slurm_job_id(dict(environ))
    if job_id is None:
        return None
    problem = slurm_job_id_problem(job_id)
    if problem:
        raise SlurmEnvironmentError(problem)
    user = environ.get("SLURM_JOB_USER", "").strip() or None
    uid = environ.get("SLURM_JOB_UID", "").strip() or None
    if user is not None and user_name_problem(user):
        raise SlurmEnvironmentError(f"SLURM_JOB_USER: {user_name_problem(user)}")
    if uid is not None and not (uid.isascii() and uid.isdigit() and len(uid) <= 10):
        raise SlurmEnvironmentError(f"SLURM_JOB_UID={uid[:40]!r} is not a uid")
    if user is None and uid is not None and uid.isdigit():
        try:
            user = pwd.getpwuid(int(uid)).pw_name
        except KeyError:
            user = None
    return SlurmJob(
        job_id,
        user,
        uid,
        _epoch(environ.get("SLURM_JOB_START_TIME")),
        _epoch(environ.get("SLURM_JOB_END_TIME")),
    )


def run_epilog(
    config_path: Path,
    strict: bool = False,
    environ: Mapping[str, str] | None = None,
    now: float | None = None,
    log_level: str = "info",
) -> int:
    """The whole epilog run; returns the exit status (0 unless strict and something failed)."""
    env = os.environ if environ is None else environ
    configure_logging(log_level)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2 if strict else 0
    strict = strict or config.strict
    configure_logging(log_level, syslog=config.syslog)
    failure = 1 if strict else 0
    with stop_on_sigterm(failure), Watchdog(config.time_limit, exit_code=failure):
        try:
            return _run(config, env, now, failure)
        except Exception as exc:  # noqa: BLE001 - never fail a user's job over a bug of ours
            log.debug("epilog run failed", exc_info=True)
            log.error("internal error: %s: %s", type(exc).__name__, exc)
            return failure


def _run(config: EpilogConfig, env: Mapping[str, str], now: float | None, failure: int) -> int:
    deadline = sending_deadline(config.time_limit)
    try:
        job = slurm_job(env)
    except SlurmEnvironmentError as exc:
        log.error("%s; nothing done", exc)
        return failure
    if job is None:
        log.error("SLURM_JOB_ID is not set: not running as a Slurm epilog")
        return failure
    try:
        settings = writer_settings(config, job, env)
    except ConfigError as exc:
        log.error("%s", exc)
        return failure
    requests = source_requests(config, job, now)
    context = JobContext(job.job_id, config.cluster, job.user)
    report = run_job(context, requests, settings, deadline)
    log.info("job=%s done: points=%d problems=%d", job.job_id, report.points, len(report.problems))
    if config.report is not None:
        write_job_report(config, job, settings, report, deadline)
    return failure if report.problems else 0


def write_job_report(
    config: EpilogConfig,
    job: SlurmJob,
    settings: WriterSettings,
    run: RunReport,
    deadline: Deadline,
) -> Path | None:
    """The job's report, once InfluxDB acknowledged every point (a report of half the points
    would read as complete); a bonus: any failure is one line, never the epilog's status."""
    assert config.report is not None
    delivered = run.points and all(
        not (d.spooled or d.rejected or d.lost or d.problems) for d in run.destinations
    )
    if not delivered:
        log.warning(
            "job=%s report not written: the points are not all in InfluxDB yet "
            "(run hpcmon-report --job-id %s later)",
            job.job_id,
            job.job_id,
        )
        return None
    try:
        from report.api import write_report
        from report.influx import InfluxSettings
    except ImportError as exc:
        log.warning("job=%s report not written: %s (install hpcmon[report])", job.job_id, exc)
        return None
    suffix = REPORT_FORMATS[config.report.format]
    target = Path(output_path(config.report.dir, job, config.cluster)) / f"{job.job_id}.{suffix}"
    influx = InfluxSettings(
        v1_url=settings.v1_url,
        database=settings.v1_database,
        retention_policy=settings.v1_retention_policy,
        v2_url=settings.v2_url,
        org=settings.v2_org,
        bucket=settings.v2_bucket,
        token_file=config.writers.get("influx_v2", {}).get("token_file"),
    )
    try:
        written = write_report(
            job.job_id,
            config.cluster,
            influx,
            config.report.prometheus_url,
            target,
            deadline=deadline.end,
            fmt=config.report.format,
        )
    except Exception as exc:  # noqa: BLE001 - the points are in: a report failure is one line
        log.warning("job=%s report not written: %s: %s", job.job_id, type(exc).__name__, exc)
        return None
    log.info("job=%s report written: %s", job.job_id, written)
    return written
