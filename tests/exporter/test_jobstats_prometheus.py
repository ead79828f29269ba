"""Issue 13 with a real Prometheus 2.42 scraping the real exporter: a failing, hung lctl as
Prometheus sees it (``up``, ``lustre_jobstats_up``, the failure counter), and gzip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import servers
from tests.exporter.test_jobstats_collector import HP_OST, fake_lctl, replay
from tests.exporter.test_jobstats_integration import wait_value

pytestmark = pytest.mark.integration

TARGET = '{component="ost",target="lustrefs-OST0000",source="lctl"}'


def scrape_job(exporter: servers.ExporterProcess, interval: str, timeout: str) -> dict:
    return {
        "job_name": "hpcmon",
        "scrape_interval": interval,
        "scrape_timeout": timeout,
        "static_configs": [{"targets": [exporter.address]}],
    }


def oss(tmp_path: Path) -> Path:
    capture = tmp_path / "oss.txt"
    capture.write_text("obdfilter.lustrefs-OST0000.job_stats=\n" + HP_OST.read_text())
    return capture


@pytest.mark.parametrize("interval", ["0", "0.5"])
def test_lctl_failing_after_half_its_output(
    tmp_path: Path, prometheus_factory, interval: str
) -> None:
    capture = oss(tmp_path)
    lctl = fake_lctl(tmp_path, replay(capture))
    args = [f"--jobstats.lctl-path={lctl}", f"--jobstats.interval={interval}"]
    with servers.run_exporter(args, tmp_path) as exporter:
        prom = prometheus_factory([scrape_job(exporter, "1s", "1s")])
        wait_value(prom, f"lustre_jobstats_up{TARGET}", 1)
        wait_value(prom, 'lustre_jobstats_jobs{target="lustrefs-OST0000"}', 35)
        wait_value(prom, 'count(lustre_job_write_bytes_total{target="lustrefs-OST0000"})', 35)

        text = capture.read_text()
        half = tmp_path / "half.txt"
        half.write_text(text[: text.index("\n", len(text) // 2) + 1])
        lctl.write_text(
            lctl.read_text().replace(replay(capture), replay(half) + "\necho 'EIO' >&2; exit 5")
        )
        wait_value(prom, f"lustre_jobstats_up{TARGET}", 0)
        wait_value(prom, 'up{job="hpcmon"}', 1)  # the exporter answers; the source is down
        wait_value(
            prom, 'lustre_jobstats_source_failures_total{source="lctl",reason="exit"} > bool 0', 1
        )
        # None of the half output shows as data: the per-job series went stale.
        wait_value(
            prom, 'count(lustre_job_write_bytes_total{target="lustrefs-OST0000"}) or vector(0)', 0
        )


def test_hung_lctl_answers_within_prometheus_scrape_timeout(
    tmp_path: Path, prometheus_factory
) -> None:
    capture = oss(tmp_path)
    lctl = fake_lctl(tmp_path, replay(capture))
    args = [f"--jobstats.lctl-path={lctl}", "--jobstats.interval=0", "--jobstats.timeout=60"]
    with servers.run_exporter(args, tmp_path) as exporter:
        prom = prometheus_factory([scrape_job(exporter, "3s", "2s")])
        wait_value(prom, f"lustre_jobstats_up{TARGET}", 1)
        lctl.write_text(lctl.read_text().replace(replay(capture), "sleep 300"))
        wait_value(prom, f"lustre_jobstats_up{TARGET}", 0)
        wait_value(
            prom,
            'lustre_jobstats_source_failures_total{source="lctl",reason="timeout"} > bool 0',
            1,
        )
        wait_value(prom, 'up{job="hpcmon"}', 1)
        wait_value(prom, 'scrape_duration_seconds{job="hpcmon"} < bool 2', 1)


def test_prometheus_gets_gzip(tmp_path: Path, prometheus_factory) -> None:
    capture = oss(tmp_path)
    args = [
        "--jobstats.source=file",
        f"--jobstats.path={capture}",
        "--jobstats.interval=0.5",
        "--log.level=debug",
    ]
    with servers.run_exporter(args, tmp_path) as exporter:
        prom = prometheus_factory([scrape_job(exporter, "1s", "1s")])
        wait_value(prom, 'count(lustre_job_write_bytes_total{target="lustrefs-OST0000"})', 35)
        wait_value(prom, 'hpcmon_exporter_collector_success{collector="jobstats"}', 1)
        log = exporter.log_path.read_text()
    answers = re.findall(r"/metrics -> 200, \d+ bytes, (\S+) \(Prometheus/", log)
    assert answers and set(answers) == {"gzip"}
