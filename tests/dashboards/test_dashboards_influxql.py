"""Every InfluxQL of the job drill-down returns series on a real InfluxDB 1.6.7 after the real
post-job hook wrote a job's bundled Darshan, Recorder, VizTracer and GEOPM data, with an
earlier and a later run of the job's application (other bundled Darshan logs, other scores),
and the epilog's slurm_job point of each (``slurm_job_point``, stored as the hook stores it:
post_job/layout.py, through ``Point.to_line``) plus one job Slurm ended with no I/O log at all.
The job id is a field of every point but job_index's (issue 31)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.demo import POST_JOB_INPUTS
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, jobs, lint
from hpcmon.post_job.layout import NS_PER_SECOND, SLOT_WIDTH, job_slot, stored_points
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.slurm import SlurmJob
from tests.report.report_database import slurm_point, write_points

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = "1728032"
DATABASE = "hpcmon_dashboards"
USER = "demo"
INPUTS = POST_JOB_INPUTS  # the demo's finished job: two Darshan logs, Recorder, VizTracer, GEOPM
APP = "e3sm_io"  # the demo job's app: the executable of its log that moved the most bytes
LOGS = ROOT / "tests/data/darshan/logs"
# Two more runs of the app by the same user (--app): one started in 2018 (I/O score 30.47),
# one 8 days after the demo job (67.03; the demo job scores 93.81)
EARLIER, LATER = "1728001", "1728099"
RUNS = {
    EARLIER: ["--darshan", str(LOGS / "mpi-io-test-ppc64-3.1.5.darshan"), "--app", APP],
    LATER: ["--darshan", str(LOGS / "hdf5_diagonal_write_1_byte_dxt.darshan"), "--app", APP],
    JOB: INPUTS,
}

SLURM_ONLY = "1728100"  # a job Slurm ended that left no I/O log: its slurm_job point only
NAME = 'e3sm "big" run <b>\\'  # the user's text: read back, never part of a query


def slurm_jobs(starts: dict[str, int]) -> dict[str, SlurmJob]:
    """Slurm's view of each job, started in the second its diagnosis says (ns): the demo job
    succeeded, the earlier run exited 3, the later one was killed by SIGKILL; the Slurm-only
    job started a day after the demo job and succeeded."""
    starts = {job: start // NS_PER_SECOND * NS_PER_SECOND for job, start in starts.items()}
    starts = {**starts, SLURM_ONLY: starts[JOB] + 86400 * 10**9}
    ended = {EARLIER: {"exit_code": 3}, LATER: {"exit_signal": 9}, SLURM_ONLY: {"nodelist": "n3"}}
    common = {"partition": "compute", "nodelist": "n[1-2]", "num_nodes": 2, "account": "proj"}
    jobs = {}
    for job_id, start_ns in starts.items():
        told = {**common, "exit_code": 0, "exit_signal": 0, **ended.get(job_id, {})}
        start = start_ns / 1e9
        jobs[job_id] = SlurmJob(job_id, USER, "1000", start, start + 5400.0, NAME, **told)
    return jobs


FAILED = [EARLIER, LATER]


def slurm_stamp(job: SlurmJob) -> int:
    """Where the hook stores the job's slurm_job point: its start's second, its slot."""
    assert job.start is not None
    return int(job.start) * NS_PER_SECOND + job_slot(job.job_id) * SLOT_WIDTH


def stored_slurm_points(jobs: list[SlurmJob], cluster: str = "demo") -> list:
    """Each job's slurm_job point as the epilog's hook run stores it, with its job_index
    point (a second one for a job the hook indexed already: one per hook run)."""
    return [
        point
        for job in jobs
        for point in stored_points(
            [slurm_point(job, cluster=cluster)], JobContext(job.job_id, cluster, job.user)
        )
    ]


def run_hook(influx, database: str, job: str, inputs: list[str], spool) -> None:
    """The real hook command, as the epilog runs it, into ``database``."""
    command = [
        sys.executable, "-m", "hpcmon.post_job", "--job-id", job, "--cluster", "demo",
        "--user", USER, *inputs,
        "--influx.v1-url", influx.url, "--influx.database", database,
        "--spool-dir", str(spool),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    for job, inputs in RUNS.items():
        run_hook(influxdb1, DATABASE, job, inputs, spool)
    starts = {job: start for job, (start, _) in _scores(influxdb1).items()}
    write_points(influxdb1, stored_slurm_points(list(slurm_jobs(starts).values())), DATABASE)
    return influxdb1


def grafana_variables(influx, board: dict, values: dict, db: str = DATABASE) -> dict:
    """The board's InfluxDB query variables resolved in order, as Grafana does: the first
    value of each (a tag value, or a SELECT's first column after time, as JavaScript prints
    a number; none, empty, when the query found nothing)."""
    resolved = dict(values)
    for variable in board["templating"]["list"]:
        if variable.get("type") != "query" or variable["datasource"]["type"] != "influxdb":
            continue
        if variable["name"] in resolved:  # chosen (the job id)
            continue
        series = influx.series(lint.substitute_variables(variable["query"], resolved), db=db)
        if not series:
            resolved[variable["name"]] = ""
            continue
        value = series[0]["values"][0][1]
        if isinstance(value, int) and not isinstance(value, bool):
            # JavaScript reads every JSON number as a double: a stamp in ns is not exact
            assert float(value) == value, f"{variable['name']} = {value}: not exact in Grafana"
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        resolved[variable["name"]] = str(value)
    return resolved


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


def _scores(influx, db: str = DATABASE) -> dict[str, tuple[int, float]]:
    """job id -> (start ns, I/O score) of the hook's job_diagnosis job points."""
    series = influx.series(
        'SELECT "score", "jobid" FROM "job_diagnosis" WHERE "insight" = \'job\'', db=db
    )
    rows = [row for s in series for row in s["values"]]
    scores = {jobid: (time, score) for time, score, jobid in rows}
    assert len(scores) == len(rows)  # one job point per job
    return scores


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_every_job_dashboard_influxql_returns_series(written, cluster) -> None:
    influx = written
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    board = generate.dashboards(config)["hpcmon-job"]
    values = grafana_variables(influx, board, {"jobid": JOB})
    assert (values["app"], values["user"]) == (APP, USER)
    values.update(timeFilter=_time_filter(influx), __interval="1m")
    _all_return_series(influx, board, values, at_least=15)


def test_the_application_row_shows_the_runs_up_to_the_job(written) -> None:
    """The earlier run and the job, newest first, with their own scores; not the later run."""
    influx = written
    board = generate.dashboards(dashboards_config.Config())["hpcmon-job"]
    values = grafana_variables(influx, board, {"jobid": JOB})
    scores = {job: score for job, (_, score) in _scores(influx).items()}
    assert scores[LATER] != scores[JOB] != scores[EARLIER]
    row = [(w, q) for w, q in lint.influxql_queries(board) if "$app" in q]
    assert len(row) == 7  # the table and six charts
    for where, query in row:
        [series] = influx.series(lint.substitute_variables(query, values), db=DATABASE)
        rows = [dict(zip(series["columns"], r, strict=True)) for r in series["values"]]
        if "Energy" in where:  # only the demo job has a GEOPM report
            assert [r["jobid"] for r in rows] == [JOB], where
            continue
        assert [r["jobid"] for r in rows] == [JOB, EARLIER], where
        assert [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
        if "I/O score" in where:
            assert [r["I/O score"] for r in rows] == [scores[JOB], scores[EARLIER]]
    later = grafana_variables(influx, board, {"jobid": LATER})
    for where, query in row:  # the later run's own drill-down has all three
        [series] = influx.series(lint.substitute_variables(query, later), db=DATABASE)
        if "Energy" not in where:
            assert [r[1] for r in series["values"]] == [LATER, JOB, EARLIER], where


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_every_finished_jobs_dashboard_influxql_returns_series(written, cluster) -> None:
    """The job list over the three jobs: one row per job, worst first, each row the job's own
    score, top insights and link column (jobid)."""
    influx = written
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    board = generate.dashboards(config)["hpcmon-jobs"]
    scores = _scores(influx)
    assert sorted(scores) == sorted(RUNS)
    starts = [start for start, _ in scores.values()]
    span = f"time >= {min(starts)}ns AND time <= {max(starts)}ns"
    _all_return_series(influx, board, {"timeFilter": span, "__interval": "1h"}, at_least=8)
    table = _panel(board, "Finished jobs by I/O score")
    query = table["targets"][0]["query"]
    ((series),) = influx.series(lint.substitute_variables(query, {"timeFilter": span}), db=DATABASE)
    rows = [dict(zip(series["columns"], row, strict=True)) for row in series["values"]]
    assert sorted(r["jobid"] for r in rows) == sorted(RUNS)  # one row per job
    for row in rows:
        assert (row["time"], row["score"]) == scores[row["jobid"]]
        assert row["user"] == USER and row["top_insights"] and row["level"] == "high"
    # InfluxDB gives top()'s rows by time; the panel sorts them by score, worst first
    assert [r["jobid"] for r in rows] == [EARLIER, JOB, LATER]
    assert table["options"]["sortBy"] == [{"displayName": "score", "desc": True}]
    worst_first = sorted(rows, key=lambda r: -r["score"])
    assert [r["jobid"] for r in worst_first] == [JOB, LATER, EARLIER]
    # a list shorter than the jobs keeps the worst, not the first
    two = query.replace(f", {jobs.LISTED})", ", 2)")
    assert two != query
    ((series),) = influx.series(lint.substitute_variables(two, {"timeFilter": span}), db=DATABASE)
    assert sorted(row[series["columns"].index("jobid")] for row in series["values"]) == sorted(
        [JOB, LATER]
    )
    later = f"time > {max(starts)}ns AND time <= now()"
    assert influx.series(lint.substitute_variables(query, {"timeFilter": later}), db=DATABASE) == []


def _panel(board: dict, title: str, kind: str = "table") -> dict:
    (panel,) = [p for p in board["panels"] if p["type"] == kind and p["title"] == title]
    return panel


def _rows(influx, panel: dict, values: dict) -> list[dict]:
    """The rows of the panel's one query, as column -> value."""
    text = lint.substitute_variables(panel["targets"][0]["query"], values)
    return [
        dict(zip(s["columns"], row, strict=True))
        for s in influx.series(text, db=DATABASE)
        for row in s["values"]
    ]


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_the_slurm_tables_list_every_finished_job_and_exactly_the_failed_ones(
    written, cluster
) -> None:
    """Every job Slurm ended in the time range (the Slurm-only one too) as written, the
    failed ones (exit 3, SIGKILL) alone in their table, both counted; the drill-down of the
    Slurm-only job shows its Slurm row."""
    influx = written
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    boards = generate.dashboards(config)
    board = boards["hpcmon-jobs"]
    slurm = slurm_jobs({job: start for job, (start, _) in _scores(influx).items()})
    starts = [slurm_stamp(job) for job in slurm.values()]
    span = {"timeFilter": f"time >= {min(starts)}ns AND time <= {max(starts)}ns"}
    finished = _rows(influx, _panel(board, "Finished jobs"), span)
    assert [r["jobid"] for r in finished] == [LATER, SLURM_ONLY, JOB, EARLIER]  # newest first
    for row in finished:
        job = slurm[row["jobid"]]
        assert job.start is not None and job.end is not None
        assert row == {
            "time": slurm_stamp(job),
            "jobid": job.job_id,
            "job name": NAME,  # quotes, a tag, a trailing backslash: as the user wrote it
            "user": USER,
            "account": "proj",
            "partition": "compute",
            "nodes": job.nodelist,
            "node count": 2,
            "exit code": job.exit_code,
            "signal": job.exit_signal,
            "start": job.start * 1000,
            "end": job.end * 1000,
            "elapsed": 5400.0,
        }
    failed = _rows(influx, _panel(board, "Failed jobs"), span)
    assert sorted(r["jobid"] for r in failed) == FAILED
    for title, jobs_counted in (("Finished jobs (Slurm)", slurm), ("Failed jobs (Slurm)", FAILED)):
        [row] = _rows(influx, _panel(board, title, "stat"), span)
        assert row["count"] == len(jobs_counted), title
    outside = {"timeFilter": f"time > {max(starts)}ns AND time <= now()"}
    assert _rows(influx, _panel(board, "Finished jobs"), outside) == []
    drill_down = _panel(boards["hpcmon-job"], "Slurm: the job")
    values = grafana_variables(influx, boards["hpcmon-job"], {"jobid": SLURM_ONLY})
    assert (values["app"], values["user"], values["jobstart"]) == ("", USER, "")  # no app_run
    [row] = _rows(influx, drill_down, values)
    assert (row["jobid"], row["nodes"], row["exit code"]) == (SLURM_ONLY, "n3", 0)


def test_a_misspelt_slurm_field_is_caught(written) -> None:
    """The check of every query sees a column no point has, as InfluxDB answers 200 for it."""
    board = copy.deepcopy(generate.dashboards(dashboards_config.Config())["hpcmon-jobs"])
    target = _panel(board, "Failed jobs")["targets"][0]
    target["query"] = target["query"].replace('"exit_signal" AS', '"exit_signa1" AS')
    span = {"timeFilter": "time >= 0 AND time <= now()", "__interval": "1h"}
    with pytest.raises(AssertionError, match="Failed jobs.* column 'signal' has no value"):
        _all_return_series(written, board, span, at_least=8)


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
            expected = values[where.split()[1]]  # the job's own id, app, user and start
            assert any(expected in map(str, row) for row in series[0]["values"]), where
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


# Two array tasks of one user and app that started in the same second (the same inputs): no
# tag tells their points apart any more, only the jobid field and their slots of that second
TWIN, OTHER_TWIN = "4201", "4202"
ALONE, TWINS = "hpcmon_alone", "hpcmon_twins"


@pytest.fixture(scope="module")
def twins(influxdb1, tmp_path_factory):
    spool = tmp_path_factory.mktemp("spool")
    for db, job_ids in ((ALONE, [TWIN]), (TWINS, [TWIN, OTHER_TWIN])):
        influxdb1.create_database(db)
        for job in job_ids:
            run_hook(influxdb1, db, job, INPUTS, spool)
        starts = {job: start for job, (start, _) in _scores(influxdb1, db).items()}
        assert len(set(s // NS_PER_SECOND for s in starts.values())) == 1  # the same second
        slurm = [
            SlurmJob(j, USER, "1000", s // NS_PER_SECOND * 1.0, None) for j, s in starts.items()
        ]
        write_points(influxdb1, stored_slurm_points(slurm), db)
    return influxdb1


def _answers(influx, board: dict, job: str, db: str) -> dict[str, list]:
    """Every InfluxQL of the drill-down but the job list and the application row, with the
    variables Grafana resolves for the job: where -> rows (column -> value; "stamp": the
    row's time, which an alias "time" hides)."""
    values = grafana_variables(influx, board, {"jobid": job}, db=db)
    window = f"time >= {values['jobfirst']}s AND time < {values['joblast']}s + 1s"
    values.update(timeFilter=window, __interval="1m")
    return {
        where: [
            {"series": s.get("tags"), "stamp": row[0], **dict(zip(s["columns"], row, strict=True))}
            for s in influx.series(lint.substitute_variables(query, values), db=db)
            for row in s["values"]
        ]
        for where, query in lint.influxql_queries(board)
        if "$app" not in query and where != "variable jobid"
    }


@pytest.mark.parametrize("cluster", ["", "demo"])
def test_the_drill_down_of_one_of_two_jobs_started_in_the_same_second_shows_that_job(
    twins, cluster
) -> None:
    """Each panel of one twin's drill-down answers what it answers with that job alone in the
    database, and the other twin's answers are its own (its slot of the second)."""
    influx = twins
    config = dashboards_config.replace(dashboards_config.Config(), cluster=cluster)
    board = generate.dashboards(config)["hpcmon-job"]
    alone = _answers(influx, board, TWIN, ALONE)
    assert sum(bool(rows) for rows in alone.values()) >= 15
    assert _answers(influx, board, TWIN, TWINS) == alone
    other = _answers(influx, board, OTHER_TWIN, TWINS)
    assert other.keys() == alone.keys()
    for where, rows in other.items():
        assert len(rows) == len(alone[where]), where
        stamps = [r["stamp"] for r in rows if r["stamp"] % NS_PER_SECOND]  # not aggregated
        assert all(t % NS_PER_SECOND // SLOT_WIDTH == job_slot(OTHER_TWIN) for t in stamps), where
    assert other["panel 'Slurm: the job' A"][0]["jobid"] == OTHER_TWIN
    # the application row has both: the runs that started up to the job's second
    values = grafana_variables(influx, board, {"jobid": TWIN}, db=TWINS)
    [(_, query)] = [(w, q) for w, q in lint.influxql_queries(board) if "LIMIT 50" in q]
    [series] = influx.series(lint.substitute_variables(query, values), db=TWINS)
    assert sorted(row[1] for row in series["values"]) == [TWIN, OTHER_TWIN]
