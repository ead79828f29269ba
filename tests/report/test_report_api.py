"""The report's structure, renderers, CLI and epilog entry point, on real logs and hostile rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.model import JobContext
from hpcmon.report.api import Sources, build, render, write_report
from hpcmon.report.darshan_log import darshan_from_logs
from hpcmon.report.influx import InfluxSettings
from hpcmon.report.model import JobData
from hpcmon.report.records import darshan_from_rows, functions_from_rows, rows_from_points
from tests.report.field_values import field_values

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "darshan" / "logs"
SCHEMA = json.loads((ROOT / "src" / "hpcmon" / "report" / "schema.json").read_text())
REAL = [
    LOGS / "imbalanced-io.darshan",
    LOGS / "e3sm_io_heatmap_only.darshan",
    LOGS / "empty_log.darshan",
    LOGS / "snyder_ior-DFS_id4681120-53379_5-8-15060-3270540599978592154_1.darshan",
]


def job_from_log(path: Path) -> JobData:
    data, _ = darshan_from_logs([path])
    return JobData("42", "c", darshan=data, missing=["Lustre and power: no Prometheus given"])


def job_from_points(path: Path) -> JobData:
    out = collect_darshan([path], [], JobContext(job_id="42", cluster="c"))
    return JobData("42", "c", darshan=darshan_from_rows(rows_from_points(out.points)))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem[:30])
@pytest.mark.parametrize("make", [job_from_log, job_from_points], ids=["log", "points"])
def test_json_follows_the_schema_and_text_html_render(path: Path, make) -> None:
    job = make(path)
    report = build(job)
    document = json.loads(render(job, report, "json"))
    jsonschema.validate(document, SCHEMA)
    text = render(job, report, "text")
    assert "== Diagnosis ==" in text
    page = render(job, report, "html")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    for insight in document["insights"]:
        assert insight["title"] in text and insight["id"] in page


def test_summary_numbers_are_the_logs_totals() -> None:
    job = job_from_log(LOGS / "imbalanced-io.darshan")
    summary = build(job)["summary"]
    assert job.darshan is not None
    posix, stdio = job.darshan.modules["POSIX"], job.darshan.modules["STDIO"]
    assert summary["bytes_written"] == posix.bytes_written + stdio.bytes_written
    assert summary["writes"] == posix.writes + stdio.writes
    assert summary["mean_write_size_bytes"] == pytest.approx(
        summary["bytes_written"] / summary["writes"]
    )
    assert summary["ranks"] == 496
    # both sources agree on the job totals (the hook's counted modules are POSIX + STDIO here)
    from_points = build(job_from_points(LOGS / "imbalanced-io.darshan"))["summary"]
    assert from_points["bytes_written"] == summary["bytes_written"]
    assert from_points["reads"] == summary["reads"]


_value = field_values(text_size=12)
_names = st.sampled_from(
    [
        "module",
        "rank",
        "record_id",
        "file",
        "bytes_read",
        "bytes_written",
        "avg_read_size",
        "avg_write_size",
        "read_iops",
        "small_read_ratio",
        "seq_read_ratio",
        "meta_fraction",
        "io_time",
        "na_reasons",
        "unaligned_read_ratio",
        "reuse_proxy",
        "total_bytes_read",
        "records",
        "start_time",
        "end_time",
        "nprocs",
        "runtime",
        "bin_width",
        "nbins",
        "bin",
        "read_bytes",
        "time",
        "counted_modules",
        "modules",
        "function",
        "count",
        "total_time_seconds",
        "self_time_seconds",
        "calls",
        # the job's record (issue 20)
        "log",
        "reads",
        "small_reads",
        "slowest_rank_bytes",
        "fastest_rank_time",
        "posix_reads",
        "posix_size_read_0_100",
        "posix_f_meta_time",
        "mpiio_coll_reads",
        "stdio_opens",
        "random_reads",
        "max_record_meta_time",
        "rank_write_imbalance_files",
    ]
)
_row = st.dictionaries(_names, _value, max_size=10).map(
    lambda r: {**r, "module": r.get("module") if isinstance(r.get("module"), str) else "POSIX"}
)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            m: st.lists(_row, max_size=4)
            for m in (
                "darshan_job",
                "darshan_module",
                "darshan_record",
                "darshan_heatmap",
                "darshan_heatmap_bin",
                "darshan_rank",
                "viztracer_function",
                "recorder_function",
            )
        }
    )
)
@pytest.mark.slow  # renders a report for every generated set of rows: not in `make check`
def test_hostile_rows_never_break_the_report(rows) -> None:
    job = JobData("1")
    try:
        job.darshan = darshan_from_rows(rows)
        job.functions = functions_from_rows(rows)
    except (ValueError, TypeError, OverflowError) as exc:  # pragma: no cover - reported below
        pytest.fail(f"rows made the reader raise: {exc!r}")
    report = build(job)
    jsonschema.validate(json.loads(render(job, report, "json")), SCHEMA)
    render(job, report, "text")


@settings(max_examples=15, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            m: st.lists(_row, max_size=6)
            for m in (
                "darshan_job",
                "darshan_module",
                "darshan_record",
                "darshan_heatmap",
                "darshan_heatmap_bin",
                "darshan_rank",
            )
        }
    )
)
def test_hostile_rows_still_give_a_page(rows) -> None:
    job = JobData("1", darshan=darshan_from_rows(rows))
    assert render(job, build(job), "html").endswith("</html>\n")


def test_geopm_report_gives_energy_and_the_window_without_darshan() -> None:
    from hpcmon.post_job.geopm_report import collect_geopm_report
    from hpcmon.report.api import _window
    from hpcmon.report.records import geopm_from_rows

    report = ROOT / "tests/data/geopm_report/geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report"
    out = collect_geopm_report([report], JobContext(job_id="42"))
    job = JobData("42", geopm=geopm_from_rows(rows_from_points(out.points)))
    assert job.geopm is not None and job.geopm.hosts == 4
    window = _window(job)
    assert window is not None
    start, end = window
    assert end - start == pytest.approx(job.geopm.runtime)
    summary = build(job)["summary"]
    assert summary["energy_source"] == "geopm report"
    assert summary["energy_kwh"] == pytest.approx(job.geopm.energy_joules / 3.6e6)


def test_slurm_s_times_are_the_window_of_a_job_with_a_darshan_log() -> None:
    """Issue 32: a job with Slurm's record and a Darshan log is looked up in Prometheus over
    Slurm's start to end (the whole job, on the node's clock), not the Darshan log's times (one
    application of it, stamped when the log was written); without the record, over Darshan's."""
    from hpcmon.report.api import _window
    from hpcmon.report.model import SlurmView

    log = ROOT / "tests/data/darshan/logs/mpi-io-test-x86_64-3.4.6.darshan"
    darshan = darshan_from_rows(
        rows_from_points(collect_darshan([log], [], JobContext("42")).points)
    )
    now = time.time()  # the job ran now; the log's own run was long before
    assert darshan is not None
    assert darshan.start is not None and darshan.start < now - 86400
    slurm = SlurmView("42", start=now - 75, end=now)
    assert _window(JobData("42", darshan=darshan, slurm=slurm)) == (now - 75, now)
    window = _window(JobData("42", darshan=darshan))
    assert window is not None and window[0] == darshan.start


def test_grafana_link_spans_the_window() -> None:
    job = job_from_log(LOGS / "mpi-io-test-x86_64-3.5.0.darshan")
    job.window = (1700000000.0, 1700000100.5)
    url = build(job, Sources(grafana_url="https://grafana.example/", grafana_dashboard="j"))[
        "grafana_url"
    ]
    assert url == (
        "https://grafana.example/d/j?var-jobid=42&var-cluster=c&from=1700000000000&to=1700000100500"
    )
    assert build(job)["grafana_url"] is None


def test_write_report_for_the_epilog(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "job-42.html"
    written = write_report(
        "42",
        "c",
        None,
        None,
        out,
        deadline=time.monotonic() + 60,
        darshan_logs=(LOGS / "imbalanced-io.darshan",),
    )
    assert written == out and out.read_text().startswith("<!DOCTYPE html>")
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]
    late = tmp_path / "late.json"
    with pytest.raises(TimeoutError):
        write_report("42", None, None, None, late, deadline=time.monotonic() - 1)
    assert not late.exists()


def test_unreachable_influx_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    settings_ = InfluxSettings(v1_url="http://127.0.0.1:9", database="x", timeout=2)
    out = write_report("42", None, settings_, None, tmp_path / "r.json")
    report = json.loads(out.read_text())
    assert report["missing"][0].startswith("post-job points: InfluxDB http://127.0.0.1:9")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--influx.v1-url", "http://x"], "--influx.v1-url and --influx.database go together"),
        (["--influx.url", "http://x"], "--influx.url, --influx.org and --influx.bucket"),
        (["--start", "10"], "--start and --end go together"),
        (["--start", "10", "--end", "5"], "--end must be after --start"),
        (["--start", "2024-01-01T00:00:00", "--end", "20"], "give a time zone"),
        (["--influx.tok", "secret"], "unrecognized arguments"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "hpcmon.report", "--job-id", "1", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        _json,
        st.fixed_dictionaries(
            {
                "results": st.lists(
                    st.fixed_dictionaries(
                        {
                            "series": st.lists(
                                st.fixed_dictionaries(
                                    {"name": _json, "columns": _json, "values": _json}
                                ),
                                max_size=3,
                            )
                        }
                    ),
                    max_size=2,
                )
            }
        ),
    )
)
def test_hostile_influx_answers_are_a_read_error(body) -> None:
    from hpcmon.report.influx import InfluxReadError, parse_results

    try:
        rows = parse_results(body, InfluxSettings(v1_url="http://x", database="d"))
    except InfluxReadError:
        return
    assert isinstance(rows, dict)
    darshan_from_rows(rows)  # whatever came through, the reader copes


def test_unknown_job_is_one_line_and_exit_2(influxdb1, tmp_path: Path) -> None:
    """A real InfluxDB holding another job: the unknown one gets one line, no report."""
    from hpcmon.post_job.cli import main as post_job

    influxdb1.create_database("unknown_job")
    where = ["--influx.v1-url", influxdb1.url, "--influx.database", "unknown_job"]
    assert post_job(["--job-id", "31", "--darshan", str(REAL[0]), *where]) == 0

    def report(job: str, *extra: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "hpcmon.report", "--job-id", job, *where, *extra]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)

    out = tmp_path / "r.html"
    unknown = report("999999", "--prometheus.url", "http://127.0.0.1:9", "--output", str(out))
    assert unknown.returncode == 2 and unknown.stdout == "" and not out.exists()
    assert unknown.stderr.splitlines() == [
        f"hpcmon-report: no data for job 999999 in InfluxDB {influxdb1.url} database unknown_job"
    ]
    assert report("31", "--format", "json").returncode == 0  # the job it holds: a report
    nothing = subprocess.run(
        [sys.executable, "-m", "hpcmon.report", "--job-id", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nothing.returncode == 2 and len(nothing.stderr.splitlines()) == 1
    assert "no data for job 5 in no source (give --influx.v1-url" in nothing.stderr


def test_a_recorder_time_left_out_of_the_points_is_shown_unknown_not_zero(tmp_path) -> None:
    """recorder.ts cut after rank 0's times: the points leave out every time that would sum
    rank 1's calls; the report says n/a there (a 0 s would look complete), not for the rest."""
    import struct

    from hpcmon.post_job.recorder import collect_recorder
    from hpcmon.report.records import traced_files_from_rows
    from tests.post_job.test_recorder_reader import DATA, copy_trace

    trace = copy_trace(DATA / "v3.0.0/tiny_mpi_np2_noipc_tid", tmp_path / "trace")
    data = (trace / "recorder.ts").read_bytes()
    (trace / "recorder.ts").write_bytes(data[: 16 + struct.unpack_from("<Q", data)[0]])
    out = collect_recorder([trace], JobContext("42"), per_rank_functions=True)
    rows = rows_from_points(out.points)
    job = JobData("42", functions=functions_from_rows(rows))
    job.traced_files = traced_files_from_rows(rows)
    document = json.loads(render(job, build(job), "json"))
    jsonschema.validate(document, SCHEMA)
    untimed = {
        p.tags["function"]
        for p in out.points
        if p.measurement == "recorder_rank_function" and p.tags["rank"] == "1"
    }
    functions = document["top_functions"]
    assert untimed and functions
    for function in functions:
        assert (function["total_seconds"] is None) == (function["function"] in untimed)
    times = [f["time_seconds"] for f in document["recorder_files"]]
    assert None in times and any(t is not None for t in times)
    assert "n/a" in render(job, build(job), "text")
