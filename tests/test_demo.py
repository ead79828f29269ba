"""`make demo` end to end: replay -> exporter -> real Prometheus with the generated rules -> the
live view's queries and firing alerts; the generated dashboards are where the demo says. Issue
32: the storming job is a real job of the demo's Slurm, named in the alert and the top jobs,
and its epilog's report has its Darshan, Lustre and power sections."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from devtools.slurm import slurm_installed

pytestmark = pytest.mark.integration
WITH_SLURM = os.geteuid() == 0 and slurm_installed()  # as the demo decides
NAMED = ["job_name=metadata-storm", "user=nobody", "account=climate"]

ROOT = Path(__file__).resolve().parent.parent


def test_demo_shows_top_jobs_from_prometheus(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devtools.demo",
            "--duration",
            "60",
            "--refresh",
            "5",
            "--workdir",
            str(tmp_path / "demo"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    exporter = re.search(r"^exporter:\s+(http://127\.0\.0\.1:\d+/metrics)$", out, re.M)
    prometheus = re.search(r"^prometheus: (http://127\.0\.0\.1:\d+)", out, re.M)
    assert exporter and prometheus
    # Post-job part: the hook's points went into the real InfluxDB and came back by InfluxQL.
    post_job = out.split("influxdb:", 1)[0]
    assert "Post-job hook for job 4242 (exit 0)" in post_job
    counts = dict(re.findall(r"^   (\w+)\s+(\d+)$", post_job, re.M))
    assert counts["darshan_job"] == "2"  # two logs
    assert counts["recorder_trace"] == "1" and counts["viztracer_summary"] == "1"
    assert counts["geopm_totals"] == "12"  # 4 hosts x application, epoch, unmarked
    assert {f"host=mcfly{i}" for i in range(1, 5)} <= set(re.findall(r"host=mcfly\d", post_job))
    if WITH_SLURM:
        _job_43_story(out)
    else:  # the job's report, written by hpcmon-report from the database, where the demo says
        report = re.search(r"^report:\s+(\S+\.html)  \(job 4242, HTML from InfluxDB", out, re.M)
        assert report, out[:3000]
        page = Path(report.group(1)).read_text()
        assert page.startswith("<!DOCTYPE html>") and "4242" in page
        assert "<svg" in page and "Could not see" in page  # its pictures; no Prometheus asked
    # The newest view whose rate panels have data (on a loaded machine the exporter's sampler,
    # at a lower priority, can be a sample behind when the last view is drawn).
    views = out.split("(Ctrl-C to stop)")[1:]
    complete = [v for v in views[-3:] if "(no data yet" not in v]
    assert complete, views[-1]
    panels = re.split(r"^== .* ==$", complete[-1], flags=re.M)[1:]
    assert len(panels) == 4
    write, read, metadata, alerts = (
        [line.split() for line in p.strip().splitlines()] for p in panels
    )
    # Job ids known to be in the replayed captures, each with a positive rate.
    assert write and all(float(row[0]) > 0 for row in write)
    assert read and all(float(row[0]) > 0 for row in read)
    assert any(row[2] == "node_exporter:989:es-2-virt3-co" for row in metadata)
    # The storm job tops the metadata table and fires its alert through the generated rules,
    # both naming it as Slurm lists it.
    assert metadata[0][2] == "43"
    if WITH_SLURM:
        assert metadata[0][3:] == NAMED
        assert ["LustreJobMetadataStorm", "jobid=43", *NAMED] in alerts
    else:
        assert ["LustreJobMetadataStorm", "jobid=43"] in alerts
    dashboards = re.search(r"^dashboards: (\S+)/dashboards/\*\.json", out, re.M)
    assert dashboards
    generated = Path(dashboards.group(1))
    assert {p.name for p in (generated / "dashboards").iterdir()} == {
        "hpcmon-overview.json",
        "hpcmon-job.json",
        "hpcmon-jobs.json",
        "hpcmon-longterm.json",
    }
    # Everything the demo started was stopped: nothing of it keeps listening.
    for url in (exporter.group(1), prometheus.group(1) + "/-/ready"):
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)


def _job_43_story(out: str) -> None:
    """Job 43's alert fired naming it, the demo ended the job, and its epilog's report has the
    Darshan log, the Lustre traffic and the node's power of the job's window."""
    assert re.search(r"^story:\s+job 43's alert fired  " + " ".join(NAMED), out, re.M), out[-3000:]
    report = re.search(r"^report:\s+(\S+\.html)  \(job 43, written by its epilog", out, re.M)
    assert report, out[-3000:]
    page = Path(report.group(1)).read_text()
    assert page.startswith("<!DOCTYPE html>")
    slurm = page.split("<h2>Slurm</h2>", 1)[1].split("</table>", 1)[0]
    for shown in ("metadata-storm", "nobody", "climate"):
        assert f"<td>{shown}</td>" in slurm
    missing = (
        page.split("Could not see", 1)[1].split("</div>", 1)[0] if "Could not see" in page else ""
    )
    for source in ("Darshan", "Lustre", "power", "Prometheus"):
        assert source not in missing, missing
    impact = page.split("<h2>File system impact</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td>lustrefs-MDT0000</td>" in impact and "Alerts: LustreJobMetadataStorm" in impact
    assert "Lustre rates per target over the job window</h3><figure><svg" in impact
    assert "Power of the job&#x27;s nodes</h3><figure><svg" in impact
    darshan = page.split("(Darshan)</h2>", 1)[1].split("<h2>", 1)[0]
    assert "I/O cost per module</h3><figure><svg" in darshan


def test_demo_stops_everything_when_its_terminal_closes(tmp_path: Path) -> None:
    """SIGHUP (the terminal closed) stops the servers the demo started, not only Ctrl-C."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "devtools.demo", "--refresh", "2", "--workdir", str(tmp_path / "d")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    urls = []
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.match(r"^(?:exporter|prometheus|influxdb):\s+(http://127\.0\.0\.1:\d+)", line)
        if found:
            urls.append(found.group(1))
        if line.startswith("prometheus:"):
            break
    assert len(urls) == 3
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 0
    for url in urls:
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)


def test_demo_never_deletes_a_directory_it_did_not_create(tmp_path: Path) -> None:
    keep = tmp_path / "mine" / "thesis.tex"
    keep.parent.mkdir()
    keep.write_text("years of work")
    result = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--workdir", str(keep.parent), "--duration", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "was not created by the demo" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert keep.read_text() == "years of work"
