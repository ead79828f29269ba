"""What a site sets for its dashboards and rules: thresholds, datasources, labels.

Every key has a default, so `hpcmon-dashboards generate` works without a file; a file names only
what differs. Unknown keys and wrong types are refused with one line naming the key.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hpcmon.common.config import ConfigError, load_yaml_mapping, shown_key

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_UID = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
_RESERVED_LABELS = {"component", "target", "jobid", "instance", "job", "operation", "source"}
# What the join with Slurm's job list adds to per-job series (hpc_slurm_job_info).
SLURM_JOB_LABELS = ("user", "account", "job_name")

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class Thresholds:
    """Alert thresholds; the defaults are the ones the alerts are documented with."""

    target_spike_factor: float = 4.0  # x the target's average over the previous 24 h
    target_spike_min_bytes_per_second: float = 1 * GIB
    target_spike_for: str = "5m"
    target_spike_baseline: str = "24h"  # the average the spike is compared with ...
    target_spike_baseline_offset: str = "5m"  # ... ending this long ago (the spike's window)
    target_spike_min_baseline_coverage: float = 0.5  # share of the baseline with samples
    job_dominates_share: float = 0.8
    job_dominates_min_bytes_per_second: float = 500 * MIB
    job_dominates_for: str = "10m"
    metadata_storm_ops_per_second: float = 10_000
    metadata_storm_for: str = "10m"
    small_writes_ops_per_second: float = 5_000
    small_writes_max_mean_bytes: float = 64 * 1024
    small_writes_for: str = "15m"
    jobstats_down_for: str = "5m"
    collector_failing_for: str = "10m"
    geopm_down_for: str = "10m"
    slurm_down_for: str = "10m"  # Slurm's job list not read (squeue failing): names missing
    postjob_backlog_age_seconds: float = 3600  # a node's oldest undelivered post-job line
    postjob_backlog_for: str = "15m"


@dataclass(frozen=True)
class Config:
    grafana_url: str = "http://localhost:3000"  # base of the links in alert annotations
    prometheus_url: str = "http://localhost:9090"  # provisioned datasource
    influxdb_url: str = "http://localhost:8086"
    influxdb_database: str = "hpcmon"
    prometheus_datasource_uid: str = "hpcmon-prometheus"
    influxdb_datasource_uid: str = "hpcmon-influxdb"
    dashboards_path: str = "/var/lib/grafana/dashboards/hpcmon"  # provider folder in Grafana
    jobstats_scrape_job: str = "hpcmon-jobstats"  # Prometheus job name of jobstats exporters
    cluster_label: str = ""  # a site label on every series (e.g. from external_labels); none
    cluster: str = ""  # the post-job hook's --cluster value to select in InfluxDB; any
    jobid_labels: tuple[str, ...] = ()  # named groups of --jobstats.jobid-pattern
    # the label of the Lustre series holding Slurm's job id: jobid, or a jobid_labels group
    # (e.g. slurm_job) where the site's jobstats ids carry more than the number
    slurm_jobid_label: str = "jobid"
    rates_from: str = "counters"  # counters: rate() on _total; gauges: the exporter's rates
    top_jobs: int = 10
    rule_interval: str = "1m"
    longterm_interval: str = "5m"  # the long-term store's recorded series (hpcmon:*:avg5m)
    thresholds: Thresholds = field(default_factory=Thresholds)


def duration_seconds(duration: str) -> float:
    """A Prometheus duration (e.g. 1h30m) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration))


def _check_value(key: str, value: Any, expected: Any) -> Any:
    """Coerce what YAML gives to the declared type, or say which key is wrong."""
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if value != value or value in (float("inf"), float("-inf")) or value < 0:
            raise ConfigError(f"{key}: expected a finite number >= 0, got {value!r}")
        return float(value)
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
            raise ConfigError(f"{key}: expected a whole number from 1 to 1000, got {value!r}")
        return value
    if expected is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if expected == tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of label names, got {value!r}")
        return tuple(value)
    raise AssertionError(expected)


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            known_keys = ", ".join(sorted(known))
            raise ConfigError(f"{prefix}{shown_key(key)}: unknown key (known: {known_keys})")
        declared = known[key].type
        assert isinstance(declared, str)  # the annotation's text: annotations are postponed
        if declared == "Thresholds":
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{key}: expected a mapping")
            values[key] = _build(Thresholds, value, f"{prefix}{key}.")
            continue
        kind = {"float": float, "int": int, "str": str}.get(declared, tuple[str, ...])
        values[key] = _check_value(prefix + key, value, kind)
    return cls(**values)


def validate(config: Config) -> Config:
    for name in ("grafana_url", "prometheus_url", "influxdb_url"):
        if not re.match(r"^https?://[^\s/]+", getattr(config, name)):
            raise ConfigError(f"{name}: expected an http(s) URL, got {getattr(config, name)!r}")
    for name in ("prometheus_datasource_uid", "influxdb_datasource_uid"):
        if not _UID.match(getattr(config, name)):
            raise ConfigError(f"{name}: 1 to 40 letters, digits, '-' or '_'")
    if config.cluster_label and not _LABEL_NAME.match(config.cluster_label):
        raise ConfigError(f"cluster_label: not a Prometheus label name: {config.cluster_label!r}")
    for label in config.jobid_labels:
        reserved = _RESERVED_LABELS | set(SLURM_JOB_LABELS) | {config.cluster_label}
        if not _LABEL_NAME.match(label) or label in reserved:
            raise ConfigError(f"jobid_labels: not a usable label name: {label!r}")
    if config.slurm_jobid_label not in ("jobid", *config.jobid_labels):
        raise ConfigError(
            f"slurm_jobid_label: 'jobid' or one of jobid_labels, got {config.slurm_jobid_label!r}"
        )
    if config.rates_from not in ("counters", "gauges"):
        raise ConfigError(f"rates_from: 'counters' or 'gauges', got {config.rates_from!r}")
    if "'" in config.cluster or "\\" in config.cluster:
        raise ConfigError("cluster: quotes and backslashes are not allowed")
    if not config.jobstats_scrape_job or '"' in config.jobstats_scrape_job:
        raise ConfigError("jobstats_scrape_job: a non-empty name without quotes")
    durations = {"rule_interval": config.rule_interval}
    durations["longterm_interval"] = config.longterm_interval
    durations.update(
        {
            f"thresholds.{f.name}": getattr(config.thresholds, f.name)
            for f in fields(Thresholds)
            if f.name.endswith(("_for", "_baseline", "_offset"))
        }
    )
    for key, value in durations.items():
        if not _DURATION.match(value):
            raise ConfigError(f"{key}: not a Prometheus duration (e.g. 5m): {value!r}")
    if config.thresholds.target_spike_min_baseline_coverage > 1:
        raise ConfigError("thresholds.target_spike_min_baseline_coverage: a fraction from 0 to 1")
    if config.thresholds.job_dominates_share > 1:
        raise ConfigError("thresholds.job_dominates_share: a fraction from 0 to 1")
    return config


def load(path: str | Path | None) -> Config:
    """The configuration of a YAML file, or the defaults when no file is given."""
    if path is None:
        return validate(Config())
    data = load_yaml_mapping(path)
    try:
        return validate(_build(Config, data, ""))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def replace(config: Config, **changes: Any) -> Config:
    return validate(dataclasses.replace(config, **changes))
