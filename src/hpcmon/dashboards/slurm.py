"""Slurm's view of finished jobs (the epilog hook's ``slurm_job`` points, one per job, with or
without any I/O log): the job list's tables of finished and failed jobs, and the drill-down's
first panel. Job names are the user's text: selected and shown, never put in a query. The job
id is a field of slurm_job (issue 31: no tag that is new with every job), selected as a column."""

from __future__ import annotations

from typing import Any

from grafanalib import core

from hpcmon.report.slurm import SIGNALS, signal_name

from . import grafana as g
from .grafana import INFLUXDB, PanelSpec, Query
from .overview import job_link

SLURM_JOB = "slurm_job"
FAILED = '("exit_code" != 0 OR "exit_signal" != 0)'  # Slurm's FAILED, CANCELLED, TIMEOUT, ...
NEWEST = "ORDER BY time DESC LIMIT"
LISTED = 500  # rows of the job lists: the newest starts of the time range
# the columns, Slurm's times (epoch seconds) as Grafana's milliseconds
COLUMNS = (
    '"jobid", "job_name" AS "job name", "user", "account", "partition", "nodelist" AS "nodes", '
    '"num_nodes" AS "node count", "exit_code" AS "exit code", "exit_signal" AS "signal", '
    '"start" * 1000 AS "start", "end" * 1000 AS "end", "end" - "start" AS "elapsed"'
)
UNITS = {"start": "dateTimeAsIso", "end": "dateTimeAsIso", "elapsed": "s", "node count": "short"}
_ENDED = [{"color": "green", "value": None}, {"color": "red", "value": 1}]  # 0 green, else red


def _names(values: dict[int, str]) -> list[dict[str, Any]]:
    options = {str(v): {"text": text, "index": i} for i, (v, text) in enumerate(values.items())}
    return [{"type": "value", "options": options}]


def status_overrides() -> list[dict[str, Any]]:
    """Exit code and signal red when not 0; signals by name (9 (SIGKILL))."""
    red = (
        ("custom.cellOptions", {"type": "color-background"}),
        ("color", {"mode": "thresholds"}),
        ("thresholds", {"mode": "absolute", "steps": _ENDED}),
    )
    signals = _names({0: "none", **{n: signal_name(n) for n in SIGNALS}})
    return [
        g.field_override("exit code", *red, ("mappings", _names({0: "0 (success)"}))),
        g.field_override("signal", *red, ("mappings", signals)),
    ]


def slurm_table(title: str, where: str, description: str, rows: int = LISTED) -> core.Panel:
    """The newest ``rows`` slurm_job points that match ``where``, one row per job; the job id
    opens its drill-down over the list's time range."""
    spec = PanelSpec(
        INFLUXDB,
        title,
        "none",
        [Query(f'SELECT {COLUMNS} FROM "{SLURM_JOB}" WHERE {where} {NEWEST} {rows}')],
        description=description,
    )
    spec.links, spec.link_field = [job_link()], "jobid"
    organize = {"id": "organize", "options": {"excludeByName": {"Time": True}}}
    panel = g.table(spec, sort_by="start", transformations=[organize])
    overrides = g.field_config(panel)["overrides"]
    overrides += [g.field_override(name, ("unit", unit)) for name, unit in UNITS.items()]
    overrides += status_overrides()
    return panel


def count_stat(title: str, where: str, description: str) -> core.Panel:
    """Jobs in the time range; 0, not "No data", when none matched (no failed job)."""
    panel = g.stat(
        PanelSpec(
            INFLUXDB,
            title,
            "short",
            [Query(f'SELECT count("job_id") FROM "{SLURM_JOB}" WHERE {where}')],
            description=description,
        ),
        calc="sum",
    )
    g.field_config(panel)["defaults"]["noValue"] = "0"
    return panel
