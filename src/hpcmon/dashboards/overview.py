"""Operations overview: the file system and power by job, and the health of the collection."""

from __future__ import annotations

from collections.abc import Callable

from grafanalib import core

from hpcmon.common import metric_names as m

from . import grafana as g
from . import promql, rules
from .config import Config
from .grafana import PROMETHEUS, PanelSpec, Query
from .promql import selector
from .uids import JOB_UID, JOBS_UID, OVERVIEW_UID
from .variables import (
    SLURM_FILTER,
    cluster_matcher,
    jobstats_matchers,
    overview_variables,
    slurm_matchers,
)

RATE = "$__rate_interval"
JOB_LINK_TITLE = "Job drill-down"


def job_link(value: str = "${__value.raw}") -> dict[str, object]:
    """A data link to the job dashboard with the job and the current time range."""
    return {
        "title": JOB_LINK_TITLE,
        "url": f"/d/{JOB_UID}/{JOB_UID}?var-jobid={value}&${{__url_time_range}}",
        "targetBlank": False,
    }


def _spec(title: str, unit: str, *queries: Query, description: str = "") -> PanelSpec:
    return PanelSpec(PROMETHEUS, title, unit, list(queries), description=description)


# Columns of a top-jobs table: the job, then Slurm's names of it (empty for a job Slurm does
# not list), then the jobid-pattern labels and the value.
SLURM_COLUMNS = {"jobid": 0, "job_name": 1, "user": 2, "account": 3}


def _named_jobs(config: Config, expr_of: Callable[[str], str], on: str = "") -> str:
    """The per-job `expr_of(matchers)` with user, account and job name from Slurm for the jobs
    of the chosen accounts and users; under All, also the jobs Slurm does not list."""
    return promql.named_by_slurm(
        expr_of(""),
        on or config.slurm_jobid_label,
        config.cluster_label,
        matchers=slurm_matchers(config),
        unknown=expr_of(SLURM_FILTER),
    )


def _top_jobs_table(title: str, unit: str, expr: str, config: Config, description: str):
    spec = _spec(title, unit, Query(f"topk({config.top_jobs}, {expr})", instant=True))
    spec.description = description
    spec.links = [job_link()]
    spec.link_field = "jobid"
    value = title.split(" by ")[-1]
    organize = {
        "id": "organize",
        "options": {
            "excludeByName": {"Time": True},
            "indexByName": SLURM_COLUMNS,
            "renameByName": {"Value": value, "job_name": "job name"},
        },
    }
    return g.table(spec, sort_by=value, transformations=[organize])


def build(config: Config) -> core.Dashboard:
    rates = promql.Rates(config)
    sel = jobstats_matchers(config)
    cluster = cluster_matcher(config)
    job_by = "by (" + ", ".join(["jobid", *config.jobid_labels]) + ")"
    layout = g.Layout()

    layout.row("File system")
    for direction in ("write", "read"):
        layout.add(
            g.timeseries(
                _spec(
                    f"{direction.capitalize()} throughput per target",
                    "Bps",
                    Query(
                        f"sum by (component, target) ({rates.bytes(direction, sel, RATE)})",
                        legend="{{target}}",
                    ),
                    description=f"Bytes {direction} per second on each OST/MDT, stacked.",
                ),
                stacked=True,
            )
        )
    layout.add(
        g.timeseries(
            _spec(
                "MDT operations by operation and target",
                "ops",
                Query(
                    f"sum by (target, operation) ({rates.metadata_ops(sel, RATE)})",
                    legend="{{target}} {{operation}}",
                ),
                description="Metadata operations per second (every operation but read/write).",
            ),
            stacked=True,
        ),
        width=12,
    )
    layout.add(
        g.timeseries(
            _spec(
                "Mean service time per operation",
                "s",
                Query(
                    f"sum by (operation) (rate({m.JOB_LATENCY}{{{sel}}}[{RATE}]))\n"
                    f"/ sum by (operation) (rate({m.JOB_OPERATIONS}{{{sel}}}[{RATE}]) > 0)",
                    legend="{{operation}}",
                ),
                description="Lustre 2.14+ `usecs` entries: total service time over operations.",
            )
        ),
        width=12,
    )

    layout.row("Top jobs")
    layout.add(
        _top_jobs_table(
            "Top jobs by write rate",
            "Bps",
            _named_jobs(
                config, lambda more: f"sum {job_by} ({rates.bytes('write', _and(sel, more), RATE)})"
            ),
            config,
            "Bytes written per second, all targets. Click a job for its drill-down.",
        ),
        width=8,
    )
    layout.add(
        _top_jobs_table(
            "Top jobs by read rate",
            "Bps",
            _named_jobs(
                config, lambda more: f"sum {job_by} ({rates.bytes('read', _and(sel, more), RATE)})"
            ),
            config,
            "Bytes read per second, all targets. Click a job for its drill-down.",
        ),
        width=8,
    )
    layout.add(
        _top_jobs_table(
            "Top jobs by metadata operations",
            "ops",
            _named_jobs(
                config, lambda more: f"sum {job_by} ({rates.metadata_ops(_and(sel, more), RATE)})"
            ),
            config,
            "Metadata operations per second, all MDTs. Click a job for its drill-down.",
        ),
        width=8,
    )
    for direction, samples in (("write", m.JOB_WRITE_SAMPLES), ("read", m.JOB_READ_SAMPLES)):
        layout.add(
            g.timeseries(
                _spec(
                    f"Mean {direction} size per job (top {config.top_jobs} by {direction} rate)",
                    "bytes",
                    Query(
                        f"(sum by (jobid) ({rates.bytes(direction, sel, RATE)})\n"
                        f" / (sum by (jobid) (rate({samples}{{{sel}}}[{RATE}])) > 0))\n"
                        f"and on (jobid) topk({config.top_jobs}, "
                        f"sum by (jobid) ({rates.bytes(direction, sel, RATE)}))",
                        legend="{{jobid}}",
                    ),
                    description="Bytes per request: small sizes on busy jobs hurt the OSTs.",
                )
            )
        )
    for label in config.jobid_labels:
        layout.add(
            g.timeseries(
                _spec(
                    f"Write throughput by {label}",
                    "Bps",
                    Query(
                        f"sum by ({label}) ({rates.bytes('write', sel, RATE)})",
                        legend=f"{{{{{label}}}}}",
                    ),
                    description=f"From the `{label}` group of --jobstats.jobid-pattern.",
                ),
                stacked=True,
            )
        )
        layout.add(
            g.piechart(
                _spec(
                    f"Bytes moved by {label}",
                    "bytes",
                    Query(
                        f"sum by ({label}) (increase({m.JOB_WRITE_BYTES}{{{sel}}}[$__range]))"
                        f"\n+ sum by ({label}) (increase({m.JOB_READ_BYTES}{{{sel}}}[$__range]))",
                        legend=f"{{{{{label}}}}}",
                        instant=True,
                    ),
                    description="Read plus written over the dashboard's time range.",
                )
            )
        )

    node = ", ".join(x for x in (cluster, 'instance=~"$node"') if x)
    layout.row("Power")
    layout.add(
        g.timeseries(
            _spec(
                "Power per node",
                "watt",
                Query(promql.node_power(RATE, node), legend="{{instance}}"),
                description="CPU, DRAM and GPU energy counters (GEOPM or RAPL) as watts.",
            )
        )
    )
    job_filter = 'jobid=~"$jobid"'
    layout.add(
        g.timeseries(
            _spec(
                "Power per job",
                "watt",
                Query(promql.job_power(RATE, job_filter, node), legend="{{jobid}}"),
                description=(
                    "A node's power split equally between the jobs running on it "
                    "(hpc_node_job_info)."
                ),
            ),
            stacked=True,
        )
    )
    layout.add(
        _energy_table(config, job_filter, node),
        width=12,
    )
    layout.add(
        g.bargauge(
            _spec(
                "Node energy over the time range",
                "kwatth",
                Query(
                    promql.node_energy("increase", "$__range", node) + " / 3.6e6",
                    legend="{{instance}}",
                    instant=True,
                ),
                description="Energy counters' increase, kWh.",
            )
        ),
        width=12,
    )

    for owner in ("account", "user"):
        _owner_row(layout, config, owner)

    layout.row("Health")
    health = ", ".join(x for x in (cluster, 'instance=~"$instance"') if x)
    layout.add(
        g.state_timeline(
            _spec(
                "Jobstats targets up",
                "none",
                Query(
                    f"min by (component, target) ({m.JOBSTATS_UP}{{{health}}})",
                    legend="{{target}}",
                ),
                description="0: the target could not be read (lctl failed, timed out, or cut).",
            ),
            {"1": "up", "0": "down"},
        ),
        width=12,
    )
    layout.add(
        g.state_timeline(
            _spec(
                "Collectors",
                "none",
                Query(
                    f"min by (instance, collector) ({m.COLLECTOR_SUCCESS}{{{cluster}}})",
                    legend="{{instance}} {{collector}}",
                ),
                description="hpcmon_exporter_collector_success per exporter and collector.",
            ),
            {"1": "ok", "0": "failing"},
        ),
        width=12,
    )
    stats = (
        (
            "Parse errors",
            "short",
            f"sum(increase({m.JOBSTATS_PARSE_ERRORS}{{{health}}}[$__range])) or vector(0)",
            "Malformed jobstats records skipped over the time range.",
        ),
        (
            "Dropped series",
            "short",
            f"sum(increase({m.JOBSTATS_DROPPED_SERIES}{{{health}}}[$__range])) or vector(0)",
            "Series cut by --jobstats.max-jobs or --jobstats.operations.",
        ),
        (
            "Slowest jobstats sample",
            "s",
            f"max({m.JOBSTATS_SCRAPE_DURATION}{{{health}}})",
            "Read, parse, rates and exposition of the last sample, slowest exporter.",
        ),
        (
            "Slowest scrape",
            "s",
            f'max(scrape_duration_seconds{{job="{config.jobstats_scrape_job}"}})',
            "Prometheus' own scrape time of the jobstats exporters.",
        ),
        (
            "Nodes without power source",
            "short",
            f"count(max by (instance) ({m.GEOPM_UP}{{{cluster}}}) == 0) or vector(0)",
            "Nodes where neither GEOPM nor powercap works (geopm_up).",
        ),
    )
    for title, unit, expr, description in stats:
        layout.add(
            g.stat(_spec(title, unit, Query(expr, instant=True), description=description)),
            width=4,
            height=4,
        )
    alert_names = "|".join(rules.ALERT_NAMES)
    layout.add(
        g.stat(
            _spec(
                "Firing hpcmon alerts",
                "short",
                Query(
                    f'count(ALERTS{{alertstate="firing", alertname=~"{alert_names}"}})'
                    " or vector(0)",
                    instant=True,
                ),
                description="Alerts of hpcmon-alerts.yaml firing now.",
            )
        ),
        width=4,
        height=4,
    )
    # The post-job spool of each compute node (--collector.postjob): what its epilog hook
    # could not deliver yet (alert HpcmonPostJobBacklog).
    for title, unit, family, description in (
        (
            "Post-job backlog: oldest undelivered line",
            "s",
            m.POSTJOB_SPOOL_OLDEST_AGE,
            "Per node, how long the oldest line of its post-job spool has waited (0: none).",
        ),
        (
            "Post-job backlog: lines waiting",
            "short",
            m.POSTJOB_SPOOL_LINES,
            "Per node, lines in its post-job spool not yet accepted by InfluxDB.",
        ),
    ):
        aggregate = "max" if unit == "s" else "sum"
        query = Query(
            f"{aggregate} by (instance) ({family}{{{health}}})", legend="{{instance}}", instant=True
        )
        layout.add(g.bargauge(_spec(title, unit, query, description=description)), width=12)
    firing = _spec(
        "Firing hpcmon alerts",
        "none",
        Query(f'ALERTS{{alertstate="firing", alertname=~"{alert_names}"}}', instant=True),
        description="Job alerts link to the job's drill-down.",
    )
    firing.links = [job_link("${__data.fields.jobid}")]
    firing.link_field = "jobid"
    layout.add(
        g.table(
            firing,
            transformations=[
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
                }
            ],
        ),
        width=24,
    )

    return core.Dashboard(
        title="hpcmon: file system and power by job",
        uid=OVERVIEW_UID,
        description="Lustre jobstats and GEOPM/RAPL power by job (hpcmon-exporter).",
        tags=["hpcmon", "lustre", "power"],
        timezone="browser",
        refresh="30s",
        schemaVersion=g.SCHEMA_VERSION,
        time=core.Time("now-6h", "now"),
        templating=core.Templating(list=overview_variables(config)),
        panels=layout.panels,
        links=[
            g.dashboard_link("Job drill-down", JOB_UID, "var-jobid=${jobid}"),
            g.dashboard_link("Finished jobs by I/O score", JOBS_UID, "var-jobid=${jobid}"),
        ],
    )


def _owner_row(layout: g.Layout, config: Config, owner: str) -> None:
    """Bytes/s, metadata operations/s and power of the jobs Slurm lists, summed per account
    or per user (jobs Slurm does not list are in no sum): the recorded 5-minute series, cheap
    at any number of jobs."""
    chosen = selector(cluster_matcher(config), f'{owner}=~"${owner}"')
    bytes_, metadata = {
        "account": (rules.ACCOUNT_BYTES, rules.ACCOUNT_METADATA_OPS),
        "user": (rules.USER_BYTES, rules.USER_METADATA_OPS),
    }[owner]
    job_power = rules.JOB_POWER + selector(cluster_matcher(config))
    power = promql.with_slurm_job(job_power, "jobid", slurm_matchers(config), config.cluster_label)
    layout.row(f"By {owner} (Slurm's running jobs, 5-minute averages)")
    for title, unit, expr, legend, description in (
        (
            "Lustre throughput",
            "Bps",
            f"sum by ({owner}, direction) ({bytes_}{chosen})",
            f"{{{{{owner}}}}} {{{{direction}}}}",
            f"Bytes read and written per second ({bytes_})",
        ),
        (
            "Metadata operations",
            "ops",
            f"sum by ({owner}) ({metadata}{chosen})",
            f"{{{{{owner}}}}}",
            f"Metadata operations per second, all MDTs ({metadata})",
        ),
        (
            "Power",
            "watt",
            f"sum by ({owner}) (\n{power}\n)",
            f"{{{{{owner}}}}}",
            f"Power, shared nodes split equally ({rules.JOB_POWER} joined with Slurm's jobs)",
        ),
    ):
        layout.add(
            g.timeseries(
                _spec(
                    f"{title} by {owner}",
                    unit,
                    Query(expr, legend=legend),
                    description=f"{description}, of the jobs of each {owner}.",
                ),
                stacked=True,
            ),
            width=8,
        )


def _and(*matchers: str) -> str:
    return ", ".join(x for x in matchers if x)


def _energy_table(config: Config, job_filter: str, node: str):
    energy_of = lambda more: promql.job_energy_kwh(RATE, _and(job_filter, more), node)  # noqa: E731
    energy = _spec(
        "Energy per job over the time range",
        "kwatth",
        Query(
            f"topk({config.top_jobs}, {_named_jobs(config, energy_of, on='jobid')})",
            instant=True,
        ),
        description=(
            "kWh: each node's power split equally between the jobs on it, integrated over the time "
            "range at the panel's interval."
        ),
    )
    energy.links = [job_link()]
    energy.link_field = "jobid"
    return g.table(
        energy,
        sort_by="kWh",
        transformations=[
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "indexByName": SLURM_COLUMNS,
                    "renameByName": {"Value": "kWh", "job_name": "job name"},
                },
            }
        ],
    )
