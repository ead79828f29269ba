"""The report's history on a real InfluxDB 1.6.7: real Darshan logs of one application
(mpi-io-test, 2016 to 2025, Darshan 3.0.0 to 3.5.0) written by the real hook as one user's
runs, and one by another user; the history is checked against what the points say. The
database is the documented site deployment (tests/influx_site.py): the hook writes and the report
reads through --influx.retention-policy jobs, a policy that is not the database's default."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Literal, overload

import jsonschema
import pytest

from hpcmon.post_job.layout import index_bucket
from hpcmon.report import cli
from hpcmon.report import influx as influx_module
from tests.influx_site import POLICY, create_site_database

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "tests/data/darshan-history"
LOGS = ROOT / "tests/data/darshan/logs"
SCHEMA = json.loads((ROOT / "src" / "hpcmon" / "report" / "schema.json").read_text())
DATABASE = "hpcmon_history"  # the dashboards' test writes the runs here (default policy)
SITE_DATABASE = "hpcmon_history_site"  # this module's: the documented deployment
APP = "mpi-io-test"
# job id -> (user, log, extra hook flags); log start times 2016-03 ... 2025-11, in this order
RUNS = {
    "2301": ("alice", HISTORY / "mpi-io-test-x86_64-3.0.0.darshan", []),
    "2302": ("bob", LOGS / "mpi-io-test-ppc64-3.1.5.darshan", []),
    "2303": ("alice", HISTORY / "mpi-io-test-x86_64-3.1.8.darshan", []),
    "2304": ("alice", HISTORY / "mpi-io-test-x86_64-3.2.1.darshan", []),
    "2305": (
        "alice",
        HISTORY / "treddy_mpi-io-test_id4373053_6-2-60198-9815401321915095332_1.darshan",
        ["--app", APP],
    ),
    "2306": ("alice", LOGS / "mpi-io-test-x86_64-3.4.6.darshan", []),
    "2307": ("alice", LOGS / "mpi-io-test-x86_64-3.5.0.darshan", []),
}
ALICE_BEFORE_LAST = ["2301", "2303", "2304", "2305", "2306"]


def hook(url: str, job: str, user: str, log: Path, extra: list[str], spool: Path, *to: str) -> None:
    command = [
        sys.executable, "-m", "hpcmon.post_job", "--job-id", job, "--user", user,
        "--darshan", str(log), *extra, "--influx.v1-url", url, *to, "--spool-dir", str(spool),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


def write_runs(influx, spool: Path, site: bool = False):
    """Every run of RUNS through the real hook: into DATABASE's default policy (the dashboards'
    queries read that), or, with ``site``, into SITE_DATABASE's policy "jobs"."""
    if site:
        create_site_database(influx, SITE_DATABASE)
        to = ["--influx.database", SITE_DATABASE, "--influx.retention-policy", POLICY]
    else:
        influx.create_database(DATABASE)
        to = ["--influx.database", DATABASE]
    for job, (user, log, extra) in RUNS.items():
        hook(influx.url, job, user, log, extra, spool, *to)
    return influx


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    return write_runs(influxdb1, tmp_path_factory.mktemp("spool"), site=True)


@overload
def report(
    influx, job: str, tmp_path: Path, *flags: str, fmt: Literal["json"] = "json"
) -> dict: ...
@overload
def report(influx, job: str, tmp_path: Path, *flags: str, fmt: Literal["text", "html"]) -> str: ...
def report(influx, job: str, tmp_path: Path, *flags: str, fmt: str = "json") -> dict | str:
    out = tmp_path / f"{job}.{ {'text': 'txt'}.get(fmt, fmt) }"
    status = cli.main(
        [
            "--job-id", job, "--influx.v1-url", influx.url, "--influx.database", SITE_DATABASE,
            "--influx.retention-policy", POLICY, "--format", fmt, "--output", str(out), *flags,
        ]
    )  # fmt: skip
    assert status == 0
    if fmt != "json":
        return out.read_text()
    document = json.loads(out.read_text())
    jsonschema.validate(document, SCHEMA)
    return document


def rows_of(influx, query: str) -> list[dict]:
    """The rows of one InfluxQL statement, as column -> value."""
    return [
        dict(zip(series["columns"], values, strict=True))
        for series in influx.series(query, db=SITE_DATABASE)
        for values in series["values"]
    ]


def points_per_job(influx) -> dict[str, dict]:
    """What the darshan_job points say, summed per job (independent of app_run); ``jobid`` is
    a field (post_job/layout.py), so the sums are made here, not by GROUP BY."""
    totals: dict[str, dict] = {}
    for row in rows_of(
        influx,
        'SELECT "total_bytes_written", "total_bytes_read", "start_time", "jobid" '
        f'FROM "{POLICY}"."darshan_job"',
    ):
        job = totals.setdefault(row["jobid"], {"w": 0, "r": 0, "s": row["start_time"]})
        job["w"] += row["total_bytes_written"]
        job["r"] += row["total_bytes_read"]
        job["s"] = min(job["s"], row["start_time"])
    return totals


def test_every_point_carries_the_app_and_user(written) -> None:
    """Four spellings of the executable (/tmp/tmp//mpi-io-test, /projects/.../tmp//mpi-io-test,
    a bare mpi-io-test, a CI build path) are one app; every measurement carries it."""
    for measurement in ("darshan_job", "darshan_module", "darshan_record", "app_run"):
        apps = written.series(
            f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "app"', db=SITE_DATABASE
        )
        assert [v[1] for v in apps[0]["values"]] == [APP], measurement
    users = written.series('SHOW TAG VALUES FROM "darshan_job" WITH KEY = "user"', db=SITE_DATABASE)
    assert [v[1] for v in users[0]["values"]] == ["alice", "bob"]
    untagged = written.series(
        f'SELECT count("nprocs") FROM "{POLICY}"."darshan_job" WHERE "app" = \'\'',
        db=SITE_DATABASE,
    )
    assert not untagged


def test_history_is_what_the_points_say(written, tmp_path) -> None:
    document = report(written, "2307", tmp_path)
    history = document["history"]
    assert (history["app"], history["user"], history["scope"]) == (APP, "alice", "user")
    assert [r["job_id"] for r in history["runs"]] == ALICE_BEFORE_LAST  # oldest first, no bob
    truth = points_per_job(written)
    for run in [*history["runs"], history["current"]]:
        assert run["bytes_written"] == truth[run["job_id"]]["w"]
        assert run["bytes_read"] == truth[run["job_id"]]["r"]
        assert run["start"] == truth[run["job_id"]]["s"]
    starts = [r["start"] for r in history["runs"]]
    assert starts == sorted(starts) and starts[-1] < history["current"]["start"]
    assert history["current"]["job_id"] == "2307"
    scores = diagnosis_scores(written)  # the hook's own job_diagnosis, one score per job
    assert {r["job_id"]: r["io_score"] for r in history["runs"]} == {
        job: scores[job] for job in ALICE_BEFORE_LAST
    }
    assert not any("history" in m for m in document["missing"])


def test_scope_all_takes_the_other_users_run(written, tmp_path) -> None:
    history = report(written, "2307", tmp_path, "--history.scope", "all")["history"]
    assert [r["job_id"] for r in history["runs"]] == sorted([*ALICE_BEFORE_LAST, "2302"])
    assert history["scope"] == "all"


def test_runs_limit_keeps_the_newest(written, tmp_path) -> None:
    history = report(written, "2307", tmp_path, "--history.runs", "2")["history"]
    assert [r["job_id"] for r in history["runs"]] == ["2305", "2306"]
    assert report(written, "2307", tmp_path, "--history.runs", "0")["history"] is None


def test_a_run_32x_the_bytes_written_is_flagged(written, tmp_path) -> None:
    """2305, hooked with --app, wrote 2 GiB where alice's three earlier runs wrote 64 MiB."""
    history = report(written, "2305", tmp_path)["history"]
    assert [r["job_id"] for r in history["runs"]] == ["2301", "2303", "2304"]
    by_figure = {item["figure"]: item for item in history["regressions"]}
    written_bytes = by_figure["bytes_written"]
    truth = points_per_job(written)
    median = sorted(truth[j]["w"] for j in ("2301", "2303", "2304"))[1]
    assert written_bytes["median"] == median
    assert written_bytes["ratio"] == pytest.approx(truth["2305"]["w"] / median)
    assert written_bytes["ratio"] >= 2 and written_bytes["flagged"]
    assert by_figure["bytes_read"]["flagged"]
    assert not by_figure["energy_kwh"]["flagged"]  # no GEOPM report: unknown, never flagged
    # the latest run wrote what the median wrote: not flagged
    latest = {i["figure"]: i for i in report(written, "2307", tmp_path)["history"]["regressions"]}
    assert not latest["bytes_written"]["flagged"]
    assert latest["bytes_written"]["ratio"] == pytest.approx(1.0, rel=1e-3)


def test_no_flag_with_fewer_than_two_earlier_runs(written, tmp_path) -> None:
    history = report(written, "2303", tmp_path)["history"]
    assert [r["job_id"] for r in history["runs"]] == ["2301"]
    assert not any(item["flagged"] for item in history["regressions"])


def test_first_run_has_an_empty_history_and_no_error(written, tmp_path) -> None:
    document = report(written, "2301", tmp_path)
    assert document["history"]["runs"] == []
    assert document["history"]["current"]["job_id"] == "2301"
    assert not any("history" in m for m in document["missing"])
    assert "(no earlier run)" in report(written, "2301", tmp_path, fmt="text")


def test_text_and_html_show_the_table_and_chart(written, tmp_path) -> None:
    text = report(written, "2305", tmp_path, fmt="text")
    assert "== History: mpi-io-test (user alice, 3 earlier runs) ==" in text
    for job in ("2301", "2303", "2304", "2305"):
        assert f"\n  {job} " in text
    assert "CHANGED: written 32x the median of 3 earlier runs" in text
    assert "over the runs: " in text
    page = report(written, "2305", tmp_path, fmt="html")
    assert "History: mpi-io-test (user alice, 3 earlier runs)" in page
    assert page.count("<svg") >= 1 and "runs' median</h3><figure><svg" in page
    assert '<tr class="current"><td>2305</td>' in page


def test_a_job_without_app_run_point_says_why(written, tmp_path) -> None:
    """A job the hook wrote without an app (the stored layout: jobid a field, and its index)."""
    lines = (
        'darshan_job jobid="old",nprocs=4i,total_bytes_written=1i 1500000000000000000\n'
        f'job_index,bucket={index_bucket("old")} first=1500000000000000000i,jobid="old",'
        "last=1500000000000000000i 1500000000000000000"
    ).encode()
    request = urllib.request.Request(
        f"{written.url}/write?db={SITE_DATABASE}&rp={POLICY}", data=lines
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 204
    document = report(written, "old", tmp_path)
    assert document["history"] is None
    assert any(m.startswith("history: no app_run point") for m in document["missing"])


def diagnosis_scores(influx) -> dict[str, float]:
    """jobid -> score of the hook's per-job job_diagnosis point (insight=job), the newest
    when there are several (``jobid`` is a field: no GROUP BY)."""
    rows = rows_of(
        influx,
        f'SELECT "score", "jobid" FROM "{POLICY}"."job_diagnosis" WHERE "insight" = \'job\'',
    )
    return {row["jobid"]: row["score"] for row in sorted(rows, key=lambda row: row["time"])}


def job_window(influx, job: str) -> tuple[int, int]:
    """The first and last stamp of the job's points (its job_index)."""
    [window] = rows_of(
        influx,
        f'SELECT min("first"), max("last") FROM "{POLICY}"."job_index" WHERE "jobid" = \'{job}\'',
    )
    return window["min"], window["max"]


def drop_diagnosis(influx, job: str) -> None:
    """Delete the job's job_diagnosis points: those of its window (its job_index), in which
    no other job of these runs (years apart) has points."""
    first, last = job_window(influx, job)
    influx.series(  # raises on an error
        f'DELETE FROM "job_diagnosis" WHERE time >= {first} AND time <= {last}', db=SITE_DATABASE
    )
    assert job not in diagnosis_scores(influx)


def app_run_as_an_older_hook_wrote_it(influx, job: str) -> None:
    """The job's app_run point without ``io_score``, as hooks before it was kept there wrote
    it: the hook's own line for the job (standard output) without that field, in place of
    the stored point."""
    user, log, extra = RUNS[job]
    command = [sys.executable, "-m", "hpcmon.post_job", "--job-id", job, "--user", user,
               "--darshan", str(log), *extra]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    [line] = [ln for ln in run.stdout.splitlines() if ln.startswith("app_run,")]
    older = re.sub(r",io_score=[^, ]+", "", line)
    assert older != line and "io_score" not in older
    first, last = job_window(influx, job)
    influx.series(
        f'DELETE FROM "app_run" WHERE time >= {first} AND time <= {last}', db=SITE_DATABASE
    )
    request = urllib.request.Request(
        f"{influx.url}/write?db={SITE_DATABASE}&rp={POLICY}", data=older.encode()
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 204
    [row] = rows_of(influx, f'SELECT * FROM "{POLICY}"."app_run" WHERE "jobid" = \'{job}\'')
    assert row.get("io_score") is None and row["bytes_written"] is not None


def test_each_run_s_app_run_holds_its_io_score(written) -> None:
    """The hook keeps the job's I/O score (its job_diagnosis point with insight=job) in the
    job's app_run point: the history reads a run from one row."""
    rows = rows_of(written, f'SELECT "io_score", "jobid" FROM "{POLICY}"."app_run"')
    scores = diagnosis_scores(written)
    assert {row["jobid"]: row["io_score"] for row in rows} == scores
    assert set(scores) == set(RUNS)


def test_io_score_of_an_older_app_run_from_job_diagnosis(written, tmp_path, monkeypatch) -> None:
    """A Darshan run whose app_run point has no io_score (written before the hook kept it
    there) takes the score of its job_diagnosis point, found through its index, and null
    without one (dropped here); such a run does not count towards the median. Runs that
    hold their score cost no request of that kind."""
    scores = diagnosis_scores(written)
    sent: list[str] = []
    request = influx_module._request

    def recorded(settings, query):
        sent.append(query)
        return request(settings, query)

    monkeypatch.setattr(influx_module, "_request", recorded)
    report(written, "2307", tmp_path)
    assert len(sent) == 3  # the job's index, its data, the earlier runs
    assert not any('"job_diagnosis"' in q or '"job_index"' in q for q in sent[1:])
    for job in ("2301", "2305"):
        app_run_as_an_older_hook_wrote_it(written, job)
    drop_diagnosis(written, "2305")
    sent.clear()
    history = report(written, "2307", tmp_path)["history"]
    got = {r["job_id"]: r["io_score"] for r in history["runs"]}
    assert got == {j: None if j == "2305" else scores[j] for j in ALICE_BEFORE_LAST}
    assert history["current"]["io_score"] == scores["2307"]
    [score] = [i for i in history["regressions"] if i["figure"] == "io_score"]
    known = sorted(scores[j] for j in ("2301", "2303", "2304", "2306"))
    assert (score["earlier_runs"], score["median"]) == (4, (known[1] + known[2]) / 2)
    [index, diagnosis] = sent[3:]
    assert index.count(f'FROM "{POLICY}"."job_index"') == 2  # 2301's and 2305's alone
    assert diagnosis.count('"job_diagnosis"') == 2  # the same two runs' (2305's finds none)
