"""Issue 31: series that do not grow with every job. Two jobs of one user and application whose
logs start in the same second (the same Darshan log, written by the real hook for job 100 and
job 101 into a real InfluxDB 1.6.7) share every data series, and both come back whole: no
point of one overwrites a point of the other. The report finds a job through its one
``job_index`` series and reads its data within the window that series gives."""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from hpcmon.post_job.app import identify
from hpcmon.post_job.cli import main as post_job_main
from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.layout import (
    INDEX,
    PER_JOB_TAGS,
    PER_JOB_TAGS_OF,
    index_bucket,
    stored_points,
)
from hpcmon.post_job.model import JobContext
from hpcmon.report import influx as influx_module
from hpcmon.report.api import Sources, collect
from hpcmon.report.influx import APP_RUN, MEASUREMENTS, InfluxSettings, read_job_rows

pytestmark = pytest.mark.integration
LOG = Path(__file__).parents[1] / "data/darshan/logs/e3sm_io_heatmap_only.darshan"
DATABASE = "hpcmon_layout"
CLUSTER = "test"
USER = "alice"
JOBS = ("100", "101")


def hook(influx, job: str, spool: Path) -> None:
    status = post_job_main(
        [
            "--job-id", job, "--cluster", CLUSTER, "--user", USER, "--darshan", str(LOG),
            "--influx.v1-url", influx.url, "--influx.database", DATABASE,
            "--spool-dir", str(spool),
        ]
    )  # fmt: skip
    assert status == 0


def series_keys(influx) -> set[str]:
    found = influx.series("SHOW SERIES", DATABASE)
    return {values[0] for series in found for values in series["values"]}


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    """Job 100, then job 101 (same log, user and app): the series each added."""
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    hook(influxdb1, JOBS[0], spool)
    after_first = series_keys(influxdb1)
    hook(influxdb1, JOBS[1], spool)
    return influxdb1, after_first, series_keys(influxdb1)


def settings(influx) -> InfluxSettings:
    return InfluxSettings(v1_url=influx.url, database=DATABASE)


def expected_points(job: str) -> list:
    """The points the hook stores for the job (its own pipeline and layout)."""
    context = JobContext(job, CLUSTER, USER)
    output = collect_darshan([LOG], [], context)
    return stored_points(identify(output.points, context), context)


def test_the_second_job_adds_only_its_index_bucket_s_series(written) -> None:
    """The second job adds no series but its index bucket's, which the first job's (another
    bucket) had not made: no series is any job's own."""
    influx, after_first, after_both = written
    assert index_bucket(JOBS[0]) != index_bucket(JOBS[1])
    assert after_both - after_first == {f"{INDEX},bucket={index_bucket(JOBS[1])},cluster={CLUSTER}"}
    for key in after_both:
        measurement, _, tags = key.partition(",")
        names = {pair.split("=", 1)[0] for pair in tags.split(",")}
        if measurement == INDEX:
            assert names == {"bucket", "cluster"}, key
        else:  # no per-job tag on any data series
            per_job = {*PER_JOB_TAGS, *PER_JOB_TAGS_OF.get(measurement, ())}
            assert not names & per_job, key
    for measurement in MEASUREMENTS:  # not even a tag key of one
        keys = influx.series(f'SHOW TAG KEYS FROM "{measurement}"', DATABASE)
        assert not {v[0] for s in keys for v in s["values"]} & set(PER_JOB_TAGS), measurement


def test_both_jobs_come_back_whole(written) -> None:
    """Every point the hook stored for each job is read back for that job alone, at its
    stamp; the two jobs' points share their second and their series."""
    influx = written[0]
    seconds = set()
    for job in JOBS:
        rows = read_job_rows(settings(influx), job, CLUSTER)
        expected: dict[str, Counter] = {}
        for point in expected_points(job):
            if point.measurement in (*MEASUREMENTS, APP_RUN):  # what the report reads
                expected.setdefault(point.measurement, Counter())[point.time_ns] += 1
        assert expected["darshan_record"] and expected["darshan_heatmap_bin"]
        assert expected[APP_RUN]
        for measurement, stamps in expected.items():
            got = rows.get(measurement, [])
            assert Counter(row["time"] for row in got) == stamps, (job, measurement)
            assert {row["jobid"] for row in got} == {job}
        (darshan_job,) = rows["darshan_job"]
        seconds.add(darshan_job["time"] // 10**9)
    assert len(seconds) == 1  # the same second: only the lattice keeps them apart


def _same(mine: dict, theirs: dict) -> None:
    assert mine["summary"] == theirs["summary"]
    assert mine["insights"] == theirs["insights"]
    assert mine["not_evaluated"] == theirs["not_evaluated"]
    assert mine["top_files"] == theirs["top_files"]


def test_each_job_s_report_equals_the_report_from_its_log(written) -> None:
    from hpcmon.report.api import build

    influx = written[0]
    for job in JOBS:
        from_db = collect(job, CLUSTER, Sources(influx=settings(influx)))
        from_log = collect(job, CLUSTER, Sources(darshan_logs=(LOG,)))
        _same(build(from_db), build(from_log))
        assert from_db.darshan is not None and from_log.darshan is not None
        assert from_db.darshan.source == "InfluxDB points"
        heatmaps = [(h.module, h.start, h.width) for h in from_db.darshan.heatmaps]
        assert heatmaps == [(h.module, h.start, h.width) for h in from_log.darshan.heatmaps]
        for mine, theirs in zip(from_db.darshan.heatmaps, from_log.darshan.heatmaps, strict=True):
            np.testing.assert_array_equal(mine.read_bytes, theirs.read_bytes)
            np.testing.assert_array_equal(mine.write_bytes, theirs.write_bytes)
        assert from_db.darshan.ranks == from_log.darshan.ranks


def test_history_reads_each_run_within_its_own_window(written) -> None:
    """Each job's own run and I/O score, though the two windows overlap (job 100's heatmap
    bins go on after job 101's first second); runs of one second ran side by side (array
    tasks): neither is the other's earlier run, as when stamps were the logs' whole seconds."""
    influx = written[0]
    for job in JOBS:
        history = collect(job, CLUSTER, Sources(influx=settings(influx))).history
        assert history is not None and history.current.job_id == job and history.runs == []
        assert (history.app, history.user) == ("e3sm_io", USER)
        [diagnosis] = influx.series(
            f"SELECT \"score\" FROM job_diagnosis WHERE \"insight\" = 'job' AND jobid = '{job}'",
            DATABASE,
        )
        assert history.current.figures["io_score"] == diagnosis["values"][0][1]


def test_the_report_reads_the_index_then_bounded_series(written, monkeypatch) -> None:
    """No statement of the report filters on jobid without the job's time window, except
    the one that finds its window, in its job_index bucket; the earlier runs are read from
    the app's series."""
    influx = written[0]
    sent: list[str] = []
    request = influx_module._request

    def recording(settings_, query):
        sent.extend(statement.strip() for statement in query.split(";"))
        return request(settings_, query)

    monkeypatch.setattr(influx_module, "_request", recording)
    job = collect(JOBS[1], CLUSTER, Sources(influx=settings(influx)))
    assert job.darshan is not None and job.history is not None
    bucket = index_bucket(JOBS[1])
    assert sent[0].startswith(
        f'SELECT * FROM "{INDEX}" WHERE "bucket" = \'{bucket}\' AND "jobid" = \'{JOBS[1]}\''
    )
    for statement in sent:
        found = re.search(r'FROM "([^"]+)"', statement)
        assert found is not None, statement
        measurement = found.group(1)
        if measurement == INDEX:
            assert "jobid = " in statement or '"jobid" = ' in statement
        elif 'jobid" = ' in statement or "jobid = " in statement:
            assert re.search(r"time >= \d+ AND time <= \d+", statement), statement
        else:
            assert '"app" = ' in statement and "LIMIT" in statement, statement


def test_a_job_without_index_points_is_no_job(written, tmp_path, capsys) -> None:
    """Points of a job the index does not name (written around the hook) are not looked
    for: the report says there is no such job, as for any unknown job."""
    from hpcmon.report.cli import main as report_main

    influx = written[0]
    line = b'darshan_job,cluster=test jobid="999",nprocs=4i 1500000000000000000'
    influx_write(influx, line)
    assert influx.series("SELECT * FROM darshan_job WHERE jobid = '999'", DATABASE)
    assert read_job_rows(settings(influx), "999", CLUSTER) == {m: [] for m in MEASUREMENTS}
    status = report_main(
        ["--job-id", "999", "--influx.v1-url", influx.url, "--influx.database", DATABASE,
         "--output", str(tmp_path / "r.json")]
    )  # fmt: skip
    assert status == 2 and not (tmp_path / "r.json").exists()
    assert capsys.readouterr().err == (
        f"hpcmon-report: no data for job 999 in InfluxDB {influx.url} database {DATABASE}\n"
    )


def influx_write(influx, lines: bytes) -> None:
    request = urllib.request.Request(f"{influx.url}/write?db={DATABASE}", data=lines)
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 204
