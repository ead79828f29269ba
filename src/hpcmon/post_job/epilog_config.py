"""The epilog's YAML file -> ``EpilogConfig``: every key checked when the file is loaded, the
typed values through the option registry (options.py), patterns checked (patterns.py).
A mistake is one ``ConfigError`` naming the file and the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcmon.common.config import ConfigError, load_yaml_mapping, shown_key
from hpcmon.post_job.app import check_app_template
from hpcmon.post_job.options import option, source_options
from hpcmon.post_job.patterns import check_pattern
from hpcmon.post_job.writers import url_problem

DEFAULT_TIME_LIMIT: float = option("", "time_limit_seconds").config_default()
DEFAULT_SEARCH_DAYS: int = option("", "search_days").config_default()
# Darshan's runtime names logs <logdir>/<year>/<month>/<day>/<user>_<exe>_id<jobid>_...darshan
# with month and day unpadded, from the local time at which the application started.
DARSHAN_DEFAULT_PATTERN = "{logdir}/{year}/{month}/{day}/{user}_*_id{jobid}_*.darshan"

# source -> config keys holding input patterns, in the order of the entry's arguments
SOURCE_INPUTS: dict[str, tuple[str, ...]] = {
    "darshan": ("logs", "texts"),
    "recorder": ("dirs",),
    "viztracer": ("traces",),
    "geopm_report": ("reports",),
}
# Where a source's inputs live, which decides which of a job's nodes reads them: "job" inputs
# (on the shared file system: Darshan, Recorder, VizTracer) are read once per job, by the
# job's first node; "node" inputs (a GEOPM report under /var/log) on every node of the job.
SCOPES = ("job", "node")
DEFAULT_SCOPE = {"darshan": "job", "recorder": "job", "viztracer": "job", "geopm_report": "node"}
# source -> {config key: contract keyword} of the output file options (patterns); the typed
# options come from the registry (post_job/options.py)
_SOURCE_PATHS: dict[str, dict[str, str]] = {
    "darshan": {"signals_out": "signals_out"},
    "recorder": {},
    "viztracer": {"cleaned_out": "cleaned_out"},
    "geopm_report": {},
}
_TOP_KEYS = {
    "app",
    "cluster",
    "time_limit_seconds",
    "memory_limit_mib",
    "search_days",
    "strict",
    "log",
    "spool_dir",
    "writers",
    "sources",
    "report",
    "slurm",
}
_SLURM_KEYS = {"squeue", "timeout_seconds"}
_REPORT_KEYS = {"dir", "format", "prometheus_url"}
REPORT_FORMATS = {"html": "html", "json": "json", "text": "txt"}  # format -> file suffix
_WRITER_KEYS = {"output", "influx_v2", "influx_v1", "batch_size", "request_timeout_seconds"}


@dataclass
class SourceConfig:
    name: str
    patterns: dict[str, list[str]]  # input key -> glob patterns
    options: dict[str, Any]  # contract keyword -> value (paths still patterns)
    logdir: str | None = None
    scope: str = "job"  # SCOPES: read on the job's first node, or on every node


@dataclass(frozen=True)
class SlurmQueryConfig:
    """The one question to slurmctld about the finished job (slurm_controller.py)."""

    squeue: str = "squeue"
    timeout: float = option("slurm", "timeout_seconds").config_default()


@dataclass
class EpilogConfig:
    cluster: str | None = None
    time_limit: float = DEFAULT_TIME_LIMIT
    memory_limit_mib: int | None = None  # None: reading.default_memory_limit_mib()
    search_days: int = DEFAULT_SEARCH_DAYS  # days back to search when Slurm gives no times
    strict: bool = False
    syslog: bool = False
    spool_dir: str | None = None
    writers: dict[str, Any] = field(default_factory=dict)
    sources: list[SourceConfig] = field(default_factory=list)
    report: ReportConfig | None = None
    app: str | None = None  # the app tag; "{job_name}" is the Slurm job name (post_job/app.py)
    slurm: SlurmQueryConfig = field(default_factory=SlurmQueryConfig)


@dataclass(frozen=True)
class ReportConfig:
    """The per-job report (hpcmon-report) written next to the points once they are in."""

    dir: str  # a pattern with {jobid} {user} {uid} {cluster} {year} {month} {day}
    format: str = "html"
    prometheus_url: str | None = None  # Lustre rates, power and alerts of the job


def _where(path: Path | str, key: str) -> str:
    return f"{path}: {key}"


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(value).__name__}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(shown_key(key) for key in data if key not in allowed)
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
    if data.get("app") is not None:
        config.app = check_app_template(
            _text(data["app"], _where(path, "app")), _where(path, "app")
        )
    for key in ("time_limit_seconds", "memory_limit_mib", "search_days"):
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
    _check_keys(sources, set(SOURCE_INPUTS), _where(path, "sources"))
    for name, raw in sources.items():
        config.sources.append(
            _parse_source(name, _mapping(raw, _where(path, f"sources.{name}")), path)
        )
    servers = {"influx_v1", "influx_v2"} & set(config.writers)
    if not servers and "output" not in config.writers:
        # standard output would end in the epilog's log (or nowhere): refuse instead
        raise ConfigError(f"{_where(path, 'writers')}: give output, influx_v2 or influx_v1")
    if data.get("slurm") is not None:
        config.slurm = _parse_slurm(_mapping(data["slurm"], _where(path, "slurm")), path)
    if "report" in data:
        config.report = _parse_report(_mapping(data["report"], _where(path, "report")), path)
        if not servers:
            raise ConfigError(f"{_where(path, 'report')} needs writers.influx_v2 or influx_v1")
    if config.spool_dir and not servers:
        raise ConfigError(f"{_where(path, 'spool_dir')} needs writers.influx_v2 or influx_v1")
    return config


def _parse_slurm(data: Mapping[str, Any], path: Path | str) -> SlurmQueryConfig:
    _check_keys(data, _SLURM_KEYS, _where(path, "slurm"))
    query = SlurmQueryConfig()
    if data.get("squeue") is not None:
        query = SlurmQueryConfig(_text(data["squeue"], _where(path, "slurm.squeue")))
    if "timeout_seconds" in data:
        item = option("slurm", "timeout_seconds")
        timeout = item.from_config(data["timeout_seconds"], _where(path, "slurm.timeout_seconds"))
        query = SlurmQueryConfig(query.squeue, timeout)
    return query


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
    inputs, paths, typed = SOURCE_INPUTS[name], _SOURCE_PATHS[name], source_options(name)
    allowed = set(inputs) | set(paths) | set(typed) | {"scope"}
    allowed |= {"logdir"} if name == "darshan" else set()
    _check_keys(data, allowed, where)
    source = SourceConfig(name, {}, {}, scope=DEFAULT_SCOPE[name])
    if data.get("scope") is not None:
        if data["scope"] not in SCOPES:
            raise ConfigError(
                f"{where}.scope must be 'job' (shared file system: read by the job's first "
                "node) or 'node' (node-local files: read on every node)"
            )
        source.scope = data["scope"]
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
        assert item.keyword is not None  # every source option has one
        if data.get(key) is not None:
            source.options[item.keyword] = item.from_config(data[key], f"{where}.{key}")
    for key, keyword in paths.items():
        if data.get(key) is not None:
            source.options[keyword] = _text(data[key], f"{where}.{key}")
            check_pattern(source.options[keyword], f"{where}.{key}")
    return source


def load_config(path: Path | str) -> EpilogConfig:
    return parse_config(load_yaml_mapping(path), path)
