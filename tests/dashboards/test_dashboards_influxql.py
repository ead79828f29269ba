"""Every InfluxQL of the job drill-down returns series on a real InfluxDB 1.6.7 after the real
post-job hook wrote a job's bundled Darshan, Recorder, VizTracer and GEOPM data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.demo import POST_JOB_INPUTS
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = "1728032"
DATABASE = "hpcmon_dashboards"
USER = "demo"
INPUTS = POST_JOB_INPUTS  # the demo's finished job: two Darshan logs, Recorder, VizTracer, GEOPM


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    command = [
        sys.executable, "-m", "hpcmon.post_job", "--job-id", JOB, "--cluster", "demo",
        "--user", USER, *INPUTS,
        "--influx.v1-url", influxdb1.url, "--influx.database", DATABASE,
        "--spool-dir", str(spool),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return influxdb1


def _time_filter(influx) -> str:
    """The job's whole span, as Grafana's $timeFilter would cover it."""
    first = influx.series(
        f'SELECT * FROM "darshan_heatmap_bin" WHERE "jobid" = \'{JOB}\' ORDER BY time ASC LIMIT 1',
        db=DATABASE,
    )[0]["values"][0][0]
    last = influx.series(
        f'SELECT * FROM "darshan_heatmap_bin" WHERE "jobid" = \'{JOB}\' ORDER BY time DESC LIMIT 1',
        db=DATABASE,
    )[0]["values"][0][0]
    return f"time >= {first}ns AND time <= {last}ns"


def _week_of_the_job(influx) -> str:
    """A week ending when the job started: what the finished-jobs list shows on that day."""
    ((start, _),) = influx.series(
        f'SELECT "score" FROM "job_diagnosis" WHERE "jobid" = \'{JOB}\' AND "insight" = \'job\'',
        db=DATABASE,
    )[0]["values"]
    return f"time >= {start}ns - 7d AND time <= {start}ns"


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_every_job_dashboard_influxql_returns_series(written, cluster) -> None:
    influx = written
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    board = generate.dashboards(config)["hpcmon-job"]
    [[_, app]] = influx.series(
        f'SHOW TAG VALUES FROM "app_run" WITH KEY = "app" WHERE "jobid" = \'{JOB}\'', db=DATABASE
    )[0]["values"]
    values = {"jobid": JOB, "app": app, "user": USER}
    values.update(timeFilter=_time_filter(influx), __interval="1m")
    _all_return_series(influx, board, values, at_least=15)


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_every_finished_jobs_dashboard_influxql_returns_series(written, cluster) -> None:
    """The job list: its score, top insights and link column (jobid) for the hook's job."""
    influx = written
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    board = generate.dashboards(config)["hpcmon-jobs"]
    values = {"timeFilter": _week_of_the_job(influx), "__interval": "1h"}
    _all_return_series(influx, board, values, at_least=4)
    (table,) = [p for p in board["panels"] if p["type"] == "table"]
    text = lint.substitute_variables(table["targets"][0]["query"], values)
    ((series),) = influx.series(text, db=DATABASE)
    ((row),) = series["values"]
    job = dict(zip(series["columns"], row, strict=True))
    assert job["jobid"] == JOB and job["score"] > 0 and job["user"] == USER
    assert job["top_insights"] and job["level"] == "high"
    later = f"time > {row[0]}ns AND time <= now()"
    assert (
        influx.series(
            lint.substitute_variables(table["targets"][0]["query"], {"timeFilter": later}),
            db=DATABASE,
        )
        == []
    )


def _all_return_series(influx, board: dict, values: dict, at_least: int) -> None:
    queries = list(lint.influxql_queries(board))
    assert len(queries) >= at_least
    problems = []
    for where, query in queries:
        text = lint.substitute_variables(query, values)
        series = influx.series(text, db=DATABASE)
        if not series:
            problems.append(f"{where}: no series: {text}")
            continue
        if where.startswith("variable"):
            expected = values[where.split()[1]]  # the job's own id, app and user
            assert any(expected in row for row in series[0]["values"]), where
            continue
        for column_index, column in enumerate(series[0]["columns"][1:], start=1):
            if all(row[column_index] is None for s in series for row in s["values"]):
                problems.append(f"{where}: column {column!r} has no value: {text}")
    assert not problems, "\n".join(problems)


def test_a_misspelt_field_is_caught(written) -> None:
    """InfluxDB answers 200 with no values for an unknown field; the check above sees it."""
    influx = written
    series = influx.series(
        f'SELECT last("nprocs"), last("nprocz") FROM "darshan_job" WHERE "jobid" = \'{JOB}\'',
        db=DATABASE,
    )
    assert all(row[2] is None for row in series[0]["values"])
