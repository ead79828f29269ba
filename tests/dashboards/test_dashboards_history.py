"""The application queries of the job drill-down and the long-term dashboard on a real
InfluxDB 1.6.7 holding real mpi-io-test runs (2016-2025) written by the real hook."""

from __future__ import annotations

import itertools
import urllib.request

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint
from hpcmon.post_job.app import APP_RUN, app_name_problem
from hpcmon.post_job.darshan.diagnosis import JOB_TAG
from hpcmon.post_job.darshan.diagnosis import MEASUREMENT as DIAGNOSIS
from hpcmon.post_job.layout import stored_points
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point, to_lines
from tests.dashboards.test_dashboards_influxql import _scores, grafana_variables
from tests.report.test_report_history import DATABASE, RUNS, write_runs

pytestmark = pytest.mark.integration
ALICE = [job for job, (user, _, _) in RUNS.items() if user == "alice"]
NS = 1_000_000_000
NAMES = "hpcmon_app_names"


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    return write_runs(influxdb1, tmp_path_factory.mktemp("spool"))


def _queries(board_uid: str, marker: str) -> list[tuple[str, str]]:
    board = generate.dashboards(dashboards_config.Config())[board_uid]
    return [(w, q) for w, q in lint.influxql_queries(board) if marker in q]


def _row(influx, job: str, db: str = DATABASE) -> dict[str, list[dict]]:
    """Every query of the job drill-down's application row with the variables Grafana would
    resolve for the job: where -> rows."""
    board = generate.dashboards(dashboards_config.Config())["hpcmon-job"]
    values = grafana_variables(influx, board, {"jobid": job}, db=db)
    answers = {}
    for where, query in lint.influxql_queries(board):
        if "$app" in query:
            series = influx.series(lint.substitute_variables(query, values), db=db)
            answers[where] = [
                dict(zip(s["columns"], row, strict=True)) for s in series for row in s["values"]
            ]
    return answers


def test_job_dashboard_application_row(written) -> None:
    """2305's row: alice's runs that started up to it, newest first (not 2306 and 2307, which
    came later; not bob's), with the hook's own scores; 2307's row has all of alice's runs."""
    scores = {job: score for job, (_, score) in _scores(written, DATABASE).items()}
    for job, runs in (("2305", ["2305", "2304", "2303", "2301"]), ("2307", ALICE[::-1])):
        answers = _row(written, job)
        assert len(answers) == 7  # the table and six charts
        for where, rows in answers.items():
            if "Energy" in where:  # no GEOPM report with these logs (test_dashboards_influxql has)
                assert rows == []
                continue
            assert [r["jobid"] for r in rows] == runs, where
            if "I/O score" in where:
                assert [r["I/O score"] for r in rows] == [scores[j] for j in runs]
            if "Runs of this application" in where:
                assert all(r["bytes_written"] for r in rows)
                assert all(r["end_ms"] > r["time"] / 1e6 for r in rows)


# names a Slurm job name or --app could carry: mostly what InfluxQL, regexes and Grafana treat
# specially, plus any text
_RISKY = st.sampled_from(list("'\"\\/$`{}[]()*.+?|^~=!<>;,#% -_aZ9éλ\u00a0\u2028"))
_NAMES = st.one_of(st.text(_RISKY, min_size=1, max_size=30), st.text(min_size=1, max_size=30))
_COUNT = itertools.count(1)


@settings(max_examples=60, deadline=None)  # a dozen queries per example
@given(name=_NAMES)
def test_any_accepted_app_name_keeps_every_query_its_own(names_db, name: str) -> None:
    """An app name the hook accepts, written as the hook writes it and substituted as Grafana
    substitutes it, selects that app's run in every query of the row: it cannot end the
    string, escape it, or reach another app's runs (as the hook stores them, with the job's
    job_index point, whose app field the row's variable reads)."""
    assume(app_name_problem(name) is None)
    n = next(_COUNT)
    job, user = str(9000 + n), f"user{n}"  # one user per example: its run is the only one
    tags = {"jobid": job, "app": name, "user": user}
    fields: dict[str, FieldValue] = {
        "start_time": 1.7e9 + n,
        "runtime": 1.0,
        "bytes_read": 1.0,
        "bytes_written": 2.0,
    }
    fields |= {"reads": 1.0, "writes": 2.0, "metadata_time_share": 0.5, "energy_joules": 3.0}
    points = stored_points(
        [
            Point(APP_RUN, tags, fields, (1_700_000_000 + n) * NS),
            Point(
                DIAGNOSIS, {**tags, "insight": JOB_TAG}, {"score": 1.0}, (1_700_000_000 + n) * NS
            ),
        ],
        JobContext(job, None, user, name),
    )
    request = urllib.request.Request(
        f"{names_db.url}/write?db={NAMES}", data=to_lines(points).encode(), method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()
    answers = _row(names_db, job, db=NAMES)
    assert len(answers) == 7
    for where, rows in answers.items():
        assert [r["jobid"] for r in rows] == [job], where


@pytest.fixture(scope="module")
def names_db(influxdb1):
    influxdb1.create_database(NAMES)
    return influxdb1


def test_longterm_regressed_applications(written) -> None:
    [(_, query)] = _queries("hpcmon-longterm", "app_run")
    regressed = 1622673798 * NS  # 2305 started then: 32x the bytes of alice's earlier runs
    until_then = lint.substitute_variables(
        query,
        {"timeFilter": f"time >= 0 AND time < {regressed + NS}"},  # its slot of the second
    )
    [series] = written.series(until_then, db=DATABASE)
    rows = [dict(zip(series["columns"], row, strict=True)) for row in series["values"]]
    assert [(r["app"], r["user"], r["last job"]) for r in rows] == [
        ("mpi-io-test", "alice", "2305")
    ]
    assert rows[0]["bytes written"] == pytest.approx(32.0, rel=1e-3)
    assert rows[0]["runs"] == 4
    before = lint.substitute_variables(
        query, {"timeFilter": f"time >= 0 AND time < {regressed}"}
    )  # alice's three runs before it wrote the same: nothing regressed
    assert written.series(before, db=DATABASE) == []


def test_application_charts_are_one_bar_per_run_oldest_first() -> None:
    """Grafana's side of the order: table rows (newest first, as queried), one bar per row,
    sorted by start ascending; the variables are hidden and follow the job id."""
    board = generate.dashboards(dashboards_config.Config())["hpcmon-job"]
    charts = [p for p in lint.panels(board) if p["type"] == "bargauge" and "per run" in p["title"]]
    assert len(charts) == 6
    for chart in charts:
        assert chart["options"]["reduceOptions"]["values"] is True
        assert [t["resultFormat"] for t in chart["targets"]] == ["table"]
        assert "ORDER BY time DESC" in chart["targets"][0]["query"]
        assert chart["transformations"] == [
            {"id": "sortBy", "options": {"sort": [{"field": "Time", "desc": False}]}}
        ]
    hidden = {v["name"]: v["hide"] for v in board["templating"]["list"]}
    assert [hidden[name] for name in ("app", "user", "jobstart")] == [2, 2, 2]
