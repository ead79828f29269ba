"""Benchmark of site-scale collection (issue 17), on the real engines of this machine.

1. Ingestion: a fleet of real ``hpcmon-exporter`` processes (generated Lustre 2.15 job_stats,
   counters growing every 10 s) scraped by two ``vmagent`` instances in cluster mode
   (``-promscrape.cluster.membersCount=2``) that remote-write into one ``victoria-metrics``.
   Over a measured window: samples/s written into VictoriaMetrics, CPU seconds of the two
   vmagents (and of VictoriaMetrics) per million series scraped, and bytes per sample on disk
   (data directory after a forced flush, over the samples it received).
2. One big OSS: the real exporter on ``--site.osts``-like 1,000 targets' worth of job_stats
   (``BIG_TARGETS`` x ``BIG_JOBS``), background sampling (its default), scraped back to back
   with gzip as Prometheus does: p50/p99 of the whole scrape, series, and the exporter's RSS.
3. The series budget's own figure for the same shapes, next to the measured series.

Figures go to bench-results/site_scale.json. Usage: .venv/bin/python benchmarks/bench_site_scale.py
[--quick]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import median_seconds  # noqa: E402

from devtools.servers import run_exporter, run_victoria_metrics, run_vmagent  # noqa: E402
from tests.exporter.jobstats_synth import write_server  # noqa: E402
from tests.fleet import run_exporters  # noqa: E402

RESULTS = REPO / "bench-results" / "site_scale.json"
FLEET = 20  # exporters (one OSS each)
FLEET_OSTS = 4  # targets per OSS
FLEET_JOBS = 150  # jobs per target
SCRAPE_INTERVAL = 10  # seconds, the same as the exporters' sampling and the counters' step
WINDOW = 60.0  # seconds measured once every target has been scraped
BIG_TARGETS = 1000
BIG_JOBS = 20
BIG_SCRAPES = 30
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric_sum(url: str, name: str) -> float:
    """Sum of a metric's samples in a /metrics page (VictoriaMetrics' own)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Growing(threading.Thread):
    """Rewrites every server's job_stats with the next step every SCRAPE_INTERVAL s."""

    def __init__(self, folders: list[Path]) -> None:
        super().__init__(daemon=True)
        self.folders = folders
        self.halt = threading.Event()

    def run(self) -> None:
        step = 1
        while not self.halt.wait(SCRAPE_INTERVAL):
            for n, folder in enumerate(self.folders):
                write_server(folder, FLEET_OSTS, 0, FLEET_JOBS, step, fs=f"oss{n:02d}")
            step += 1


def budget(*flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "hpcmon.exporter", "--print-series-budget", "--site.json", *flags],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    return json.loads(out)


def ingestion(workdir: Path, fleet: int, window: float) -> dict:
    folders = [workdir / f"oss{n}" for n in range(fleet)]
    for n, folder in enumerate(folders):  # distinct target names per server
        write_server(folder, FLEET_OSTS, 0, FLEET_JOBS, fs=f"oss{n:02d}")
    args = [
        ["--jobstats.source=file", f"--jobstats.path={folder / '*.txt'}", "--log.level=warn"]
        for folder in folders
    ]
    grower = Growing(folders)
    with run_exporters(args, workdir) as exporters, run_victoria_metrics() as vm:
        targets = [e.address for e in exporters]
        scrape = [{"job_name": "hpcmon-jobstats", "static_configs": [{"targets": targets}]}]
        cluster = ["-promscrape.cluster.membersCount=2"]
        write = f"{vm.url}/api/v1/write"
        interval = f"{SCRAPE_INTERVAL}s"
        member = "-promscrape.cluster.memberNum="
        with (
            run_vmagent(scrape, write, [*cluster, member + "0"], interval) as a0,
            run_vmagent(scrape, write, [*cluster, member + "1"], interval) as a1,
        ):
            grower.start()
            agents = [a0, a1]
            deadline = time.monotonic() + 120
            while sum(metric_sum(a.url, "vm_promscrape_targets") for a in agents) < fleet:
                assert time.monotonic() < deadline, "targets never discovered"
                time.sleep(1)
            time.sleep(2 * SCRAPE_INTERVAL)  # every target scraped at least once
            rows0 = metric_sum(vm.url, "vm_rows_inserted_total")
            scraped0 = sum(metric_sum(a.url, "vm_promscrape_scraped_samples_sum") for a in agents)
            agent_cpu0 = sum(cpu_seconds(a.proc.pid) for a in agents)
            vm_cpu0 = cpu_seconds(vm.proc.pid)
            started = time.monotonic()
            time.sleep(window)
            elapsed = time.monotonic() - started
            rows = metric_sum(vm.url, "vm_rows_inserted_total") - rows0
            scraped = (
                sum(metric_sum(a.url, "vm_promscrape_scraped_samples_sum") for a in agents)
                - scraped0
            )
            agent_cpu = sum(cpu_seconds(a.proc.pid) for a in agents) - agent_cpu0
            vm_cpu = cpu_seconds(vm.proc.pid) - vm_cpu0
            agent_rss = sum(status_mb(a.proc.pid, "VmRSS") for a in agents)
            vm_rss = status_mb(vm.proc.pid, "VmRSS")
            grower.halt.set()
            vm.flush()
            time.sleep(2)
            total_rows = metric_sum(vm.url, "vm_rows_inserted_total")
            disk = dir_bytes(vm.data_path)
            samples_disk = dir_bytes(vm.data_path / "data")  # without the series index
            series = metric_sum(vm.url, "vm_new_timeseries_created_total")
    per_exporter = budget(
        "--site.oss=1", f"--site.osts={FLEET_OSTS}", f"--site.jobs-per-target={FLEET_JOBS}",
        "--site.source=file",
    )["oss_exporter"]  # fmt: skip
    return {
        "exporters": fleet,
        "targets_per_exporter": FLEET_OSTS,
        "jobs_per_target": FLEET_JOBS,
        "scrape_interval_s": SCRAPE_INTERVAL,
        "window_s": round(elapsed, 1),
        "series_in_store": int(series),
        "series_per_scrape_budget": per_exporter * fleet,
        "samples_scraped": int(scraped),
        "samples_written_per_s": round(rows / elapsed),
        "vmagent_cpu_s_per_million_samples": round(agent_cpu / (scraped / 1e6), 3),
        "victoria_metrics_cpu_s_per_million_samples": round(vm_cpu / (rows / 1e6), 3),
        "vmagent_rss_mb_total": round(agent_rss),
        "victoria_metrics_rss_mb": round(vm_rss),
        "disk_bytes": disk,
        "rows_total": int(total_rows),
        "bytes_per_sample_on_disk": round(disk / total_rows, 3),
        "bytes_per_sample_without_index": round(samples_disk / total_rows, 3),
    }


def big_oss(workdir: Path, scrapes: int, targets: int, jobs: int) -> dict:
    folder = workdir / "big"
    started = time.perf_counter()
    write_server(folder, targets, 0, jobs)
    generated = time.perf_counter() - started
    args = [
        "--jobstats.source=file", f"--jobstats.path={folder / '*.txt'}", "--log.level=warn",
        "--jobstats.interval=10",
    ]  # fmt: skip
    with run_exporter(args, workdir, timeout=120) as exporter:
        connection = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=600)

        def scrape() -> int:
            connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            size = 0
            while chunk := response.read(1 << 20):
                size += len(chunk)
            return size

        deadline = time.monotonic() + 600
        while True:  # the first background sample
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read()
            if response.status == 200 and b"lustre_job_read_bytes_total" in body:
                break
            assert time.monotonic() < deadline, "no sample from the big OSS"
            time.sleep(1)
        series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
        marker = b"\nlustre_jobstats_scrape_duration_seconds "
        at = body.index(marker) + len(marker)
        sample_seconds = float(body[at : body.index(b"\n", at)])
        plain = len(body)
        del body
        times: list[float] = []
        sizes: list[int] = []

        def timed_scrape() -> None:
            began = time.perf_counter()
            sizes.append(scrape())
            times.append(time.perf_counter() - began)

        median = median_seconds(timed_scrape, scrapes)

        def plain_scrape() -> None:  # a scraper without gzip: decompressed on the way out
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            while response.read(1 << 20):
                pass

        plain_median = median_seconds(plain_scrape, max(3, scrapes // 6))
        pid = exporter.proc.pid
        children = subprocess.run(
            ["pgrep", "-P", str(pid)], capture_output=True, text=True
        ).stdout.split()
        peak = status_mb(pid, "VmHWM")
        sampler_peak = max((status_mb(int(c), "VmHWM") for c in children), default=0.0)
        connection.close()
    times.sort()
    return {
        "targets": targets,
        "jobs_per_target": jobs,
        "job_entries": targets * jobs,
        "generate_s": round(generated, 1),
        "series": series,
        "series_budget": budget(
            "--site.oss=1",
            f"--site.osts={targets}",
            f"--site.jobs-per-target={jobs}",
            "--site.source=file",
        )["oss_exporter"],  # fmt: skip
        "exposition_bytes": plain,
        "gzip_bytes": statistics.median(sizes),
        "scrapes": scrapes,
        "scrape_p50_s": round(median, 3),
        "scrape_p99_s": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
        "scrape_max_s": round(times[-1], 3),
        "plain_scrape_p50_s": round(plain_median, 3),
        "background_sample_s": round(sample_seconds, 2),
        "exporter_peak_rss_mb": round(peak),
        "sampler_peak_rss_mb": round(sampler_peak),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        workdir = Path(tmp)
        results["ingestion"] = ingestion(workdir, 4 if quick else FLEET, 20 if quick else WINDOW)
        print(json.dumps(results["ingestion"], indent=2), flush=True)
        results["big_oss"] = big_oss(
            workdir, 5 if quick else BIG_SCRAPES, 100 if quick else BIG_TARGETS, BIG_JOBS
        )
        print(json.dumps(results["big_oss"], indent=2), flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
