"""Long-range view: weeks and months from the long-term recorded series (hpcmon-longterm.yaml)
only, never from the raw per-job-per-target series a long-term store does not keep."""

from __future__ import annotations

from grafanalib import core

from . import grafana as g
from .config import Config, duration_seconds
from .grafana import INFLUXDB, PROMETHEUS, PanelSpec, Query
from .history import regressed_applications
from .overview import job_link
from .promql import selector
from .uids import JOB_UID, LONGTERM_UID, OVERVIEW_UID
from .variables import cluster_matcher, datasource_variable, prometheus_query_variable

TARGET_BYTES = "hpcmon:lustre_target_bytes:avg5m"
JOB_BYTES = "hpcmon:lustre_job_bytes:avg5m"
JOB_METADATA = "hpcmon:lustre_job_metadata_ops:avg5m"
TOP_SHARE = "hpcmon:lustre_target_top_job_share:max5m"
TARGET_JOBS = "hpcmon:lustre_target_jobs:count5m"
NODE_POWER = "hpcmon:node_power_watts:avg5m"
JOB_POWER = "hpcmon:job_power_watts:avg5m"


def _spec(title: str, unit: str, query: Query, description: str) -> PanelSpec:
    return PanelSpec(PROMETHEUS, title, unit, [query], description=description)


def _top_jobs(title: str, unit: str, expr: str, description: str) -> core.Panel:
    spec = _spec(title, unit, Query(expr, instant=True), description)
    spec.links = [job_link()]
    spec.link_field = "jobid"
    organize = {
        "id": "organize",
        "options": {"excludeByName": {"Time": True}, "renameByName": {"Value": unit}},
    }
    return g.table(spec, sort_by=unit, transformations=[organize])


def build(config: Config) -> core.Dashboard:
    step = int(duration_seconds(config.longterm_interval))  # seconds one sample covers
    cluster = cluster_matcher(config)
    target_sel = selector(cluster, 'target=~"$target"')
    any_sel = selector(cluster)
    top = config.top_jobs
    layout = g.Layout()

    layout.row("File system (5-minute averages)")
    for direction in ("write", "read"):
        direction_sel = selector(cluster, 'target=~"$target"', f'direction="{direction}"')
        layout.add(
            g.timeseries(
                _spec(
                    f"{direction.capitalize()} throughput per target",
                    "Bps",
                    Query(f"sum by (target) ({TARGET_BYTES}{direction_sel})", legend="{{target}}"),
                    f"Bytes {direction} per second, 5-minute averages ({TARGET_BYTES}).",
                ),
                stacked=True,
            )
        )
    layout.add(
        g.timeseries(
            _spec(
                "Busiest job's share of each target",
                "percentunit",
                Query(f"max by (target) ({TOP_SHARE}{target_sel})", legend="{{target}}"),
                "What LustreJobDominatesTarget looks at, kept without the job's series.",
            )
        )
    )
    layout.add(
        g.timeseries(
            _spec(
                "Active jobs per target",
                "short",
                Query(f"sum by (target) ({TARGET_JOBS}{target_sel})", legend="{{target}}"),
                "Jobs that moved bytes on the target in each 5 minutes.",
            )
        )
    )

    layout.row("Jobs over the time range")
    layout.add(
        _top_jobs(
            f"Top {top} jobs by bytes moved",
            "bytes",
            f"topk({top}, sum by (jobid) (sum_over_time({JOB_BYTES}{any_sel}[$__range])) * {step})",
            "Bytes read plus written over the time range (5-minute averages x 5 minutes).",
        ),
        width=8,
    )
    layout.add(
        _top_jobs(
            f"Top {top} jobs by metadata operations",
            "short",
            f"topk({top}, sum by (jobid) (sum_over_time({JOB_METADATA}{any_sel}[$__range])) "
            f"* {step})",
            "Metadata operations over the time range, all MDTs.",
        ),
        width=8,
    )
    layout.add(
        _top_jobs(
            f"Top {top} jobs by energy",
            "kwatth",
            f"topk({top}, sum by (jobid) (sum_over_time({JOB_POWER}{any_sel}[$__range])) "
            f"* {step} / 3.6e6)",
            "kWh over the time range: node power split equally between the jobs on the node.",
        ),
        width=8,
    )

    for owner in ("account", "user"):
        layout.row(f"By {owner} (Slurm's jobs)")
        for title, unit, series, description in (
            ("Lustre throughput", "Bps", f"hpcmon:lustre_{owner}_bytes:avg5m", "Bytes/s read "
             "plus written"),
            ("Metadata operations", "ops", f"hpcmon:lustre_{owner}_metadata_ops:avg5m",
             "Metadata operations/s, all MDTs"),
            ("Power", "watt", f"hpcmon:{owner}_power_watts:avg5m", "Power (shared nodes split "
             "equally)"),
        ):  # fmt: skip
            layout.add(
                g.timeseries(
                    _spec(
                        f"{title} by {owner}",
                        unit,
                        Query(f"sum by ({owner}) ({series}{any_sel})", legend=f"{{{{{owner}}}}}"),
                        f"{description} of the jobs of each {owner}, 5-minute averages ({series}).",
                    ),
                    stacked=True,
                ),
                width=8,
            )

    layout.row("Power")
    layout.add(
        g.timeseries(
            _spec(
                "Power per node",
                "watt",
                Query(f"sum by (instance) ({NODE_POWER}{any_sel})", legend="{{instance}}"),
                "CPU, DRAM and GPU power, 5-minute averages.",
            )
        ),
        width=24,
    )

    layout.row("Applications (InfluxDB: the post-job hook's app_run points)")
    layout.add(regressed_applications(config), width=24)

    variables = [
        datasource_variable(PROMETHEUS, "Prometheus", config.prometheus_datasource_uid),
        datasource_variable(INFLUXDB, "InfluxDB", config.influxdb_datasource_uid),
    ]
    if config.cluster_label:
        variables.append(
            prometheus_query_variable(
                "cluster", f"label_values({TARGET_BYTES}, {config.cluster_label})", "Cluster"
            )
        )
    variables.append(
        prometheus_query_variable("target", f"label_values({TARGET_BYTES}, target)", "Target")
    )
    return core.Dashboard(
        title="hpcmon: long-term file system and power",
        uid=LONGTERM_UID,
        description="Weeks and months from the hpcmon-longterm recording rules only.",
        tags=["hpcmon", "lustre", "power", "long-term"],
        timezone="browser",
        schemaVersion=g.SCHEMA_VERSION,
        time=core.Time("now-30d", "now"),
        templating=core.Templating(list=variables),
        panels=layout.panels,
        links=[
            g.dashboard_link(
                "Operations overview (last day, raw series)", OVERVIEW_UID, "var-jobid=All"
            ),
            g.dashboard_link("Job drill-down", JOB_UID, "var-jobid="),
        ],
    )
