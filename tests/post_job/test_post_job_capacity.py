"""A store at its series limit loses nothing: real InfluxDB 1.6.7 with a small
max-series-per-database (inmem index: 1.6.7 enforces the limit only there), the real hook on
bundled jobs, the limit raised by restarting the server, then ``flush``; compared with a store
that got the same jobs directly."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hpcmon.post_job.cli import main
from hpcmon.post_job.spool import Spool
from hpcmon.post_job.writers import capacity_problem
from tests import servers
from tests.influx_site import POLICY, create_site_database

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = DATA / "darshan" / "logs"
JOBS = {
    "9101": [
        "--darshan",
        str(LOGS / "mpi-io-test-x86_64-3.5.0.darshan"),
        "--geopm-report",
        str(DATA / "geopm_report" / "geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report"),
    ],
    "9102": ["--darshan", str(LOGS / "imbalanced-io.darshan")],
    "9103": ["--darshan", str(LOGS / "e3sm_io_heatmap_only.darshan")],
}
# (setting, a small value, the value it is raised to, which jobs the small value refuses):
# the first job alone makes more than 40 series; InfluxDB checks max-values-per-tag against
# the values stored before each request, so the first job goes in whole (its 4 hosts too) and
# the next jobs, with a second job id, are refused.
LIMITS = [
    ("max-series-per-database", 40, 100_000, [True, True, True]),
    ("max-values-per-tag", 1, 100_000, [False, True, True]),
]


def _writers(
    server: servers.InfluxDB1, db: str, spool: Path | None = None, rp: str | None = None
) -> list[str]:
    flags = ["--influx.v1-url", server.url, "--influx.database", db]
    flags += ["--influx.retention-policy", rp] if rp else []
    return flags + (["--spool-dir", str(spool)] if spool else [])


def _points(server: servers.InfluxDB1, db: str) -> dict[str, Counter]:
    """Per measurement, every point stored in the site's policy (time and values) with how
    often it is there."""
    found: dict[str, Counter] = {}
    for [name] in server.series("SHOW MEASUREMENTS", db=db)[0]["values"]:
        rows: Counter = Counter()
        for series in server.series(f'SELECT * FROM "{POLICY}"."{name}"', db=db):
            rows.update(tuple(map(repr, row)) for row in series["values"])
        found[name] = rows
    return found


def _errors(capsys: pytest.CaptureFixture) -> list[str]:
    return _errors_in(capsys.readouterr().err)


def _errors_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": ERROR " in line]


def _series_count(server: servers.InfluxDB1, db: str) -> int:
    return sum(len(s["values"]) for s in server.series("SHOW SERIES", db=db))


@pytest.mark.parametrize(
    ("setting", "small", "raised", "refused"), LIMITS, ids=[s for s, *_ in LIMITS]
)
def test_series_limit_keeps_every_line_then_flush_delivers_all(
    setting: str,
    small: int,
    raised: int,
    refused: list[bool],
    influxdb1: servers.InfluxDB1,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    key = setting.replace("-", "_")
    # the documented site deployment on both stores (the capped one with the inmem index), its
    # policy "jobs" named by --influx.retention-policy (INF: the bundled jobs ran years ago)
    direct_db = f"direct_{key}"
    create_site_database(influxdb1, direct_db)
    direct = _writers(influxdb1, direct_db, rp=POLICY)
    with servers.run_influxdb1(index="inmem", **{key: small}) as capped:
        create_site_database(capped, "capped")
        spool = tmp_path / "spool"
        site = _writers(capped, "capped", spool, POLICY)
        for (job, inputs), refusing in zip(JOBS.items(), refused, strict=True):
            assert main(["--job-id", job, *inputs, *direct]) == 0
            capsys.readouterr()
            status = main(["--job-id", job, *inputs, *site])
            if not refusing:
                assert status == 0 and not _errors(capsys)
                continue
            assert status == 1  # a problem someone must act on, not a passing outage
            # one line: the limit reached, which setting raises it, where the lines wait
            [line] = _errors(capsys)
            assert "the store's series limit was reached" in line
            assert f"{setting} limit exceeded" in line
            assert f"raise {setting} in the [data] section of influxdb.conf" in line
            assert str(spool / "influx-v1") in line and "hpcmon-post-job flush" in line
        if setting == "max-series-per-database":
            assert _series_count(capped, "capped") <= small
        queue = Spool(spool, "influx-v1")
        assert queue.pending() and not queue.rejected_dir.exists()  # kept, nothing filed as bad

        # still at the limit: flush keeps everything and says why, in one line
        assert main(["flush", *site]) == 1
        [line] = _errors(capsys)
        assert setting in line and "spool file(s) left" in line

        capped.stop()
        capped.start_again(**{key: raised})
        assert main(["flush", *site]) == 0
        _same_points(capped, influxdb1, direct_db)
        assert queue.pending() == [] and not queue.rejected_dir.exists()


def _same_points(capped: servers.InfluxDB1, direct: servers.InfluxDB1, direct_db: str) -> None:
    """Every line delivered once: counted per measurement, then point by point."""
    expected, found = _points(direct, direct_db), _points(capped, "capped")
    assert {m: sum(c.values()) for m, c in found.items()} == {
        m: sum(c.values()) for m, c in expected.items()
    }
    assert found == expected  # the same points, each once
    assert _series_count(capped, "capped") == _series_count(direct, direct_db)


def test_lines_filed_as_rejected_for_the_limit_are_sent_by_flush(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    """An earlier release filed capacity refusals under rejected/: flush queues them again,
    in their place, and leaves the really bad lines where they are."""
    influxdb1.create_database("requeue")
    queue = Spool(tmp_path, "influx-v1")
    refused = (
        'HTTP 400: {"error":"partial write: max-series-per-database limit exceeded: (5) dropped=1"}'
    )
    by_tag = refused.replace("max-series-per-database", "max-values-per-tag")
    bad = 'HTTP 400: {"error":"unable to parse \'pj x\': missing fields"}'
    lines = [f"pj_requeue,jobid=77,rank={i} bytes={i}i 1700000000000000000" for i in range(3)]
    queue.reject([(lines[0], refused), ("pj x", bad), (lines[1], refused)], "old.spool")
    queue.reject([(lines[2], by_tag)], "other.spool")
    assert main(["flush", *_writers(influxdb1, "requeue", tmp_path)]) == 0
    stored = influxdb1.series('SELECT count("bytes") FROM "pj_requeue"', db="requeue")
    assert stored[0]["values"][0][1] == 3
    [left] = queue.rejected_dir.glob("*.jsonl")
    assert '"pj x"' in left.read_text() and "pj_requeue" not in left.read_text()
    assert queue.pending() == []


def test_tsi_index_does_not_enforce_the_series_limit(tmp_path: Path) -> None:
    """What docs/site-scale.md says of a TSI deployment: InfluxDB 1.6.7 ignores
    max-series-per-database there (the hook's lines all go in whatever the limit)."""
    with servers.run_influxdb1(max_series_per_database=2) as server:
        server.create_database("tsi")
        inputs = JOBS["9102"]
        assert main(["--job-id", "9102", *inputs, *_writers(server, "tsi", tmp_path)]) == 0
        assert _series_count(server, "tsi") > 2  # 187, see docs/site-scale.md


@pytest.mark.parametrize(
    ("answer", "setting"),
    [
        # InfluxDB 1.6.7, measured with max-series-per-database = 5 / max-values-per-tag = 3
        (
            '{"error":"partial write: max-series-per-database limit exceeded: (5) dropped=6"}',
            "max-series-per-database",
        ),
        (
            '{"error":"partial write: max-values-per-tag limit exceeded (3/3): '
            'measurement=\\"n\\" tag=\\"b\\" value=\\"4\\" dropped=1"}',
            "max-values-per-tag",
        ),
        # InfluxDB Cloud (v2 API) and InfluxDB 3, as their documentation gives them
        ("Series cardinality exceeds your plan's limit", "cardinality quota"),
        (
            '{"code":"invalid","message":"dml handler error: service limit reached: couldn\'t '
            "create columns in table t; table contains 199 existing columns, applying this "
            'write would result in 267 columns, limit is 200"}',
            "column limit",
        ),
    ],
)
def test_capacity_answers_name_the_setting(answer: str, setting: str) -> None:
    problem = capacity_problem(answer)
    assert problem is not None and setting in problem
    assert problem.startswith("the store's series limit was reached (")


@pytest.mark.parametrize(
    "answer",
    [
        '{"error":"partial write: unable to parse \'bad\': missing fields dropped=0"}',
        '{"error":"partial write: field type conflict: input field \\"v\\" on measurement '
        '\\"m\\" is type string, already exists as type float dropped=1"}',
        '{"error":"retention policy not found: nope"}',
    ],
)
def test_bad_data_is_not_taken_for_capacity(answer: str) -> None:
    assert capacity_problem(answer) is None


def test_points_older_than_the_policy_are_rejected_once_with_the_reason(
    influxdb1: servers.InfluxDB1, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A log of 2018 into the documented deployment with an 8-day policy: InfluxDB 1.6.7
    answers 400 "partial write: points beyond retention policy dropped=N". Such lines can never
    be written there: every one counted as rejected and filed with the reason, one line naming
    the policy, nothing left queued, and flush does not send them again."""
    create_site_database(influxdb1, "short_rp", duration="8d")
    old = ["--darshan", str(LOGS / "mpi-io-test-ppc64-3.1.5.darshan")]
    assert main(["--job-id", "9104", *old, "--output", str(tmp_path / "job.lp")]) == 0
    lines = (tmp_path / "job.lp").read_text().splitlines()
    capsys.readouterr()
    spool = tmp_path / "spool"
    site = _writers(influxdb1, "short_rp", spool, POLICY)
    assert main(["--job-id", "9104", *old, *site]) == 1
    err = capsys.readouterr().err
    assert f"written=0 spooled=0 rejected={len(lines)} lost=0" in err
    queue = Spool(spool, "influx-v1")
    [line] = _errors_in(err)
    assert f"{len(lines)} line(s) rejected by the server, kept in {queue.rejected_dir}" in line
    assert 'retention policy "jobs" of database short_rp keeps no points this old' in line
    assert "points beyond retention policy" in line
    assert queue.pending() == []
    filed = sorted(queue.rejected_dir.glob("*.jsonl"))
    rows = [json.loads(row) for path in filed for row in path.read_text().splitlines()]
    assert sorted(row["line"] for row in rows) == sorted(lines)
    assert all("keeps no points this old" in row["error"] for row in rows)
    assert main(["flush", *site]) == 0  # nothing queued again, nothing sent again
    assert sorted(queue.rejected_dir.glob("*.jsonl")) == filed and queue.pending() == []
    assert not influxdb1.series(f'SELECT * FROM "{POLICY}"."darshan_job"', db="short_rp")
