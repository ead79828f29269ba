"""The application queries of the job drill-down and the long-term dashboard on a real
InfluxDB 1.6.7 holding real mpi-io-test runs (2016-2025) written by the real hook."""

from __future__ import annotations

import pytest

from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint
from tests.report.test_report_history import DATABASE, RUNS, write_runs

pytestmark = pytest.mark.integration
ALICE = [job for job, (user, _, _) in RUNS.items() if user == "alice"]
NS = 1_000_000_000


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    return write_runs(influxdb1, tmp_path_factory.mktemp("spool"))


def _queries(board_uid: str, marker: str) -> list[tuple[str, str]]:
    board = generate.dashboards(dashboards_config.Config())[board_uid]
    return [(w, q) for w, q in lint.influxql_queries(board) if marker in q]


def test_job_dashboard_application_row(written) -> None:
    queries = _queries("hpcmon-job", "app_run")
    assert len(queries) == 6  # 2 variables, the table, 3 bar gauges
    values = {"jobid": "2305"}
    for name in ("app", "user"):
        [(_, query)] = [(w, q) for w, q in queries if w == f"variable {name}"]
        [series] = written.series(lint.substitute_variables(query, values), db=DATABASE)
        [[_, values[name]]] = series["values"]
    assert (values["app"], values["user"]) == ("mpi-io-test", "alice")
    for where, query in queries:
        if where.startswith("variable"):
            continue
        series = written.series(lint.substitute_variables(query, values), db=DATABASE)
        if "Energy" in where:  # no GEOPM report with these logs (test_dashboards_influxql has)
            assert series == []
            continue
        assert series, where
        if "Runs of this application" in where:
            [table] = series
            jobs = [row[table["columns"].index("jobid")] for row in table["values"]]
            assert jobs == ALICE[::-1]  # newest first, bob's run not there
            written_bytes = table["columns"].index("bytes_written")
            assert all(row[written_bytes] for row in table["values"])
        else:
            assert sorted(s["tags"]["jobid"] for s in series) == ALICE
            assert all(v is not None for s in series for v in s["values"][0][1:])


def test_longterm_regressed_applications(written) -> None:
    [(_, query)] = _queries("hpcmon-longterm", "app_run")
    regressed = 1622673798 * NS  # 2305 started then: 32x the bytes of alice's earlier runs
    until_then = lint.substitute_variables(
        query, {"timeFilter": f"time >= 0 AND time <= {regressed}"}
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
