"""Finished jobs: every job Slurm ended (the epilog hook's ``slurm_job`` points), the failed
ones, and the post-job hook's ``job_diagnosis`` points (InfluxDB) over the time range by I/O
score, worst first; each job links to its drill-down (as LLview's job list does).

Both points carry the job's start time, so the time range selects jobs by when they started.
"""

from __future__ import annotations

from grafanalib import core

from . import grafana as g
from .config import Config
from .grafana import INFLUXDB, PanelSpec, Query
from .overview import job_link
from .slurm import FAILED, count_stat, slurm_table
from .slurm import LISTED as LISTED_SLURM
from .uids import JOB_UID, JOBS_UID, OVERVIEW_UID
from .variables import datasource_variable

MEASUREMENT = "job_diagnosis"
JOB_ROW = "job"  # the ``insight`` tag of a job's score point (post_job/darshan/diagnosis.py)
JOB_ROWS = f"\"insight\" = '{JOB_ROW}'"
INSIGHT_ROWS = f"\"insight\" != '{JOB_ROW}'"
HIGH = "\"level\" = 'high'"
LISTED = 200  # jobs in the table: the worst of the time range
# score colours: no insight (0), some (a high insight scores 25 to 50), a full high or several
SCORE_STEPS = [
    {"color": "green", "value": None},
    {"color": "orange", "value": 10},
    {"color": "red", "value": 50},
]
# (column, unit) of the job table, in order; the first is the score top() selects by
COLUMNS = (
    ("score", "none"),
    ("level", "none"),
    ("top_insights", "none"),
    ("high", "short"),
    ("warn", "short"),
    ("user", "none"),
    ("exe", "none"),
    ("nprocs", "short"),
    ("runtime", "s"),
    ("bytes_read", "bytes"),
    ("bytes_written", "bytes"),
)


def _where(config: Config, *conditions: str) -> str:
    cluster = [f"\"cluster\" = '{config.cluster}'"] if config.cluster else []
    return " AND ".join([*conditions, *cluster, "$timeFilter"])


def _spec(title: str, unit: str, query: str, description: str, legend: str = "") -> PanelSpec:
    return PanelSpec(INFLUXDB, title, unit, [Query(query, legend)], description=description)


def job_table(config: Config) -> core.Panel:
    # one job row per job (a rerun of the hook stamps it the same): the worst LISTED rows,
    # with the job id field (issue 31: not a tag, so not top()'s tag argument)
    fields = ", ".join(f'"{name}"' for name, _ in COLUMNS[1:])
    spec = _spec(
        "Finished jobs by I/O score",
        "none",
        f'SELECT top("score", {LISTED}) AS "score", "jobid", {fields} FROM "{MEASUREMENT}" '
        f"WHERE {_where(config, JOB_ROWS)}",
        f"The {LISTED} worst jobs that started in the time range, by the hook's I/O score"
        ' (0 = no high or warn insight; one full high insight 50; docs, "I/O score") with'
        " their top insights. A job id opens its drill-down.",
    )
    spec.links = [job_link()]
    spec.link_field = "jobid"
    organize = {
        "id": "organize",
        "options": {"renameByName": {"Time": "start", "top_insights": "top insights"}},
    }
    panel = g.table(spec, sort_by="score", transformations=[organize])
    overrides = g.field_config(panel)["overrides"]
    overrides += [g.field_override(name, ("unit", u)) for name, u in COLUMNS if u != "none"]
    overrides.append(
        g.field_override(
            "score",
            ("custom.cellOptions", {"type": "color-background"}),
            ("color", {"mode": "thresholds"}),
            ("thresholds", {"mode": "absolute", "steps": SCORE_STEPS}),
        )
    )
    return panel


def build(config: Config) -> core.Dashboard:
    layout = g.Layout()
    layout.add(
        count_stat(
            "Finished jobs (Slurm)",
            _where(config),
            "Jobs that Slurm ended and that started in the time range (one slurm_job point"
            " each, written by the epilog hook with or without any I/O log).",
        ),
        width=6,
    )
    layout.add(
        count_stat(
            "Failed jobs (Slurm)",
            _where(config, FAILED),
            "Finished jobs with a non-zero exit code or ended by a signal (failed, cancelled,"
            " timed out, out of memory).",
        ),
        width=6,
    )
    layout.add(
        g.stat(
            _spec(
                "Finished jobs with Darshan data",
                "short",
                f'SELECT count("score") FROM "{MEASUREMENT}" WHERE {_where(config, JOB_ROWS)}',
                "Jobs the post-job hook diagnosed (one I/O score each) in the time range.",
            ),
            calc="sum",
        ),
        width=6,
    )
    layout.add(
        g.stat(
            _spec(
                "Jobs with a high insight",
                "short",
                f'SELECT count("score") FROM "{MEASUREMENT}" '
                f"WHERE {_where(config, JOB_ROWS, HIGH)}",
                "Jobs that raised at least one high insight (their `level` is high).",
            ),
            calc="sum",
        ),
        width=6,
    )
    layout.add(
        g.bargauge(
            _spec(
                "Jobs per insight",
                "short",
                f'SELECT count("score") AS "jobs" FROM "{MEASUREMENT}" '
                f'WHERE {_where(config, INSIGHT_ROWS)} GROUP BY "insight"',
                "How many jobs of the time range raised each high or warn insight (the"
                ' report\'s rule ids, docs: Reference, "Diagnosis rules").',
                legend="$tag_insight",
            )
        ),
        width=12,
    )
    layout.add(
        slurm_table(
            "Failed jobs",
            _where(config, FAILED),
            "Jobs of the time range that exited non-zero or were killed by a signal, newest"
            " first. A job id opens its drill-down.",
        ),
        width=24,
        height=8,
    )
    layout.add(
        slurm_table(
            "Finished jobs",
            _where(config),
            f"The {LISTED_SLURM} newest jobs that started in the time range, as Slurm saw them:"
            " partition, nodes, exit code and signal, job name (the user's text), user,"
            " account, start, end, elapsed. A job id opens its drill-down.",
        ),
        width=24,
        height=12,
    )
    layout.add(job_table(config), width=24, height=16)
    return core.Dashboard(
        title="hpcmon: finished jobs",
        uid=JOBS_UID,
        description="Every job Slurm ended (slurm_job), the failed ones, and the post-job"
        " hook's diagnosis of every finished job (job_diagnosis).",
        tags=["hpcmon", "job", "diagnosis", "slurm"],
        timezone="browser",
        schemaVersion=g.SCHEMA_VERSION,
        time=core.Time("now-7d", "now"),
        templating=core.Templating(
            list=[datasource_variable(INFLUXDB, "InfluxDB", config.influxdb_datasource_uid)]
        ),
        panels=layout.panels,
        links=[
            g.dashboard_link("Job drill-down", JOB_UID, "var-jobid="),
            g.dashboard_link("Operations overview", OVERVIEW_UID, "var-jobid=All"),
        ],
    )
