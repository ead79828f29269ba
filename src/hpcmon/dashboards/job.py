"""Job drill-down: a finished job's post-job points (InfluxDB) next to its live Lustre rates and
node power (Prometheus) over the same window.

Summaries read all of a job's points whatever the time range (a job's Darshan points carry its
start time, which can lie before the window a link opens); timelines use the time range. Every
post-job query reads the job's ``jobid`` field within the job's window (``$jobfirst`` to
``$joblast``, from its job_index points: post_job/layout.py). The names that were tags before
issue 31 (``log``, ``trace``, ``file``, ``rank``, a VizTracer ``function``) are fields: tables
select them as columns, one row per point, where they used to group by them.
"""

from __future__ import annotations

from grafanalib import core

from hpcmon.common import metric_names as m

from . import grafana as g
from . import promql
from .config import Config
from .grafana import INFLUXDB, PROMETHEUS, PanelSpec, Query
from .history import add_application_row, application_variables
from .slurm import slurm_table
from .uids import JOB_UID, OVERVIEW_UID
from .variables import cluster_matcher, has_any, job_filter, job_variables

RATE = "$__rate_interval"


def _influx(title: str, unit: str, *queries: str, description: str = "") -> PanelSpec:
    return PanelSpec(INFLUXDB, title, unit, [Query(q) for q in queries], description=description)


def _table(spec: PanelSpec, units: dict[str, str]) -> core.Panel:
    panel = g.table(spec)
    overrides = [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "unit", "value": unit}],
        }
        for name, unit in units.items()
    ]
    g.field_config(panel)["overrides"] = overrides
    return panel


def _running_job(config: Config) -> core.Panel:
    """While the job runs (before the epilog writes its slurm_job point): its names as the
    Slurm controllers list it now (hpc_slurm_job_info; one row for a controller pair)."""
    this_job = ", ".join(x for x in (cluster_matcher(config), 'jobid="$jobid"') if x)
    labels = "jobid, job_name, user, account, partition, state"
    spec = PanelSpec(
        PROMETHEUS,
        "Slurm: the job while it runs",
        "none",
        [
            Query(
                f"topk by (jobid) (1, max by ({labels}) ({m.SLURM_JOB_INFO}{{{this_job}}}))",
                instant=True,
            )
        ],
        description="Job name, user, account, partition and state from squeue "
        "(--collector.slurm), while Slurm lists the job as running or completing.",
    )
    organize = {
        "id": "organize",
        "options": {
            "excludeByName": {"Time": True, "Value": True},
            "indexByName": {name: i for i, name in enumerate(labels.split(", "))},
            "renameByName": {"job_name": "job name"},
        },
    }
    return g.table(spec, transformations=[organize])


def build(config: Config) -> core.Dashboard:
    job = job_filter(config)
    layout = g.Layout()

    layout.row("Slurm")
    layout.add(
        slurm_table(
            "Slurm: the job",
            job,
            "Slurm's view of the job (its slurm_job point, whatever the time range): job name,"
            " user, account, partition, nodes, exit code and signal, start, end, elapsed.",
            rows=1,
        ),
        width=24,
        height=4,
    )
    layout.add(_running_job(config), width=24, height=4)

    layout.row("Darshan")
    layout.add(
        _table(
            _influx(
                "Darshan job summary",
                "short",
                'SELECT "log", "nprocs" AS "ranks", "runtime", '
                '"total_bytes_read" AS "bytes read", "total_bytes_written" AS "bytes written", '
                '"total_reads" AS "reads", "total_writes" AS "writes", "exe" AS "executable", '
                '"modules", "partial_modules" AS "partial modules" '
                f'FROM "darshan_job" WHERE {job}',
                description="One row per Darshan log of the job (`log`; signals spec v2.2).",
            ),
            {"runtime": "s", "bytes read": "bytes", "bytes written": "bytes"},
        ),
        width=24,
        height=6,
    )
    layout.add(
        _table(
            _influx(
                "Signals not available (NA reasons)",
                "short",
                'SELECT "module", "log", "na_reasons" AS "NA reasons" FROM "darshan_module" '
                f"WHERE {job} AND {has_any('na_reasons')}",
                description="Signals left out of the points, with the spec's reason.",
            ),
            {},
        ),
        width=24,
        height=5,
    )
    module_fields = (
        ("Bandwidth per module", "MiBs", "read_bw", "write_bw", "agg_perf_by_slowest split by"),
        ("IOPS per module", "iops", "read_iops", "write_iops", "operations over module time"),
        ("Mean request size per module", "bytes", "avg_read_size", "avg_write_size", "bytes"),
    )
    for title, unit, read, write, note in module_fields:
        layout.add(
            g.bargauge(
                _influx(
                    title,
                    unit,
                    f'SELECT "module", "log", "{read}" AS "read", "{write}" AS "write" '
                    f'FROM "darshan_module" WHERE {job} AND {has_any(read, write)}',
                    description=f"Darshan module signals ({note}), per module and log.",
                ),
                rows=True,
            ),
            width=8,
        )
    layout.add(
        g.timeseries(
            _influx(
                "I/O over time (Darshan heatmap bins)",
                "bytes",
                'SELECT sum("read_bytes") AS "read", sum("write_bytes") AS "write" '
                f'FROM "darshan_heatmap_bin" WHERE {job} AND $timeFilter '
                'GROUP BY time($__interval), "module" fill(none)',
                description="Bytes per heatmap bin, summed over ranks (the job's time range).",
            ),
            bars=True,
        ),
        width=24,
    )
    layout.add(
        _table(
            _influx(
                "Top files by bytes",
                "bytes",
                'SELECT top("bytes", 10) AS "bytes", "file", "module", "rank" FROM ('
                'SELECT "bytes_read" + "bytes_written" AS "bytes", "file", "rank" '
                f'FROM "darshan_record" WHERE {job} GROUP BY "module")',
                description="Darshan records by bytes read plus written (rank -1: shared).",
            ),
            {"bytes": "bytes"},
        )
    )
    layout.add(
        _table(
            _influx(
                "Top files by I/O time",
                "s",
                'SELECT top("io_time", 10) AS "I/O time", "file", "module", "rank" '
                f'FROM "darshan_record" WHERE {job}',
                description="Darshan records by time spent in reads, writes and metadata.",
            ),
            {"I/O time": "s"},
        )
    )

    layout.row("Recorder and VizTracer")
    layout.add(
        _table(
            _influx(
                "Recorder: top functions by time",
                "s",
                'SELECT top("total_time_seconds", "function", 10) AS "time", "count", "layer" '
                f'FROM "recorder_function" WHERE {job}',
                description="Traced I/O and MPI calls: total time over ranks and count.",
            ),
            {"time": "s", "count": "short"},
        ),
        width=8,
    )
    layout.add(
        _table(
            _influx(
                "Recorder: top files by accesses",
                "short",
                'SELECT top("accesses", 10) AS "accesses", "file", "ranks", "time_seconds" '
                f'FROM "recorder_file" WHERE {job}',
                description="Files by traced accesses, with ranks and time.",
            ),
            {"accesses": "short", "time_seconds": "s"},
        ),
        width=8,
    )
    layout.add(
        _table(
            _influx(
                "VizTracer: top functions by time",
                "s",
                'SELECT top("total_time_seconds", 10) AS "total", "function", '
                f'"self_time_seconds" AS "self", "calls" FROM "viztracer_function" WHERE {job}',
                description="Cleaned Python trace: inclusive and self time.",
            ),
            {"total": "s", "self": "s", "calls": "short"},
        ),
        width=8,
    )
    layout.add(
        _table(
            _influx(
                "VizTracer: trace summary",
                "short",
                'SELECT "trace", "events_in" AS "events in", "events_out" AS "events out", '
                '"reduction_ratio" AS "reduction", "time_error_ratio" AS "time error", '
                f'"total_duration_seconds" AS "duration" FROM "viztracer_summary" WHERE {job}',
                description="What the cleaning kept and the error it costs on total time.",
            ),
            {"reduction": "percentunit", "time error": "percentunit", "duration": "s"},
        ),
        width=24,
        height=5,
    )

    layout.row("GEOPM")
    layout.add(
        g.bargauge(
            _influx(
                "GEOPM energy per host (package + DRAM)",
                "joule",
                'SELECT last("package_energy_joules") + last("dram_energy_joules") AS "energy" '
                f'FROM "geopm_totals" WHERE {job} AND "scope" = \'application\' '
                'GROUP BY "host"',
                description="Application totals of the job's GEOPM report.",
            )
        ),
        width=8,
    )
    layout.add(
        g.piechart(
            _influx(
                "GEOPM energy by region",
                "joule",
                'SELECT sum("package_energy_joules") AS "energy" FROM "geopm_region" '
                f'WHERE {job} GROUP BY "region"',
                description="Package energy per region, summed over hosts.",
            )
        ),
        width=8,
    )
    layout.add(
        _table(
            _influx(
                "GEOPM power per host and region",
                "watt",
                'SELECT last("power_watts") AS "power", last("runtime_seconds") AS "runtime", '
                'last("frequency_hertz") AS "frequency" FROM "geopm_region" '
                f'WHERE {job} GROUP BY "host", "region"',
                description="Mean power, runtime and frequency of each region on each host.",
            ),
            {"power": "watt", "runtime": "s", "frequency": "hertz"},
        ),
        width=8,
    )

    add_application_row(layout, config)

    jobid = ", ".join(x for x in (cluster_matcher(config), 'jobid="$jobid"') if x)
    rates = promql.Rates(config)
    layout.row("Live: Lustre and power over the job's window (Prometheus)")
    layout.add(
        g.timeseries(
            PanelSpec(
                PROMETHEUS,
                "Lustre throughput per target",
                "Bps",
                [
                    Query(
                        f"sum by (target) ({rates.bytes(direction, jobid, RATE)})",
                        legend=f"{{{{target}}}} {direction}",
                    )
                    for direction in ("write", "read")
                ],
                description="The job's bytes per second on each OST/MDT (server side).",
            )
        )
    )
    layout.add(
        g.timeseries(
            PanelSpec(
                PROMETHEUS,
                "Lustre metadata operations per target",
                "ops",
                [
                    Query(
                        f"sum by (target, operation) ({rates.metadata_ops(jobid, RATE)})",
                        legend="{{target}} {{operation}}",
                    )
                ],
                description="The job's metadata operations per second on each MDT.",
            ),
            stacked=True,
        )
    )
    node_job = ", ".join(x for x in (cluster_matcher(config), 'jobid="$jobid"') if x)
    layout.add(
        g.timeseries(
            PanelSpec(
                PROMETHEUS,
                "Power of the job's nodes",
                "watt",
                [
                    Query(
                        f"{promql.node_power(RATE)}\nand on (instance) "
                        f"{m.NODE_JOB_INFO}{{{node_job}}}",
                        legend="{{instance}}",
                    )
                ],
                description="Whole-node power (CPU, DRAM, GPU) while the job ran there.",
            )
        )
    )
    layout.add(
        g.stat(
            PanelSpec(
                PROMETHEUS,
                "Job energy (shared nodes split equally)",
                "kwatth",
                [Query(promql.job_energy_kwh(RATE, node_job), instant=True)],
                description=(
                    "kWh over the time range: each node's power divided by the number of jobs "
                    "on it, integrated at the panel's interval."
                ),
            )
        )
    )

    return core.Dashboard(
        title="hpcmon: job drill-down",
        uid=JOB_UID,
        description="One job: Darshan, Recorder, VizTracer and GEOPM points, Lustre and power.",
        tags=["hpcmon", "job"],
        timezone="browser",
        schemaVersion=g.SCHEMA_VERSION,
        time=core.Time("now-24h", "now"),
        templating=core.Templating(list=job_variables(config) + application_variables(config)),
        panels=layout.panels,
        links=[g.dashboard_link("Operations overview", OVERVIEW_UID, "var-jobid=${jobid}")],
    )
