"""Issue 20: the report from the database equals the report from the logs, on every bundled
Darshan log (partial ones included), within a series budget.

The real hook writes each log (one job each) into a real InfluxDB 1.6.7; hpcmon-report then
runs from that database and from ``--darshan LOG``; the insights (id and level), the summary
numbers (rel 1e-9) and the rules not evaluated must be the same, and the HTML from the
database must hold at least one picture per job, and as many as the log gives."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hpcmon.post_job.layout import INDEX, PER_JOB_TAGS, PER_JOB_TAGS_OF, index_bucket
from tests.report.report_database import (
    DATABASE,
    from_database,
    from_log,
    hook_writes,
    report,
)

DATA = Path(__file__).parents[1] / "data"
ALL_LOGS = sorted((DATA / "darshan" / "logs").glob("*.darshan")) + sorted(
    (DATA / "darshan-report").glob("*.darshan")
)
LARGEST = sorted(ALL_LOGS, key=lambda p: p.stat().st_size)[-4:]
SERIES_BUDGET = 100


def job_id(log: Path) -> str:
    return str(1000 + ALL_LOGS.index(log))


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    """Every bundled log written by the hook, one job per log."""
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    for log in ALL_LOGS:
        hook_writes(influxdb1, log, job_id(log), spool)
    return influxdb1


def test_every_bundled_log_is_tested() -> None:
    assert len(ALL_LOGS) >= 20
    assert any("partial" in log.name for log in ALL_LOGS)


def _numbers_equal(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def both(influx, log: Path, tmp_path: Path, fmt: str):
    """hpcmon-report for the log's job from the database, and from the log itself."""
    job = job_id(log)
    return (
        report(job, tmp_path / f"db.{fmt}", *from_database(influx), fmt=fmt),
        report(job, tmp_path / f"log.{fmt}", *from_log(log), fmt=fmt),
    )


@pytest.mark.integration
@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.stem[:40])
def test_report_from_the_database_equals_the_report_from_the_log(
    written, log: Path, tmp_path: Path
) -> None:
    db, own = both(written, log, tmp_path, "json")
    assert isinstance(db, dict) and isinstance(own, dict)
    assert db["sources"]["darshan"] == "InfluxDB points"
    assert own["sources"]["darshan"] == "Darshan logs"
    assert [(i["id"], i["level"]) for i in db["insights"]] == [
        (i["id"], i["level"]) for i in own["insights"]
    ]
    for mine, theirs in zip(db["insights"], own["insights"], strict=True):
        assert mine["evidence"].keys() == theirs["evidence"].keys()
        for key, value in mine["evidence"].items():
            assert _numbers_equal(value, theirs["evidence"][key]), (mine["id"], key)
    assert db["not_evaluated"] == own["not_evaluated"]
    for key, value in own["summary"].items():
        assert _numbers_equal(db["summary"][key], value), key
    assert db["top_files"] == own["top_files"]
    # nothing left unevaluated for want of data a log has (only the Prometheus/VizTracer rules,
    # and the POSIX rules on logs with no POSIX records)
    without = {n["id"] for n in db["not_evaluated"]}
    assert without <= {
        "target_dominated",
        "io_phase_target_spike",
        "energy_waiting_io",
        "python_hotspot",
    } | ({n["id"] for n in db["not_evaluated"] if n["reason"] == "no POSIX records"})


@pytest.mark.integration
@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.stem[:40])
def test_html_from_the_database_has_the_pictures_of_the_log(
    written, log: Path, tmp_path: Path
) -> None:
    db, own = both(written, log, tmp_path, "html")
    assert isinstance(db, str) and isinstance(own, str)
    assert db.count("<svg") >= 1
    assert db.count("<svg") >= own.count("<svg")


def job_series(influx, job: str) -> int:
    """The series holding the job's points: its job_index bucket's series, and those of its data
    within its window (``jobid`` is a field there, post_job/layout.py)."""
    window = influx.series(
        f'SELECT min("first"), max("last") FROM "{INDEX}" WHERE "jobid" = \'{job}\'', DATABASE
    )
    _, first, last = window[0]["values"][0]
    found = influx.series(
        f"SELECT count(*) FROM /.*/ WHERE \"jobid\" = '{job}' "
        f"AND time >= {first} AND time <= {last} GROUP BY *",
        DATABASE,
    )
    return 1 + len([s for s in found if s["name"] != INDEX])


@pytest.mark.integration
def test_series_per_log_within_the_budget(written) -> None:
    """The series a log's job writes to, on the real database, whatever its ranks and
    records; none of them carries a per-job tag."""
    counts = {log.name: job_series(written, job_id(log)) for log in ALL_LOGS}
    for log in LARGEST:
        assert 1 < counts[log.name] <= SERIES_BUDGET, counts
    assert max(counts.values()) <= SERIES_BUDGET, counts
    # the 709-record STDIO job: its records fold into one series per module
    assert counts["partial_data_stdio.darshan"] < 20
    # and the per-record points are all there, rank and record id carried in fields
    rows = written.series(
        'SELECT count("bytes_read") FROM "darshan_record" WHERE "jobid" = '
        f"'{job_id(DATA / 'darshan' / 'logs' / 'partial_data_stdio.darshan')}'",
        DATABASE,
    )
    assert rows[0]["values"][0][1] > 700
    for log in ALL_LOGS:  # one index point per job, in its bucket's series
        job = job_id(log)
        index = written.series(
            f'SELECT * FROM "{INDEX}" WHERE "bucket" = \'{index_bucket(job)}\' '
            f"AND \"jobid\" = '{job}'",
            DATABASE,
        )
        assert len(index[0]["values"]) == 1, log.name
    for measurement in {
        m for s in written.series("SHOW MEASUREMENTS", DATABASE) for [m] in s["values"]
    } - {INDEX}:
        keys = written.series(f'SHOW TAG KEYS FROM "{measurement}"', DATABASE)
        names = {v[0] for s in keys for v in s["values"]}
        assert not names & {*PER_JOB_TAGS, *PER_JOB_TAGS_OF.get(measurement, ())}, measurement
