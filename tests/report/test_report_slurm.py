"""Slurm's view in hpcmon-report: the epilog hook's slurm_job points (built by
``slurm_job_point``, written through the project's own line protocol into a real InfluxDB
1.6.7) come first in text, HTML and JSON and equal what was written; a job with only Slurm's
point is a report; a job without one has none; the user's job name is escaped in HTML."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.slurm import SlurmJob
from hpcmon.post_job.slurm_points import slurm_job_point
from hpcmon.report.api import build, render
from hpcmon.report.model import JobData
from hpcmon.report.records import rows_from_points, slurm_from_rows
from hpcmon.report.slurm import NO_IO_LOGS, exit_status
from tests.report.field_values import field_values
from tests.report.report_database import (
    DATABASE,
    from_database,
    hook_writes,
    report,
    stored_slurm_points,
    stored_text,
    write_points,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "src" / "hpcmon" / "report" / "schema.json").read_text())
LOG = ROOT / "tests/data/darshan/logs/mpi-io-test-x86_64-3.4.6.darshan"
START = 1_754_000_000.0
HOSTILE = "a \"name\" 'x' <script>alert(1)</script> & line\nbreak \\ end\\"
SUCCEEDED = SlurmJob(
    "7001", "alice", "1000", START, START + 3723.5, "ior run", partition="compute",
    nodelist="n[01-04]", num_nodes=4, account="proj1", exit_code=0, exit_signal=0,
)  # fmt: skip
EXITED = replace(SUCCEEDED, job_id="7002", job_name="exits 3", exit_code=3, num_nodes=1)
KILLED = replace(SUCCEEDED, job_id="7003", job_name=HOSTILE, exit_code=0, exit_signal=9)
NO_SLURM = "7004"  # the hook's Darshan points only (older data, a by-hand run)


@pytest.fixture(scope="module")
def written(influxdb1, tmp_path_factory):
    """7001: Darshan log and Slurm's point; 7002, 7003: Slurm's point only; 7004: the log."""
    influxdb1.create_database(DATABASE)
    spool = tmp_path_factory.mktemp("spool")
    for job in (SUCCEEDED.job_id, NO_SLURM):
        hook_writes(influxdb1, LOG, job, spool)
    jobs = (SUCCEEDED, EXITED, KILLED)
    write_points(influxdb1, [point for job in jobs for point in stored_slurm_points(job)])
    return influxdb1


def expected(job: SlurmJob, status: str) -> dict:
    return {
        "job_id": job.job_id,
        "job_name": stored_text(job.job_name or ""),
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "nodelist": job.nodelist,
        "num_nodes": job.num_nodes,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "exit_status": status,
        "failed": status != "0 (success)",
        "start": job.start,
        "end": job.end,
        "elapsed_seconds": 3723.5,
    }


CASES = [
    (SUCCEEDED, "0 (success)"),
    (EXITED, "exit 3"),
    (KILLED, "killed by signal 9 (SIGKILL)"),
]


@pytest.mark.parametrize(("job", "status"), CASES, ids=lambda c: getattr(c, "job_id", ""))
def test_slurm_view_comes_first_and_is_what_was_written(written, tmp_path, job, status) -> None:
    source = from_database(written)
    document = report(job.job_id, tmp_path / "r.json", *source)
    jsonschema.validate(document, SCHEMA)
    assert document["slurm"] == expected(job, status)
    assert list(document).index("slurm") < list(document).index("summary")
    text = report(job.job_id, tmp_path / "r.txt", *source, fmt="text")
    assert text.index("== Slurm ==") < text.index("Could not see:") < text.index("== Summary ==")
    for line in (
        f"  {'Exit status':<28} {status}",
        f"  {'Nodes':<28} n[01-04]",
        f"  {'Partition':<28} compute",
        f"  {'Start':<28} 2025-07-31 22:13:20 UTC",
        f"  {'Elapsed':<28} 1:02:04 (3,724 s)",
    ):
        assert line + "\n" in text
    page = report(job.job_id, tmp_path / "r.html", *source, fmt="html")
    assert page.index("<h2>Slurm</h2>") < page.index('class="missing"') < page.index("Summary")
    assert f"<th>Exit status</th><td>{status}</td>" in page
    assert (NO_IO_LOGS in text) is (job is not SUCCEEDED)


def test_a_job_with_only_slurm_s_point_is_a_report(written, tmp_path) -> None:
    """No Darshan, Recorder, VizTracer or GEOPM point: the report says so, and its window
    (for Prometheus and the drill-down link) is Slurm's start to end."""
    document = report(EXITED.job_id, tmp_path / "r.json", *from_database(written))
    assert document["sources"] == {
        "darshan": None, "darshan_logs": 0, "prometheus": False, "geopm": False,
        "functions": False,
    }  # fmt: skip
    assert set(document["summary"].values()) == {None}
    assert document["window"] == {"start": EXITED.start, "end": EXITED.end}
    assert not any(line.startswith("Slurm:") for line in document["missing"])
    text = report(EXITED.job_id, tmp_path / "r.txt", *from_database(written), fmt="text")
    assert f"  {NO_IO_LOGS}\n" in text
    assert f"<p>{html.escape(NO_IO_LOGS)}</p>" in report(
        EXITED.job_id, tmp_path / "r.html", *from_database(written), fmt="html"
    )


def test_a_job_without_slurm_s_point_has_no_slurm_section(written, tmp_path) -> None:
    source = from_database(written)
    document = report(NO_SLURM, tmp_path / "r.json", *source)
    jsonschema.validate(document, SCHEMA)
    assert document["slurm"] is None and document["sources"]["darshan"] == "InfluxDB points"
    assert any(line.startswith("Slurm: no slurm_job point") for line in document["missing"])
    assert "== Slurm ==" not in report(NO_SLURM, tmp_path / "r.txt", *source, fmt="text")
    assert "<h2>Slurm</h2>" not in report(NO_SLURM, tmp_path / "r.html", *source, fmt="html")


def test_a_hostile_job_name_is_escaped_in_html_and_intact_in_json(written, tmp_path) -> None:
    source = from_database(written)
    document = report(KILLED.job_id, tmp_path / "r.json", *source)
    assert document["slurm"]["job_name"] == stored_text(HOSTILE)  # read back as stored
    page = report(KILLED.job_id, tmp_path / "r.html", *source, fmt="html")
    assert "<script>" not in page and "</script>" not in page
    assert f"<th>Job name</th><td>{html.escape(stored_text(HOSTILE))}</td>" in page
    text = report(KILLED.job_id, tmp_path / "r.txt", *source, fmt="text")
    assert f"  {'Job name':<28} {stored_text(HOSTILE)}\n" in text


@pytest.mark.parametrize(
    ("code", "signal", "words"),
    [
        (0, 0, "0 (success)"),
        (3, 0, "exit 3"),
        (0, 9, "killed by signal 9 (SIGKILL)"),
        (137, 9, "killed by signal 9 (SIGKILL), exit 137"),
        (None, 64, "killed by signal 64"),
        (0, None, "0 (success)"),
        (None, 0, "no signal (exit code unknown)"),
        (None, None, None),
    ],
)
def test_exit_status_in_words(code, signal, words) -> None:
    assert exit_status(code, signal) == words


def _report(job: JobData) -> tuple[dict, str, str]:
    document = json.loads(render(job, build(job), "json"))
    jsonschema.validate(document, SCHEMA)
    return document, render(job, build(job), "text"), render(job, build(job), "html")


_text = st.text(min_size=1, max_size=40)
_maybe = st.none() | st.integers(0, 255)


@settings(deadline=None)  # three renderings of a report: slow on a loaded machine
@given(
    name=_text,
    partition=st.none() | _text,
    nodes=st.none() | st.integers(1, 100_000),
    code=_maybe,
    signal=_maybe,
    start=st.none() | st.floats(1.0, 4e9),
    elapsed=st.floats(0.0, 1e7),
)
def test_slurm_point_round_trips_into_the_report(
    name, partition, nodes, code, signal, start, elapsed
) -> None:
    """Whatever Slurm told, the report's ``slurm`` is exactly the point's values, the text
    keeps it on one line per row and the HTML holds no tag of the user's."""
    job = replace(
        SUCCEEDED, job_name=name, partition=partition, num_nodes=nodes, exit_code=code,
        exit_signal=signal, start=start, end=None if start is None else start + elapsed,
    )  # fmt: skip
    point = slurm_job_point(job, JobContext(job.job_id, "c", job.user), now=START)
    view = slurm_from_rows(rows_from_points([point]))
    document, text, page = _report(JobData(job.job_id, "c", slurm=view))
    slurm = document["slurm"]
    told = (name, partition, nodes, code, signal, start, job.end)
    keys = ("job_name", "partition", "num_nodes", "exit_code", "exit_signal", "start", "end")
    assert tuple(slurm[k] for k in keys) == told
    assert slurm["failed"] == (None if code is None and signal is None else bool(code or signal))
    section = text.split("== Slurm ==\n")[1].split("\n\n")[0].splitlines()
    assert len(section) == 11  # ten rows and "no I/O logs"
    table = page.split("<h2>Slurm</h2>")[1].split("</table>")[0]
    assert "<" not in re.sub(r"</?(table|tr|th|td)>", "", table)


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(list(expected(SUCCEEDED, "").keys())), field_values(20)))
def test_hostile_slurm_rows_still_give_a_valid_report(row) -> None:
    """A slurm_job point written by anyone: every field of any type; never a crash."""
    view = slurm_from_rows({"slurm_job": [{**row, "jobid": "42", "time": 1}]})
    document, _, _ = _report(JobData("42", slurm=view))
    assert document["slurm"]["job_id"] in ("42", row.get("job_id"))
