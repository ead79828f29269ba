"""The application's runs (the hook's ``app_run`` points, one per job): a row of the job
drill-down with the earlier runs of the job's application by its user, and the long-term
dashboard's "applications whose last run regressed"."""

from __future__ import annotations

from grafanalib import core

from . import grafana as g
from .config import Config
from .grafana import INFLUXDB, PanelSpec, Query
from .grafana import datasource as datasource_of
from .jobs import JOB_ROWS
from .jobs import MEASUREMENT as DIAGNOSIS
from .overview import JOB_LINK_TITLE
from .uids import JOB_UID
from .variables import JOB_INDEX, JOB_WINDOW, has_any, job_filter

APP_RUN = "app_run"
RATIO = 2.0  # the report's regression rule: >= 2x or <= 0.5x
MIN_RUNS = 3  # the last run and at least 2 before it
# figure field -> column title
RATIOS = {
    "runtime": "runtime",
    "bytes_read": "bytes read",
    "bytes_written": "bytes written",
    "metadata_time_share": "metadata share",
    "energy_joules": "energy",
}


def _cluster(config: Config) -> str:
    return f" AND \"cluster\" = '{config.cluster}'" if config.cluster else ""


def app_filter(config: Config) -> str:
    return f"\"app\" = '$app' AND \"user\" = '$user'{_cluster(config)}"


def application_variables(config: Config) -> list[core.Template]:
    """app of the chosen job, from its job_index points within its window (a field there,
    as the job id is), and its start (``jobstart``, epoch seconds, from its app_run point
    within the job's window) that bounds the runs shown (hidden: they follow $jobid, not the
    time range, which a link from a list of jobs sets to that list's range). Follow
    job_variables, whose ``user``, ``jobfirst`` and ``joblast`` they read."""
    indexed = f'FROM "{JOB_INDEX}" WHERE "jobid" = \'$jobid\'{_cluster(config)} AND {JOB_WINDOW}'
    app = ("app", "Application", f'SELECT last("app") {indexed}')
    start = (
        "jobstart",
        "Job start",
        f'SELECT last("start_time") FROM "{APP_RUN}" WHERE {job_filter(config)}',
    )
    return [
        core.Template(
            name=name,
            label=label,
            query=query,
            dataSource=datasource_of(INFLUXDB),
            refresh=1,
            hide=2,
        )
        for name, label, query in [app, start]
    ]


def runs_filter(config: Config) -> str:
    """The app's runs by the user that started up to the job (the job included): app_run's
    ``start_time`` field is the exact float the ``jobstart`` variable holds."""
    return f'{app_filter(config)} AND "start_time" <= $jobstart'


def scores_filter(config: Config) -> str:
    """The same runs' job_diagnosis score points: stamped in the second the job's first log
    started (the second of app_run's start, a whole second in Darshan's logs), at the job's
    nanosecond slot of that second (post_job/layout.py), so a time bound before the next
    second (InfluxQL folds the product to ns)."""
    return f"{JOB_ROWS} AND {app_filter(config)} AND time < $jobstart * 1000000000 + 1000000000"


def _run_link() -> dict[str, object]:
    """To a run's drill-down over its own time (start to start + runtime)."""
    return {
        "title": JOB_LINK_TITLE,
        "url": f"/d/{JOB_UID}/{JOB_UID}?var-jobid=${{__value.raw}}"
        "&from=${__value.time}&to=${__data.fields.end_ms}",
        "targetBlank": False,
    }


# title, unit, measurement, figure fields (field, alias) of the per-run charts
_CHARTS = (
    ("Bytes per run", "bytes", APP_RUN, (("bytes_read", "read"), ("bytes_written", "written"))),
    ("Operations per run", "short", APP_RUN, (("reads", "reads"), ("writes", "writes"))),
    (
        "Metadata share of I/O time per run",
        "percentunit",
        APP_RUN,
        (("metadata_time_share", "metadata"),),
    ),
    ("I/O score per run", "none", DIAGNOSIS, (("score", "I/O score"),)),
    ("Runtime per run", "s", APP_RUN, (("runtime", "runtime"),)),
    ("Energy per run (GEOPM)", "joule", APP_RUN, (("energy_joules", "energy"),)),
)
TABLE_RUNS = 50
CHART_RUNS = 20
# InfluxQL cannot reverse a LIMITed subquery: the newest runs come newest first, Grafana sorts
_OLDEST_FIRST = {"id": "sortBy", "options": {"sort": [{"field": "Time", "desc": False}]}}


def add_application_row(layout: g.Layout, config: Config) -> None:
    runs = runs_filter(config)
    layout.row("Application: the runs of $app by $user up to this job")
    spec = PanelSpec(
        INFLUXDB,
        "Runs of this application up to this job (newest first)",
        "short",
        [
            Query(
                'SELECT "jobid", "runtime", "bytes_read", "bytes_written", "reads", "writes", '
                '"metadata_time_share", "energy_joules", '
                '("start_time" + "runtime") * 1000 AS "end_ms" '
                f'FROM "{APP_RUN}" WHERE {runs} ORDER BY time DESC LIMIT {TABLE_RUNS}'
            )
        ],
        description=f"The {TABLE_RUNS} newest jobs of the application by the same user that "
        "started up to this one, this one first (app_run points: Darshan totals over the job's "
        "logs, metadata share of POSIX I/O time, GEOPM energy). The job id opens that run's "
        "drill-down.",
    )
    spec.links, spec.link_field = [_run_link()], "jobid"
    panel = g.table(spec)
    units = {
        "runtime": "s",
        "bytes_read": "bytes",
        "bytes_written": "bytes",
        "metadata_time_share": "percentunit",
        "energy_joules": "joule",
    }
    overrides = g.field_config(panel)["overrides"]
    overrides += [
        {"matcher": {"id": "byName", "options": name}, "properties": [{"id": "unit", "value": u}]}
        for name, u in units.items()
    ]
    overrides.append(
        {
            "matcher": {"id": "byName", "options": "end_ms"},
            "properties": [{"id": "custom.hidden", "value": True}],
        }
    )
    layout.add(panel, width=24, height=8)
    scores = scores_filter(config)
    for title, unit, measurement, fields in _CHARTS:
        selected = ", ".join(f'"{name}" AS "{alias}"' for name, alias in fields)
        where = runs if measurement == APP_RUN else scores
        where += f" AND {has_any(*(name for name, _ in fields))}"  # runs with the figure
        query = (
            f'SELECT "jobid", {selected} FROM "{measurement}" WHERE {where} '
            f"ORDER BY time DESC LIMIT {CHART_RUNS}"
        )
        layout.add(
            g.bargauge(
                PanelSpec(
                    INFLUXDB,
                    title,
                    unit,
                    [Query(query)],
                    description=f"The {CHART_RUNS} newest runs of the application by the same "
                    "user up to this job, oldest first (this job last), one bar per run and "
                    "figure, named by job id.",
                ),
                rows=True,
                transformations=[_OLDEST_FIRST],
            ),
            width=8,
        )


def regressed_applications(config: Config) -> core.Panel:
    """Per application and user over the time range: the last run against the median of the
    runs in the range (the last included, so it flags a subset of what hpcmon-report's rule,
    the median of the earlier runs only, flags)."""
    ratios = ", ".join(
        f'last("{name}") / median("{name}") AS "{title}"' for name, title in RATIOS.items()
    )
    flagged = " OR ".join(
        f'"{title}" >= {RATIO} OR "{title}" <= {1 / RATIO}' for title in RATIOS.values()
    )
    cluster = f" AND \"cluster\" = '{config.cluster}'" if config.cluster else ""
    query = (
        f'SELECT * FROM (SELECT {ratios}, count("start_time") AS "runs", '
        f'last("job_id") AS "last job" FROM "{APP_RUN}" WHERE $timeFilter{cluster} '
        f'GROUP BY "app", "user") WHERE "runs" >= {MIN_RUNS} AND ({flagged})'
    )
    spec = PanelSpec(
        INFLUXDB,
        "Applications whose last run regressed",
        "short",
        [Query(query)],
        description=(
            f"Per application and user: the last run's figure / the median over the runs in "
            f"the time range, shown when one is >= {RATIO:g}x or <= {1 / RATIO:g}x with at "
            f"least {MIN_RUNS} runs. hpcmon-report compares with the earlier runs only."
        ),
    )
    spec.links, spec.link_field = (
        [
            {
                "title": JOB_LINK_TITLE,
                "url": f"/d/{JOB_UID}/{JOB_UID}?var-jobid=${{__value.raw}}&${{__url_time_range}}",
                "targetBlank": False,
            }
        ],
        "last job",
    )
    organize = {"id": "organize", "options": {"excludeByName": {"Time": True}}}
    return g.table(spec, transformations=[organize])
