"""hpcmon-report end to end on real servers: the bundled job written into InfluxDB 1.6.7 by
the real post-job hook, the exporter on replayed Lustre captures (with an I/O storm of the
job) and a powercap tree scraped by Prometheus 2.42; the HTML opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from devtools.demo import POST_JOB_INPUTS
from devtools.replay import load_sections, render, write_atomically
from hpcmon.report.api import Sources, collect
from hpcmon.report.influx import InfluxSettings, read_job_rows
from hpcmon.report.insights import diagnose
from tests import servers
from tests.exporter.test_geopm_helpers import write_zone

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CAPTURE = next((ROOT / "tests/data/jobstats").glob("*public1-OST0005*lustre2.12.5.txt"))
JOB = "1731810"  # a job of that capture: the hook's points and the Lustre series share its id
WATTS = 180.0
STORM_AFTER = 0.6  # share of the window before the job's I/O storm starts


STORM_BYTES_PER_S = 1 << 30  # the job's write storm on top of the replayed growth
_JOB_WRITES = re.compile(
    rf"(- job_id:\s+{JOB}\n(?:  .*\n)*?  write_bytes:\s+\{{ samples:\s+)(\d+)(.*?sum:\s+)(\d+)"
)


def with_storm(text: str, seconds: float) -> str:
    """The capture with the job's write counters raised by a storm lasting `seconds` (4 MiB
    writes), as Lustre would count them."""
    added = int(STORM_BYTES_PER_S * max(seconds, 0.0))

    def grow(m: re.Match[str]) -> str:
        samples = int(m.group(2)) + added // (4 << 20)
        return f"{m.group(1)}{samples}{m.group(3)}{int(m.group(4)) + added}"

    return _JOB_WRITES.sub(grow, text, count=1)


class Replay(threading.Thread):
    """Rewrites the capture every 0.5 s: counters grow, the job storms after a while."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.halt = path, threading.Event()
        self.sections = load_sections([CAPTURE])
        self.started = time.time()
        self.storm_at: float | None = None

    def run(self) -> None:
        while not self.halt.wait(0.5):
            now = time.time()
            text = render(self.sections, now - self.started, now)
            if self.storm_at is not None:
                text = with_storm(text, now - self.storm_at)
            write_atomically(self.path, text)


ALERT_RULES = """
groups:
  - name: report-test
    rules:
      - alert: JobWriteStorm
        expr: lustre_job_write_bytes_per_second > 500e6
        labels: {severity: warning}
"""


class Power(threading.Thread):
    """A package zone whose energy_uj grows at WATTS."""

    def __init__(self, zone: Path) -> None:
        super().__init__(daemon=True)
        self.zone, self.halt, self.t0 = zone, threading.Event(), time.monotonic()

    def run(self) -> None:
        while not self.halt.wait(0.05):
            energy = int(1_000_000 + WATTS * 1e6 * (time.monotonic() - self.t0))
            (self.zone / ".tmp").write_text(f"{energy}\n")
            os.replace(self.zone / ".tmp", self.zone / "energy_uj")


@pytest.fixture(scope="module")
def stack(influxdb1, tmp_path_factory) -> Iterator[dict]:
    work = tmp_path_factory.mktemp("report")
    influxdb1.create_database("hpcmon")
    hook = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcmon.post_job",
            "--job-id",
            JOB,
            "--cluster",
            "test",
            *POST_JOB_INPUTS,
            "--influx.v1-url",
            influxdb1.url,
            "--influx.database",
            "hpcmon",
            "--spool-dir",
            str(work / "spool"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert hook.returncode == 0, hook.stderr
    jobstats = work / "job_stats.txt"
    replay = Replay(jobstats)
    write_atomically(jobstats, render(replay.sections, 0.0, time.time()))
    jobs = work / "jobs"
    jobs.mkdir()
    (jobs / JOB).write_text("SLURM_JOB_UID=1000\n")
    sysfs = work / "sys"
    power = Power(write_zone(sysfs, "0", "package-0", 1_000_000))
    args = [
        "--jobstats.source=file",
        f"--jobstats.path={jobstats}",
        "--jobstats.interval=0",
        "--collector.geopm",
        "--geopm.backend=powercap",
        f"--path.sysfs={sysfs}",
        "--geopm.interval=0.5",
        "--collector.jobs",
        f"--jobs.dir={jobs}",
    ]
    replay.start()
    power.start()
    rules = work / "rules.yml"
    rules.write_text(ALERT_RULES)
    try:
        with (
            servers.run_exporter(args, work) as exporter,
            servers.run_prometheus(
                [{"job_name": "hpcmon", "static_configs": [{"targets": [exporter.address]}]}],
                scrape_interval="1s",
                rule_files=[str(rules)],
            ) as prom,
        ):
            prom.wait_for(f'lustre_job_write_bytes_per_second{{jobid="{JOB}"}}', timeout=60)
            prom.wait_for("geopm_cpu_power_watts > 0", timeout=60)
            start = time.time()
            replay.storm_at = start + 24 * STORM_AFTER
            time.sleep(24)
            end = time.time()
            time.sleep(2)
            yield {"influx": influxdb1, "prom": prom, "start": start, "end": end, "work": work}
    finally:
        replay.halt.set()
        power.halt.set()


def report_cli(stack: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcmon.report",
            "--job-id",
            JOB,
            "--cluster",
            "test",
            "--influx.v1-url",
            stack["influx"].url,
            "--influx.database",
            "hpcmon",
            "--prometheus.url",
            stack["prom"].url,
            "--start",
            str(stack["start"]),
            "--end",
            str(stack["end"]),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_json_report_from_real_servers(stack: dict) -> None:
    run = report_cli(stack, "--format", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    jsonschema.validate(
        report, json.loads((ROOT / "src" / "hpcmon" / "report" / "schema.json").read_text())
    )
    assert report["schema_version"] == 1
    assert report["sources"] == {
        "darshan": "InfluxDB points",
        "darshan_logs": 2,
        "prometheus": True,
        "geopm": True,
        "functions": True,
    }
    # the job totals are what InfluxDB holds for the job (independent InfluxQL query)
    (series,) = stack["influx"].series(
        f"SELECT sum(total_bytes_written) FROM darshan_job WHERE jobid = '{JOB}'", db="hpcmon"
    )
    assert report["summary"]["bytes_written"] == series["values"][0][1]
    assert report["summary"]["ranks"] == 512
    # Lustre: the job's one target, its bytes and its share, against Prometheus itself
    (target,) = [t for t in report["file_system"]["targets"] if t["target"] == "public1-OST0005"]
    (expected,) = stack["prom"].query(
        f'sum(increase(lustre_job_write_bytes_total{{jobid="{JOB}"}}'
        f"[{round(stack['end'] - stack['start'])}s]))",
        at=stack["end"],
    )
    assert target["write_bytes"] == pytest.approx(float(expected["value"][1]), rel=1e-6)
    assert target["share"] > 0.5
    # Recorder's files as the hook stored them (the bundled trace: 2 ranks)
    assert report["recorder_files"] and all(f["ranks"] <= 2 for f in report["recorder_files"])
    (alert,) = report["file_system"]["alerts"]  # the storm fired the test's alert rule
    assert alert["alertname"] == "JobWriteStorm" and alert["jobid"] == JOB
    ids = {i["id"] for i in report["insights"]}
    assert "target_dominated" in ids
    assert "python_hotspot" in ids
    # the powercap zone draws WATTS; the exporter's per-interval power jitters around it
    assert report["summary"]["power_mean_watts"] == pytest.approx(WATTS, rel=0.1)
    assert report["summary"]["power_peak_watts"] >= report["summary"]["power_mean_watts"]
    assert report["summary"]["energy_source"] == "geopm report"
    for insight in report["insights"]:
        assert set(insight) >= {"id", "level", "title", "evidence", "recommendation"}
        assert insight["level"] in ("high", "warn", "info")


def _aligned(stack: dict, begin: float, end: float):
    """The job as the report reads it, with its Darshan heatmap moved into [begin, end)."""
    sources = Sources(
        InfluxSettings(v1_url=stack["influx"].url, database="hpcmon"),
        stack["prom"].url,
        window=(stack["start"], stack["end"]),
    )
    job = collect(JOB, "test", sources)
    assert job.darshan is not None
    heatmap = max(job.darshan.heatmaps, key=lambda h: h.read_bytes.sum() + h.write_bytes.sum())
    moved = np.ones(4) * 1e6
    job.darshan.heatmaps = [
        replace(heatmap, start=begin, width=(end - begin) / 4, read_bytes=moved, write_bytes=moved)
    ]
    return job


def test_io_phase_and_energy_rules_on_real_series(stack: dict) -> None:
    span = stack["end"] - stack["start"]
    storm = stack["start"] + span * STORM_AFTER
    during = {i.id for i in diagnose(_aligned(stack, storm + 1, stack["end"]))[0]}
    assert {"io_phase_target_spike", "energy_waiting_io"} <= during
    before = {i.id for i in diagnose(_aligned(stack, stack["start"] + 1, stack["start"] + 3))[0]}
    assert "io_phase_target_spike" not in before
    assert "energy_waiting_io" not in before


def test_target_not_dominated_before_the_storm(stack: dict) -> None:
    """Over the calm part of the window the job has its replayed share (about 16 %)."""
    storm = stack["start"] + (stack["end"] - stack["start"]) * STORM_AFTER
    sources = Sources(
        InfluxSettings(v1_url=stack["influx"].url, database="hpcmon"),
        stack["prom"].url,
        window=(stack["start"], storm - 2),
    )
    job = collect(JOB, "test", sources)
    assert job.prometheus is not None
    (target,) = [t for t in job.prometheus.targets if t.target == "public1-OST0005"]
    assert 0 < target.share < 0.5
    assert "target_dominated" not in {i.id for i in diagnose(job)[0]}


def test_v2_compatibility_query_path_reads_the_same_rows(stack: dict, monkeypatch) -> None:
    """--influx.url/org/bucket go through the 1.x-compatible /query with a token header;
    InfluxDB 1.6.7 (auth off) answers it like a 2.x bucket with its DBRP mapping would."""
    monkeypatch.setenv("INFLUX_TOKEN", "a-token")
    v1 = read_job_rows(InfluxSettings(v1_url=stack["influx"].url, database="hpcmon"), JOB)
    v2 = read_job_rows(
        InfluxSettings(v2_url=stack["influx"].url, org="o", bucket="hpcmon"), JOB, "test"
    )
    assert v1 == v2 and len(v2["darshan_record"]) > 100


def test_missing_sources_are_said(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcmon.report",
            "--job-id",
            JOB,
            "--influx.v1-url",
            f"http://127.0.0.1:{servers.free_port()}",
            "--influx.database",
            "x",
            "--prometheus.url",
            f"http://127.0.0.1:{servers.free_port()}",
            "--format",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    report = json.loads(run.stdout)
    assert any(m.startswith("post-job points:") for m in report["missing"])
    assert any("Prometheus" in m for m in report["missing"])
    assert report["insights"] == []


def chromium(page: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Debian's chromium, headless, fresh profile, console messages logged on stderr."""
    command = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={workdir / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def console_lines(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def test_html_renders_in_headless_chromium(stack: dict, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    run = report_cli(stack, "--output", str(page))
    assert run.returncode == 0, run.stderr
    text = page.read_text()
    # self-contained: nothing fetched (only in-document references), no script
    assert re.findall(r'(?:src|href)="(?!#)[^"]*"', text) == []
    assert "<link" not in text and re.findall(r"url\((?!#)", text) == []
    # I/O cost, operation counts, 2 access-size histograms (POSIX, MPI-IO), heatmap bins, bytes
    # per rank, Lustre rates, power
    assert "<script" not in text and text.count("<svg") == 8
    # the console check sees errors: a page with a failing script is caught
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><p>x</p><script>undefinedFunction();</script>")
    assert console_lines(chromium(broken, tmp_path, "--dump-dom"))
    shot = tmp_path / "shot.png"
    shown = chromium(page, tmp_path, "--window-size=1100,5600", f"--screenshot={shot}")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert console_lines(shown) == []
    assert shot.stat().st_size > 10_000
    dom = chromium(page, tmp_path, "--dump-dom")
    assert console_lines(dom) == []
    assert dom.stdout.count("<svg") == 8 and "Diagnosis" in dom.stdout
    keep = os.environ.get("HPCMON_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
