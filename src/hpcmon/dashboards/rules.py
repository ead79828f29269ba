"""Prometheus recording and alert rules, from the same metric names and PromQL as the dashboards.

Recording rules carry what the alerts and dashboards reuse (per-target and per-job throughput,
per-job metadata and write operations, node and job power) at a 5-minute window; alerts read the
recorded series only, so `rates_from: counters` and `rates_from: gauges` give the same alerts.
"""

from __future__ import annotations

import math
from typing import Any

from hpcmon.common import metric_names as m

from . import promql
from .config import MIB, Config, duration_seconds
from .uids import JOB_UID, OVERVIEW_UID

WINDOW = "5m"
TARGET_BYTES = "hpcmon:lustre_target_bytes:rate5m"
JOB_TARGET_BYTES = "hpcmon:lustre_job_target_bytes:rate5m"
JOB_BYTES = "hpcmon:lustre_job_bytes:rate5m"
JOB_WRITE_OPS = "hpcmon:lustre_job_write_ops:rate5m"
JOB_METADATA_OPS = "hpcmon:lustre_job_metadata_ops:rate5m"
NODE_POWER = "hpcmon:node_power_watts:rate5m"
JOB_POWER = "hpcmon:job_power_watts:rate5m"
# Per user and per account: the sum of the Lustre series of the jobs Slurm lists for them.
USER_BYTES = "hpcmon:lustre_user_bytes:rate5m"
ACCOUNT_BYTES = "hpcmon:lustre_account_bytes:rate5m"
USER_METADATA_OPS = "hpcmon:lustre_user_metadata_ops:rate5m"
ACCOUNT_METADATA_OPS = "hpcmon:lustre_account_metadata_ops:rate5m"
# Long-term (hpcmon-longterm): per-job, per-user and per-account 5-minute averages.
LONGTERM_JOB_BYTES = "hpcmon:lustre_job_bytes:avg5m"
LONGTERM_JOB_METADATA_OPS = "hpcmon:lustre_job_metadata_ops:avg5m"
LONGTERM_JOB_POWER = "hpcmon:job_power_watts:avg5m"
LONGTERM_USER_BYTES = "hpcmon:lustre_user_bytes:avg5m"
LONGTERM_ACCOUNT_BYTES = "hpcmon:lustre_account_bytes:avg5m"
LONGTERM_USER_METADATA_OPS = "hpcmon:lustre_user_metadata_ops:avg5m"
LONGTERM_ACCOUNT_METADATA_OPS = "hpcmon:lustre_account_metadata_ops:avg5m"
USER_POWER = "hpcmon:user_power_watts:avg5m"
ACCOUNT_POWER = "hpcmon:account_power_watts:avg5m"

# A job alert's summary names the job, and its name, user and account when Slurm lists it:
# "Job 4242 (climate-run, user alice, account proj1)".
JOB_NAMED = (
    "{{ $labels.jobid }}{{ if $labels.user }} ({{ with $labels.job_name }}{{ . }}, {{ end }}"
    "user {{ $labels.user }}{{ with $labels.account }}, account {{ . }}{{ end }}){{ end }}"
)

ALERT_NAMES = (
    "LustreTargetIOSpike",
    "LustreJobDominatesTarget",
    "LustreJobMetadataStorm",
    "LustreJobSmallWrites",
    "LustreJobstatsDown",
    "HpcmonCollectorFailing",
    "GeopmDown",
    "SlurmJobListDown",
    "HpcmonPostJobBacklog",
)


def _by(config: Config, *labels: str) -> str:
    """`by (...)` with the site label first when the config names one."""
    return "by ({})".format(", ".join(x for x in (config.cluster_label, *labels) if x))


def _job_labels(config: Config) -> tuple[str, ...]:
    return ("jobid", *config.jobid_labels)


def _per_owner(config: Config, series: str, owner: str, *labels: str, on: str = "") -> str:
    """`series` (per job) summed per user or account of the jobs Slurm lists; jobs it does
    not list are in no sum. Lustre series join on `slurm_jobid_label`, power on jobid (the
    node's Slurm cgroups name jobs by Slurm's id)."""
    joined = promql.with_slurm_job(
        series, on or config.slurm_jobid_label, site_label=config.cluster_label
    )
    return f"sum {_by(config, owner, *labels)} (\n{joined}\n)"


def _named(config: Config, expr: str) -> str:
    """A job alert's expression with the job's user, account and name when Slurm lists it,
    and exactly as without the join when it does not."""
    return promql.named_by_slurm(expr, config.slurm_jobid_label, config.cluster_label)


def recording_rules(config: Config) -> list[dict[str, Any]]:
    rates = promql.Rates(config)
    target_by = _by(config, "component", "target")
    job_target_by = _by(config, *_job_labels(config), "component", "target")
    job_by = _by(config, *_job_labels(config))
    rules: list[dict[str, Any]] = []
    for direction in ("read", "write"):
        per_series = rates.bytes(direction, "", WINDOW)
        # Targets with no active job still get a 0, so the 24 h average sees idle time.
        idle = f'sum {target_by} (0 * {m.JOBSTATS_UP}{{target!=""}})'
        rules.append(
            {
                "record": TARGET_BYTES,
                "expr": f"sum {target_by} ({per_series}) or {idle}",
                "labels": {"direction": direction},
            }
        )
        rules.append(
            {
                "record": JOB_TARGET_BYTES,
                "expr": f"sum {job_target_by} ({per_series})",
                "labels": {"direction": direction},
            }
        )
        rules.append(
            {
                "record": JOB_BYTES,
                "expr": f"sum {job_by} ({per_series})",
                "labels": {"direction": direction},
            }
        )
    rules.append(
        {
            "record": JOB_WRITE_OPS,
            "expr": f"sum {job_by} ({rates.write_ops(promql.OST, WINDOW)})",
        }
    )
    rules.append(
        {"record": JOB_METADATA_OPS, "expr": f"sum {job_by} ({rates.metadata_ops('', WINDOW)})"}
    )
    for owner in ("user", "account"):
        rules.append(
            {
                "record": USER_BYTES if owner == "user" else ACCOUNT_BYTES,
                "expr": _per_owner(config, JOB_BYTES, owner, "direction"),
            }
        )
        rules.append(
            {
                "record": USER_METADATA_OPS if owner == "user" else ACCOUNT_METADATA_OPS,
                "expr": _per_owner(config, JOB_METADATA_OPS, owner),
            }
        )
    rules.append(
        {"record": NODE_POWER, "expr": promql.node_power(WINDOW, site_label=config.cluster_label)}
    )
    rules.append(
        {"record": JOB_POWER, "expr": promql.job_power(WINDOW, site_label=config.cluster_label)}
    )
    return rules


def _window_ms(offset_seconds: int) -> str:
    """A Go template giving the evaluation time minus offset_seconds, in ms, for Grafana."""
    return (
        f'{{{{ with query "(time() - {offset_seconds}) * 1000" }}}}'
        '{{ . | first | value | printf "%.0f" }}{{ end }}'
    )


def _link(config: Config, uid: str, variables: dict[str, str], lookback_seconds: int) -> str:
    """Drill-down URL with the variables and the alert's window (lookback before now, to now)."""
    query = "&".join(
        f"var-{name}={{{{ {value} | urlquery }}}}" for name, value in variables.items()
    )
    window = f"from={_window_ms(lookback_seconds)}&to={_window_ms(-300)}"
    return f"{config.grafana_url.rstrip('/')}/d/{uid}/{uid}?{query + '&' if query else ''}{window}"


def _number(value: float) -> str:
    """A threshold in PromQL, exactly (1 GiB is 1073741824, not 1.07374e+09)."""
    return str(int(value)) if value == int(value) else repr(value)


def alert_rules(config: Config) -> list[dict[str, Any]]:
    t = config.thresholds
    matching = ", ".join(x for x in (config.cluster_label, "component", "target", "direction") if x)
    job_matching = ", ".join(x for x in (config.cluster_label, *_job_labels(config)) if x)
    job_by = _by(config, *_job_labels(config))

    def job_link(duration: str) -> str:
        return _link(
            config, JOB_UID, {"jobid": "$labels.jobid"}, int(duration_seconds(duration)) + 3600
        )

    def overview_link(duration: str, **variables: str) -> str:
        return _link(config, OVERVIEW_UID, variables, int(duration_seconds(duration)) + 3600)

    # A baseline needs history: a target that just appeared (or a store that just started)
    # has no 24 h average to compare with, only its first minutes.
    baseline = f"{TARGET_BYTES}[{t.target_spike_baseline}] offset {t.target_spike_baseline_offset}"
    samples = duration_seconds(t.target_spike_baseline) / duration_seconds(config.rule_interval)
    return [
        {
            "alert": "LustreTargetIOSpike",
            "expr": (
                f"{TARGET_BYTES} >= {_number(t.target_spike_factor)} * avg_over_time({baseline})\n"
                f"and {TARGET_BYTES} >= {_number(t.target_spike_min_bytes_per_second)}\n"
                f"and count_over_time({baseline})"
                f" >= {math.ceil(samples * t.target_spike_min_baseline_coverage)}"
            ),
            "for": t.target_spike_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Lustre target {{ $labels.target }}: {{ $labels.direction }} spike",
                "description": (
                    "{{ $labels.target }} ({{ $labels.component }}) {{ $labels.direction }}s "
                    "{{ $value | humanize1024 }}B/s over 5 min, at least "
                    f"{t.target_spike_factor:g}x its average over the previous 24 h. "
                    "The jobs behind it are in the dashboard's top-jobs tables."
                ),
                "dashboard": overview_link(
                    t.target_spike_for, component="$labels.component", target="$labels.target"
                ),
            },
        },
        {
            "alert": "LustreJobDominatesTarget",
            "expr": _named(
                config,
                f"{JOB_TARGET_BYTES}\n  / on ({matching}) group_left ()\n  {TARGET_BYTES}\n"
                f"  >= {_number(t.job_dominates_share)}\n"
                f"and on ({matching})\n"
                f"  {TARGET_BYTES} >= {_number(t.job_dominates_min_bytes_per_second)}",
            ),
            "for": t.job_dominates_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Job {JOB_NAMED} dominates {{{{ $labels.target }}}}",
                "description": (
                    "Job {{ $labels.jobid }} carries {{ $value | humanizePercentage }} of "
                    "{{ $labels.target }}'s {{ $labels.direction }} throughput while the target "
                    f"moves at least {t.job_dominates_min_bytes_per_second / MIB:g} MiB/s."
                ),
                "dashboard": job_link(t.job_dominates_for),
            },
        },
        {
            "alert": "LustreJobMetadataStorm",
            "expr": _named(
                config, f"{JOB_METADATA_OPS} >= {_number(t.metadata_storm_ops_per_second)}"
            ),
            "for": t.metadata_storm_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Job {JOB_NAMED}: metadata storm",
                "description": (
                    "Job {{ $labels.jobid }} averages {{ $value | humanize }} metadata "
                    "operations/s over 5 min, summed over all MDTs and operations (threshold "
                    f"{t.metadata_storm_ops_per_second:g}/s)."
                ),
                "dashboard": job_link(t.metadata_storm_for),
            },
        },
        {
            "alert": "LustreJobSmallWrites",
            "expr": _named(
                config,
                f"{JOB_WRITE_OPS} >= {_number(t.small_writes_ops_per_second)}\n"
                f"and on ({job_matching})\n"
                f'  (sum {job_by} ({JOB_TARGET_BYTES}{{direction="write", component="ost"}})'
                f"\n   / {JOB_WRITE_OPS} < {_number(t.small_writes_max_mean_bytes)})",
            ),
            "for": t.small_writes_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Job {JOB_NAMED}: many small writes",
                "description": (
                    "Job {{ $labels.jobid }} issues {{ $value | humanize }} writes/s to the OSTs "
                    f"with a mean write size under {t.small_writes_max_mean_bytes / 1024:g} KiB."
                ),
                "dashboard": job_link(t.small_writes_for),
            },
        },
        {
            "alert": "LustreJobstatsDown",
            "expr": (f'{m.JOBSTATS_UP} == 0\nor up{{job="{config.jobstats_scrape_job}"}} == 0'),
            "for": t.jobstats_down_for,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Jobstats not collected from {{ $labels.instance }}",
                "description": (
                    "{{ if $labels.target }}Target {{ $labels.target }} ({{ $labels.source }}) "
                    "could not be read{{ else }}The exporter is not scraped{{ end }} on "
                    "{{ $labels.instance }}: per-job I/O of that server is missing."
                ),
                "dashboard": overview_link(t.jobstats_down_for, instance="$labels.instance"),
            },
        },
        {
            "alert": "HpcmonCollectorFailing",
            "expr": f"{m.COLLECTOR_SUCCESS} == 0",
            "for": t.collector_failing_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Collector {{ $labels.collector }} failing on {{ $labels.instance }}",
                "description": (
                    "The {{ $labels.collector }} collector of {{ $labels.instance }} has failed "
                    "at every scrape; see the exporter's log."
                ),
                "dashboard": overview_link(t.collector_failing_for, instance="$labels.instance"),
            },
        },
        {
            "alert": "GeopmDown",
            "expr": f"max without (source) ({m.GEOPM_UP}) == 0",
            "for": t.geopm_down_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "No power source on {{ $labels.instance }}",
                "description": (
                    "Neither GEOPM nor powercap gives power and energy on {{ $labels.instance }}: "
                    "job energy for that node is missing."
                ),
                "dashboard": overview_link(t.geopm_down_for, instance="$labels.instance"),
            },
        },
        {
            "alert": "SlurmJobListDown",
            "expr": f"{m.SLURM_UP} == 0",
            "for": t.slurm_down_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Slurm's job list not read on {{ $labels.instance }}",
                "description": (
                    "squeue fails or hangs on {{ $labels.instance }} (see the exporter's log): "
                    "its job alerts and dashboards show job ids without user, account and job "
                    "name while no other host reads Slurm's list."
                ),
                "dashboard": overview_link(t.slurm_down_for, instance="$labels.instance"),
            },
        },
        {
            "alert": "HpcmonPostJobBacklog",
            "expr": (
                f"max without (kind) ({m.POSTJOB_SPOOL_OLDEST_AGE})"
                f" > {_number(t.postjob_backlog_age_seconds)}"
            ),
            "for": t.postjob_backlog_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Post-job data stuck on {{ $labels.instance }}",
                "description": (
                    "The oldest line in the post-job spool of {{ $labels.instance }} has waited "
                    "{{ $value | humanizeDuration }}: the epilog hook cannot deliver to "
                    "InfluxDB. The lines are kept; 'hpcmon-post-job flush' sends them once the "
                    "server takes data."
                ),
                "dashboard": overview_link(t.postjob_backlog_for, instance="$labels.instance"),
            },
        },
    ]


def longterm_rules(config: Config) -> list[dict[str, Any]]:
    """Per-job and per-target aggregates without the job x target product, every 5 minutes:
    what a long-term store keeps, so views older than a day need no raw per-job series."""
    job = ", ".join(x for x in (config.cluster_label, *_job_labels(config)) if x)
    target = ", ".join(x for x in (config.cluster_label, "component", "target") if x)
    window = "[5m]"

    def avg(series: str) -> str:
        return f"avg_over_time({series}{window})"

    active = f"sum without (direction) ({avg(JOB_TARGET_BYTES)}) > 0"
    rules = [
        {"record": "hpcmon:lustre_target_bytes:avg5m", "expr": avg(TARGET_BYTES)},
        {"record": LONGTERM_JOB_BYTES, "expr": avg(JOB_BYTES)},
        {
            "record": "hpcmon:lustre_job_component_bytes:avg5m",
            "expr": f"sum by ({job}, component, direction) ({avg(JOB_TARGET_BYTES)})",
        },
        {"record": "hpcmon:lustre_job_write_ops:avg5m", "expr": avg(JOB_WRITE_OPS)},
        {"record": LONGTERM_JOB_METADATA_OPS, "expr": avg(JOB_METADATA_OPS)},
        {"record": "hpcmon:lustre_job_targets:count5m", "expr": f"count by ({job}) ({active})"},
        {"record": "hpcmon:lustre_target_jobs:count5m", "expr": f"count by ({target}) ({active})"},
        {
            "record": "hpcmon:lustre_target_top_job_share:max5m",
            "expr": (
                f"max by ({target}, direction) ({avg(JOB_TARGET_BYTES)})\n"
                f"/ on ({target}, direction) ({avg(TARGET_BYTES)} > 0)"
            ),
        },
        {"record": "hpcmon:node_power_watts:avg5m", "expr": avg(NODE_POWER)},
        {"record": LONGTERM_JOB_POWER, "expr": avg(JOB_POWER)},
    ]
    # Which user and which project, kept without the job: sums of the per-job series just
    # recorded above (same group, same instant), so a user's or an account's total is the
    # sum of its jobs' long-term series.
    for owner, bytes_, metadata, power in (
        ("user", LONGTERM_USER_BYTES, LONGTERM_USER_METADATA_OPS, USER_POWER),
        ("account", LONGTERM_ACCOUNT_BYTES, LONGTERM_ACCOUNT_METADATA_OPS, ACCOUNT_POWER),
    ):
        rules += [
            {"record": bytes_, "expr": _per_owner(config, LONGTERM_JOB_BYTES, owner, "direction")},
            {"record": metadata, "expr": _per_owner(config, LONGTERM_JOB_METADATA_OPS, owner)},
            {"record": power, "expr": _per_owner(config, LONGTERM_JOB_POWER, owner, on="jobid")},
        ]
    return rules


def rule_files(config: Config) -> dict[str, dict[str, Any]]:
    """File name -> Prometheus rule file content."""
    return {
        "hpcmon-recording.yaml": {
            "groups": [
                {
                    "name": "hpcmon-recording",
                    "interval": config.rule_interval,
                    "rules": recording_rules(config),
                }
            ]
        },
        "hpcmon-alerts.yaml": {
            "groups": [
                {
                    "name": "hpcmon-alerts",
                    "interval": config.rule_interval,
                    "rules": alert_rules(config),
                }
            ]
        },
        "hpcmon-longterm.yaml": {
            "groups": [
                {
                    "name": "hpcmon-longterm",
                    "interval": config.longterm_interval,
                    "rules": longterm_rules(config),
                }
            ]
        },
    }
