"""The application's runs (the hook's ``app_run`` points, one per job): a row of the job
drill-down with the earlier runs of the job's application by its user, and the long-term
dashboard's "applications whose last run regressed"."""

from __future__ import annotations

from grafanalib import core

from . import grafana as g
from .config import Config
from .grafana import INFLUXDB, PanelSpec, Query
from .grafana import datasource as datasource_of
from .overview import JOB_LINK_TITLE
from .uids import JOB_UID

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
    """app and user of the chosen job, from its app_run point (hidden: they follow $jobid)."""
    return [
        core.Template(
            name=name,
            label=label,
            query=f'SHOW TAG VALUES FROM "{APP_RUN}" WITH KEY = "{name}" '
            f"WHERE \"jobid\" = '$jobid'{_cluster(config)}",
            dataSource=datasource_of(INFLUXDB),
            refresh=1,
            hide=2,
        )
        for name, label in (("app", "Application"), ("user", "User"))
    ]


def _run_link() -> dict[str, object]:
    """To a run's drill-down over its own time (start to start + runtime)."""
    return {
        "title": JOB_LINK_TITLE,
        "url": f"/d/{JOB_UID}/{JOB_UID}?var-jobid=${{__value.raw}}"
        "&from=${__value.time}&to=${__data.fields.end_ms}",
        "targetBlank": False,
    }


def add_application_row(layout: g.Layout, config: Config) -> None:
    runs = app_filter(config)
    layout.row("Application: the runs of $app by $user")
    spec = PanelSpec(
        INFLUXDB,
        "Runs of this application (newest first)",
        "short",
        [
            Query(
                'SELECT "jobid", "runtime", "bytes_read", "bytes_written", "reads", "writes", '
                '"metadata_time_share", "energy_joules", '
                '("start_time" + "runtime") * 1000 AS "end_ms" '
                f'FROM "{APP_RUN}" WHERE {runs} ORDER BY time DESC LIMIT 50'
            )
        ],
        description="One row per job of the application by the same user (app_run points: "
        "Darshan totals over the job's logs, metadata share of POSIX I/O time, GEOPM energy). "
        "The job id opens that run's drill-down.",
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
    overrides = panel.extraJson["fieldConfig"]["overrides"]
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
    for title, unit, fields in (
        ("Bytes per run", "bytes", (("bytes_read", "read"), ("bytes_written", "written"))),
        ("Runtime per run", "s", (("runtime", "runtime"),)),
        ("Energy per run (GEOPM)", "joule", (("energy_joules", "energy"),)),
    ):
        selected = ", ".join(f'last("{name}") AS "{alias}"' for name, alias in fields)
        layout.add(
            g.bargauge(
                PanelSpec(
                    INFLUXDB,
                    title,
                    unit,
                    [Query(f'SELECT {selected} FROM "{APP_RUN}" WHERE {runs} GROUP BY "jobid"')],
                    description="Each run of the application by the same user, by job id.",
                )
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
