"""job_diagnosis: the real hook writes, for every bundled Darshan log, the insights (id and
level) and evidence the report gives from the same log, and an I/O score, into InfluxDB 1.6.7;
bounded series, one type per field, idempotent; hostile input never costs the other points."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan, read_text
from hpcmon.post_job.darshan.diagnosis import JOB_TAG, MEASUREMENT
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.points import to_lines
from hpcmon.report import api
from hpcmon.report.insights import HIGH, INFO, WARN, Insight
from hpcmon.report.score import insight_score, job_score
from tests.post_job.darshan_helpers import (
    E3SM,
    GZIPPED_PAIRS,
    LOGS,
    MPI_IO_TEST,
    PAIRS,
    SKEW,
    TEXTS,
    log_path,
    text_path,
)

ROOT = Path(__file__).resolve().parents[2]
ALL_LOGS = sorted(LOGS.glob("*.darshan"))
DATABASE = "diagnosis"
SCORED = (HIGH, WARN)


def job_id(log: Path) -> str:
    return str(100 + ALL_LOGS.index(log))


def report_insights(logs: list[Path]) -> list[dict]:
    """The high and warn insights of hpcmon-report's JSON built from the logs alone."""
    job = api.collect("1", None, api.Sources(darshan_logs=tuple(logs)))
    return [i for i in api.build(job)["insights"] if i["level"] in SCORED]


def diagnosis(output: SourceOutput) -> dict[str, dict]:
    """insight tag -> fields of the job_diagnosis points."""
    points = [p for p in output.points if p.measurement == MEASUREMENT]
    by_tag = {p.tags["insight"]: p.fields for p in points}
    assert len(by_tag) == len(points)
    return by_tag


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    """Every bundled log written as its own job by the real hook command."""
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    for log in ALL_LOGS:
        run_hook(influxdb1.url, log, spool)
    return influxdb1


def run_hook(url: str, log: Path, spool: Path) -> None:
    """The real hook command writes the log as job ``job_id(log)`` into InfluxDB."""
    command = [
        sys.executable, "-m", "hpcmon.post_job", "--job-id", job_id(log), "--cluster", "c1",
        "--user", "alice", "--darshan", str(log), "--influx.v1-url", url,
        "--influx.database", DATABASE, "--spool-dir", str(spool),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{log.name}: {run.stderr}"


def stored(influx, job: str) -> dict[str, dict]:
    """insight tag -> {field: value} of the job's job_diagnosis points in InfluxDB."""
    series = influx.series(
        f'SELECT * FROM "{MEASUREMENT}" WHERE "jobid" = \'{job}\' GROUP BY "insight"',
        db=DATABASE,
    )
    out = {}
    for s in series:
        ((_, *values),) = s["values"]  # one point per series: time, then the columns
        out[s["tags"]["insight"]] = {
            c: v for c, v in zip(s["columns"][1:], values, strict=True) if v is not None
        }
    return out


@pytest.mark.integration
@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.stem[:40])
def test_points_in_influxdb_are_the_reports_insights_for_the_same_log(written, log) -> None:
    rows = stored(written, job_id(log))
    job = rows.pop(JOB_TAG)
    expected = report_insights([log])
    assert {(k, v["level"]) for k, v in rows.items()} == {(i["id"], i["level"]) for i in expected}
    for insight in expected:
        fields = rows[insight["id"]]
        assert fields["title"] == insight["title"]
        assert fields.get("drishti") == insight["drishti_code"]
        for name, value in insight["evidence"].items():
            if isinstance(value, int | float):
                assert fields[name] == pytest.approx(value, rel=1e-9, abs=0), name
        assert 10 <= fields["score"] <= 50
    scores = [f["score"] for f in rows.values()]
    assert 0 <= job["score"] < 100
    assert (job["score"] == 0) == (not rows)
    assert job["score"] >= max(scores, default=0)
    assert job["high"] == sum(f["level"] == HIGH for f in rows.values())
    assert job["warn"] == sum(f["level"] == WARN for f in rows.values())
    assert job["level"] == (HIGH if job["high"] else WARN if job["warn"] else "none")
    named = job.get("top_insights", "").split(", ") if rows else []
    assert set(named) <= set(rows) and len(named) == min(3, len(rows))
    if named:
        assert rows[named[0]]["score"] == max(scores)
    assert job["user"] == "alice" and job["logs"] == 1


@pytest.mark.integration
def test_series_are_one_per_insight_with_no_job_file_or_rank_tag(written) -> None:
    """job_diagnosis series: one per insight raised (and the job row) for the user and app
    (the job id is a field: post_job/layout.py), whatever the number of jobs."""
    series = written.series(f'SHOW SERIES FROM "{MEASUREMENT}"', db=DATABASE)[0]["values"]
    keys = [row[0] for row in series]
    insights = {dict(part.split("=", 1) for part in key.split(",")[1:])["insight"] for key in keys}
    raised = {finding["id"] for log in ALL_LOGS for finding in report_insights([log])}
    assert insights == raised | {"job"}
    for key in keys:
        tags = dict(part.split("=", 1) for part in key.split(",")[1:])
        assert set(tags) == {"cluster", "app", "user", "insight"}
    for log in ALL_LOGS:  # each job's own rows: one per insight, plus the job row
        job = job_id(log)
        rows = written.series(
            f'SELECT "score" FROM "{MEASUREMENT}" WHERE "jobid" = \'{job}\' GROUP BY "insight"',
            db=DATABASE,
        )
        assert len(rows) == 1 + len(report_insights([log])), log.name


@pytest.mark.integration
def test_one_type_per_field_and_reruns_write_the_same_points(written, tmp_path) -> None:
    keys = written.series(f'SHOW FIELD KEYS FROM "{MEASUREMENT}"', db=DATABASE)[0]["values"]
    names = [name for name, _ in keys]
    assert len(names) == len(set(names)), keys  # a name with two types would be listed twice
    assert {kind for name, kind in keys if name in ("score", "share", "nprocs")} == {"float"}
    count = f'SELECT count("score") FROM "{MEASUREMENT}" WHERE "jobid" = \'{{}}\''
    log = log_path(SKEW)
    before = written.series(count.format(job_id(log)), db=DATABASE)
    run_hook(written.url, log, tmp_path)
    assert written.series(count.format(job_id(log)), db=DATABASE) == before
    first = collect_darshan([log], [], JobContext("7", "c1", "alice"))
    again = collect_darshan([log], [], JobContext("7", "c1", "alice"))
    assert to_lines(first.points) == to_lines(again.points)


def test_field_types_are_one_per_name_over_every_bundled_log() -> None:
    """InfluxDB refuses a field whose type differs from the shard's: every number a float."""
    types: dict[str, set[type]] = {}
    output = collect_darshan(ALL_LOGS, [], JobContext("8"))
    assert output.errors == []
    for log in ALL_LOGS:
        output.extend(collect_darshan([log], [], JobContext("8")))
    for point in output.points:
        if point.measurement == MEASUREMENT:
            for name, value in point.fields.items():
                types.setdefault(name, set()).add(type(value))
    assert types and all(len(kinds) == 1 for kinds in types.values()), types
    assert all(kinds <= {float, str} for kinds in types.values())


def test_all_logs_of_a_job_give_one_diagnosis_stamped_at_the_first_start() -> None:
    logs = [log_path(MPI_IO_TEST), log_path(SKEW)]
    output = collect_darshan(logs, [], JobContext("9", "c1"))
    rows = diagnosis(output)
    job = rows.pop(JOB_TAG)
    assert {(k, v["level"]) for k, v in rows.items()} == {
        (i["id"], i["level"]) for i in report_insights(logs)
    }
    assert job["logs"] == 2
    starts = []
    for point in output.points:
        if point.measurement == "darshan_job":
            assert point.time_ns is not None
            starts.append(point.time_ns)
    assert {p.time_ns for p in output.points if p.measurement == MEASUREMENT} == {min(starts)}


@pytest.mark.parametrize("stem", PAIRS + GZIPPED_PAIRS)
def test_darshan_parser_text_gives_the_diagnosis_of_the_binary_log(stem) -> None:
    text = text_path(stem) if stem in PAIRS else TEXTS / f"{stem}.txt.gz"
    binary = diagnosis(collect_darshan([log_path(stem)], [], JobContext("1")))
    parsed = diagnosis(collect_darshan([], [text], JobContext("1")))
    assert {k: v["level"] for k, v in parsed.items()} == {k: v["level"] for k, v in binary.items()}
    for tag, fields in binary.items():
        assert parsed[tag]["score"] == pytest.approx(fields["score"], abs=0.01)


def test_damaged_logs_cost_only_themselves(tmp_path) -> None:
    good = log_path(SKEW)
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(log_path(MPI_IO_TEST).read_bytes()[:1500])
    garbage = tmp_path / "garbage.darshan"
    garbage.write_bytes(bytes(range(256)) * 8)
    output = collect_darshan([cut, good, garbage], [], JobContext("3"))
    joined = "\n".join(output.errors)
    assert str(cut) in joined and str(garbage) in joined and "diagnos" not in joined
    alone = collect_darshan([good], [], JobContext("3"))
    # darshan-util reads what it can of the cut log (a header with start 0, no record) or
    # crashes on it, depending on the run: either way the good log's diagnosis stands
    damaged, clean = diagnosis(output), diagnosis(alone)
    assert {k: (v["level"], v["score"]) for k, v in damaged.items()} == {
        k: (v["level"], v["score"]) for k, v in clean.items()
    }
    times = {p.time_ns for p in output.points if p.measurement == MEASUREMENT}
    assert times == {p.time_ns for p in alone.points if p.measurement == MEASUREMENT}
    assert times == {read_text(text_path(SKEW)).job.start_time * 10**9}


def test_a_failing_diagnosis_is_one_line_and_keeps_the_log_points(monkeypatch) -> None:
    """A rule that raises (a bug, or an input no check foresaw): the job's other points stay,
    one line names the job, no traceback."""
    from hpcmon.post_job.darshan import diagnosis as module

    def broken(job):
        raise ValueError("a rule failed")

    monkeypatch.setattr(module, "diagnose", broken)
    output = collect_darshan([log_path(SKEW)], [], JobContext("4"))
    assert output.points and not any(p.measurement == MEASUREMENT for p in output.points)
    (error,) = output.errors
    assert error.startswith("job 4: unexpected error while diagnosing its logs (")
    assert "\n" not in error


_HEADER = (
    "# darshan log version: 3.41\n# exe: /bin/app\n# uid: 1000\n# jobid: 1\n"
    "# start_time: 1600000000\n# end_time: 1600000100\n# nprocs: 4\n# run time: 100.0\n"
)
_COUNTERS = [
    "POSIX_READS", "POSIX_WRITES", "POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN", "POSIX_SEQ_READS",
    "POSIX_SIZE_READ_0_100", "POSIX_SIZE_WRITE_0_100", "POSIX_FILE_NOT_ALIGNED",
    "POSIX_MEM_NOT_ALIGNED", "POSIX_MAX_BYTE_READ", "POSIX_F_READ_TIME", "POSIX_F_META_TIME",
    "POSIX_F_SLOWEST_RANK_TIME", "POSIX_FASTEST_RANK_BYTES", "STDIO_BYTES_READ",
]  # fmt: skip
_VALUES = st.one_of(
    st.integers(-(2**63), 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "-inf", "1e400", "-0"]),
)
_LINE = st.builds(
    lambda rank, rid, counter, value: (
        f"{counter.split('_')[0]}\t{rank}\t{rid}\t{counter}\t{value}\t/f{rid}\t/\text4"
    ),
    st.integers(-1, 5),
    st.integers(1, 4),
    st.sampled_from(_COUNTERS),
    _VALUES,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_LINE, min_size=1, max_size=40))
def test_hostile_counter_values_still_give_a_diagnosis(tmp_path, lines) -> None:
    path = tmp_path / "hostile.txt"
    path.write_text(_HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    output = collect_darshan([], [path], JobContext("5"))
    assert not [e for e in output.errors if "diagnos" in e]
    rows = diagnosis(output)
    assert 0 <= rows[JOB_TAG]["score"] < 100
    assert all(math.isfinite(f["score"]) for f in rows.values())
    assert all(p.to_line() for p in output.points if p.measurement == MEASUREMENT)


def test_the_hook_never_imports_matplotlib() -> None:
    """The post-job extra has no matplotlib: the diagnosis runs with it unimportable."""
    code = (
        "import runpy, sys\n"
        "sys.modules['matplotlib'] = None\n"  # any import of it raises ImportError
        f"sys.argv = ['hpcmon-post-job', '--job-id', '6', '--darshan', {str(log_path(SKEW))!r}]\n"
        "runpy.run_module('hpcmon.post_job', run_name='__main__')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    diagnosis = [line for line in run.stdout.splitlines() if line.startswith("job_diagnosis,")]
    assert any(",insight=job " in line and 'jobid="6"' in line for line in diagnosis)


# ---- the score: bounded, order-free, monotone --------------------------------------------

_INSIGHT = st.builds(
    lambda level, share, key: Insight("x", level, "t", {key: share} if key else {}, "r"),
    st.sampled_from([HIGH, WARN, INFO]),
    st.one_of(st.floats(-1, 2), st.just(float("nan"))),
    st.sampled_from(["share", "max_spread", ""]),
)


@given(st.lists(_INSIGHT, max_size=20), _INSIGHT, st.randoms(use_true_random=False))
def test_job_score_is_bounded_order_free_and_grows_with_each_insight(insights, extra, rng):
    score = job_score(insights)
    assert 0 <= score < 100
    shuffled = list(insights)
    rng.shuffle(shuffled)
    assert job_score(shuffled) == score
    assert job_score([*insights, extra]) >= score
    assert score >= max((insight_score(i) for i in insights), default=0)
    assert (score == 0) == all(i.level == INFO for i in insights)
    for insight in insights:
        band = {HIGH: (25, 50), WARN: (10, 20), INFO: (0, 0)}[insight.level]
        assert band[0] <= insight_score(insight) <= band[1]


def test_the_score_follows_level_then_extent() -> None:
    def make(level: str, share: float) -> Insight:
        return Insight("x", level, "t", {"share": share}, "r")

    assert insight_score(make(HIGH, 1.0)) == 50 and insight_score(make(HIGH, 0.0)) == 25
    assert insight_score(make(WARN, 1.0)) == 20 and insight_score(make(WARN, 0.5)) == 15
    assert job_score([make(HIGH, 1.0), make(HIGH, 1.0)]) == 75
    assert job_score([make(HIGH, 1.0)] * 3) == 87.5
    assert job_score([Insight("x", HIGH, "t", {"files": 3}, "r")]) == 50  # no share: all of it
    assert np.isclose(job_score([make(HIGH, 0.2), make(WARN, 0.4)]), 100 * (1 - 0.7 * 0.86))


def test_the_finished_jobs_dashboard_reads_what_the_hook_writes() -> None:
    from hpcmon.dashboards import jobs as dashboard

    assert (dashboard.MEASUREMENT, dashboard.JOB_ROW) == (MEASUREMENT, JOB_TAG)
    job = diagnosis(collect_darshan([log_path(SKEW)], [], JobContext("2", "c1", "bob")))[JOB_TAG]
    # user is the tag every point of the job carries (post_job/app.py), not a field
    assert {name for name, _ in dashboard.COLUMNS} - {"user"} <= set(job)


def test_the_hook_evaluates_every_darshan_rule_and_only_those() -> None:
    """docs/post-job-data.md: at most 1 + 18 series per job (the rules that need Prometheus or
    VizTracer cannot raise in the hook)."""
    from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_log
    from hpcmon.report.darshan_log import darshan_from_log_objects
    from hpcmon.report.insights import RULES, diagnose
    from hpcmon.report.model import JobData

    data = darshan_from_log_objects([read_darshan_log(log_path(E3SM))])
    _, skipped = diagnose(JobData("1", darshan=data))
    outside = {"target_dominated", "io_phase_target_spike", "energy_waiting_io", "python_hotspot"}
    assert {s.id for s in skipped} == outside
    assert len(RULES) - len(outside) == 18


@pytest.mark.parametrize("stem", [E3SM, "runtime_and_dxt_heatmaps_diagonal_write_only"])
def test_without_prometheus_no_rule_reads_the_heatmap_bins_the_diagnosis_skips(stem) -> None:
    """diagnosis_points does not read the darshan_heatmap_bin points back (most of a small
    log's points): that is only right while every rule that reads heatmaps needs Prometheus
    data, which the hook never has. Reading the heatmaps here would fail the test."""
    from hpcmon.report.darshan_log import darshan_from_logs
    from hpcmon.report.insights import diagnose
    from hpcmon.report.model import JobData

    data, _ = darshan_from_logs([log_path(stem)])
    assert data is not None and data.heatmaps  # the log has heatmap bins

    def refuse():
        raise AssertionError("a rule read the heatmaps without Prometheus data")

    data.__dict__.pop("heatmaps", None)  # made on first read (a cached property)
    data.read_heatmaps = refuse
    insights, _ = diagnose(JobData("1", darshan=data))
    assert insights  # the rules ran
