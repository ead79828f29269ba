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


# The overview's `account` and `user` variables select Slurm's jobs (hpc_slurm_job_info). The
# same matchers on a Lustre or node series, which has neither label, select every series when
# the variable is All (`.*` matches the empty value) and none when it names someone: the jobs
# Slurm does not list show in the job tables under All only.
SLURM_FILTER = 'account=~"$account", user=~"$user"'


def slurm_matchers(config: Config) -> str:
    """Matchers of the overview's variables for Slurm's job series."""
    return ", ".join(p for p in (cluster_matcher(config), SLURM_FILTER) if p)


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
    of_account = "{" + _join(cluster, 'account=~"$account"') + "}"
    variables += [
        prometheus_query_variable(
            "account", f"label_values({m.SLURM_JOB_INFO}{scope}, account)", "Account"
        ),
        prometheus_query_variable(
            "user", f"label_values({m.SLURM_JOB_INFO}{of_account}, user)", "User"
        ),
    ]
    return variables


# Where a finished job's points lie (post_job/layout.py): the hidden variables ``jobfirst``
# and ``joblast`` hold the first and the last whole second of its stamps, and ``user`` its
# user, from its job_index points; every post-job query of the drill-down reads its points
# within them. Seconds, not the stamps' nanoseconds: a variable's number goes through a
# JavaScript number, exact to 2^53 only, and every point keeps its second (the lattice is in
# the nanoseconds).
JOB_INDEX = "job_index"
JOB_WINDOW = "time >= ${jobfirst}s AND time < ${joblast}s + 1s"
_NS = 1_000_000_000


def _whole_second(aggregate: str) -> str:
    """The second of an integer ns stamp, exactly (the remainder is taken before the division,
    which makes a float: a float division alone would round x.999999999 up to x + 1)."""
    return f"({aggregate} - {aggregate} % {_NS}) / {_NS}"


def job_filter(config: Config) -> str:
    """The chosen job's points: its ``jobid`` field within its window, in its user's series
    (the hook tags every point of a job with its user, on every node; none without a user,
    which ``"user" = ''`` selects). InfluxDB reads every series the tags select over the
    window: without the window, all time; without the user, every user's series of the
    measurement in the window's shards, tens of milliseconds a panel at a site's scale."""
    cluster = f" AND \"cluster\" = '{config.cluster}'" if config.cluster else ""
    return f"\"jobid\" = '$jobid' AND \"user\" = '$user'{cluster} AND {JOB_WINDOW}"


def has_any(*fields: str) -> str:
    """A condition: the point has one of ``fields`` (InfluxQL has no IS NOT NULL; a field
    equals itself only where the point has it). Rows of a raw SELECT that names the job id
    field come back when every figure is missing, which its tag never did."""
    either = " OR ".join(f'"{name}" = "{name}"' for name in fields)
    return f"({either})" if len(fields) > 1 else either


def job_variables(config: Config) -> list[core.Template]:
    """The job dashboard: one job, chosen from the jobs the post-job hook indexed in the time
    range (job_index), its window and its user (hidden: they follow $jobid, not the time
    range, which a link from a list of jobs sets to that list's range)."""
    cluster = f" AND \"cluster\" = '{config.cluster}'" if config.cluster else ""
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
            # the jobs indexed in the time range (the index's job id is a field: no series a job)
            query=f'SELECT DISTINCT("jobid") FROM "{JOB_INDEX}" WHERE $timeFilter{cluster}',
            dataSource=datasource(INFLUXDB),
            refresh=2,
            sort=3,
        )
    )
    # The job's window from every index point of the job (jobid is a field: Grafana cannot
    # name the job's bucket, so these two read the whole index), then its user within that
    # window: the index points of the window only (bench_store.py: half the cost of four
    # lookups over the whole index).
    this_job = f"\"jobid\" = '$jobid'{cluster}"
    for name, label, selected, where in (
        ("jobfirst", "Job's first second", _whole_second('min("first")'), this_job),
        ("joblast", "Job's last second", _whole_second('max("last")'), this_job),
        ("user", "User", 'last("user")', f"{this_job} AND {JOB_WINDOW}"),
    ):
        variables.append(
            core.Template(
                name=name,
                label=label,
                query=f'SELECT {selected} FROM "{JOB_INDEX}" WHERE {where}',
                dataSource=datasource(INFLUXDB),
                refresh=1,
                hide=2,
            )
        )
    return variables


def _join(*parts: str) -> str:
    return ", ".join(p for p in parts if p)
