"""Dashboard variables, and the label matchers that follow them in every query."""

from __future__ import annotations

from grafanalib import core

from hpcmon.common import metric_names as m

from .config import Config
from .grafana import DATASOURCE_VARIABLE, INFLUXDB, PROMETHEUS, datasource

ALL = ".*"
COMPONENT = 'component=~"$component"'
TARGET = 'target=~"$target"'


def datasource_variable(kind: str, label: str, default_uid: str) -> core.Template:
    """Any datasource of the backend's type; the provisioned one (fixed uid) by default."""
    return core.Template(
        name=DATASOURCE_VARIABLE[kind],
        label=label,
        query=kind,
        type="datasource",
        default=default_uid,
        refresh=1,
    )


def prometheus_query_variable(
    name: str, query: str, label: str, multi: bool = True, hide: int = 0
) -> core.Template:
    return core.Template(
        name=name,
        label=label,
        query=query,
        dataSource=datasource(PROMETHEUS),
        includeAll=multi,
        multi=multi,
        allValue=ALL if multi else None,
        default="All" if multi else None,
        refresh=2,  # on time range change: jobs come and go
        sort=1,
        hide=hide,
    )


def cluster_matcher(config: Config) -> str:
    return f'{config.cluster_label}=~"$cluster"' if config.cluster_label else ""


def jobstats_matchers(config: Config, with_jobid: bool = True) -> str:
    """Matchers of the overview's variables for per-job jobstats series."""
    parts = [
        cluster_matcher(config),
        'instance=~"$instance"',
        'component=~"$component"',
        'target=~"$target"',
    ]
    if with_jobid:
        parts.append('jobid=~"$jobid"')
        parts += [f'{label}=~"${label}"' for label in config.jobid_labels]
    return ", ".join(p for p in parts if p)


def overview_variables(config: Config) -> list[core.Template]:
    cluster = cluster_matcher(config)
    scope = "{" + cluster + "}" if cluster else ""
    variables = [datasource_variable(PROMETHEUS, "Prometheus", config.prometheus_datasource_uid)]
    if config.cluster_label:
        variables.append(
            prometheus_query_variable(
                "cluster", f"label_values({m.JOBSTATS_UP}, {config.cluster_label})", "Cluster"
            )
        )
    up = f"{m.JOBSTATS_UP}{scope}"
    variables += [
        prometheus_query_variable("instance", f"label_values({up}, instance)", "Lustre server"),
        prometheus_query_variable("component", f"label_values({up}, component)", "Component"),
        prometheus_query_variable(
            "target",
            f"label_values({m.JOBSTATS_UP}{{{_join(cluster, COMPONENT)}}}, target)",
            "Target",
        ),
        prometheus_query_variable(
            "jobid",
            f"label_values({m.JOB_WRITE_BYTES}{{{_join(cluster, TARGET)}}}, jobid)",
            "Job",
        ),
    ]
    for label in config.jobid_labels:
        variables.append(
            prometheus_query_variable(
                label, f"label_values({m.JOB_WRITE_BYTES}{scope}, {label})", label
            )
        )
    variables.append(
        prometheus_query_variable("node", f"label_values({m.GEOPM_UP}{scope}, instance)", "Node")
    )
    return variables


def job_variables(config: Config) -> list[core.Template]:
    """The job dashboard: one job, chosen from the jobs the post-job hook wrote."""
    cluster = f" WHERE cluster = '{config.cluster}'" if config.cluster else ""
    variables = [
        datasource_variable(INFLUXDB, "InfluxDB", config.influxdb_datasource_uid),
        datasource_variable(PROMETHEUS, "Prometheus", config.prometheus_datasource_uid),
    ]
    if config.cluster_label:
        variables.append(
            prometheus_query_variable(
                "cluster", f"label_values({m.JOBSTATS_UP}, {config.cluster_label})", "Cluster"
            )
        )
    variables.append(
        core.Template(
            name="jobid",
            label="Job",
            query=f'SHOW TAG VALUES WITH KEY = "jobid"{cluster}',
            dataSource=datasource(INFLUXDB),
            refresh=1,
            sort=3,
        )
    )
    return variables


def _join(*parts: str) -> str:
    return ", ".join(p for p in parts if p)
