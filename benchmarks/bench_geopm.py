"""Benchmark: GEOPM / powercap sampling cost, sampler CPU use, scrape latency.

Targets (issue 3): sampling under 2 ms per interval for 2 packages + 8 GPUs, sampler CPU use
under 1% of a core at a 1 s interval. Measured:

- powercap: one sampler step (list zones, read energy_uj, correct counters, derive power) on a
  2-socket tree (package, core, uncore, dram zones per socket), against a naive baseline in
  the same run that re-reads every zone file at each interval (what node_exporter does);
- geopmsession: the exporter's work per row of the stand-in's CSV trace (parse, counters,
  derived power) for 2 packages + 8 GPUs (CPU/GPU energy and power, DRAM energy), and the
  stand-in child run for real at a 0.1 s period to confirm it keeps pace;
- sampler CPU use: the sampler thread at 1 s on the powercap tree, process CPU time / wall;
- scrape latency: GET /metrics on an exporter process with geopm + jobs collectors, and with
  the jobstats collector also enabled (file source on a bundled capture), medians.

    .venv/bin/python benchmarks/bench_geopm.py [--quick]

Prints a table of medians and writes bench-results/geopm.json. The machine may be shared:
figures are indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.servers import free_port  # noqa: E402
from hpcmon.exporter.cli import available_collectors  # noqa: E402
from hpcmon.exporter.geopm.geopmsession_backend import (  # noqa: E402
    GeopmsessionBackend,
    TraceParser,
    samples_from_row,
)
from hpcmon.exporter.geopm.model import Request, SampleBatch  # noqa: E402
from hpcmon.exporter.geopm.powercap import PowercapBackend  # noqa: E402
from hpcmon.exporter.geopm.sampler import CounterTracker, Sampler, readings_from_batch  # noqa: E402

RESULTS = ROOT / "bench-results" / "geopm.json"
STANDIN = ROOT / "tests" / "data" / "geopm" / "bin" / "geopmsession"
JOBSTATS_CAPTURE = (
    ROOT
    / "tests"
    / "data"
    / "jobstats"
    / "GSI-HPC_lustre_exporter__proc_fs_lustre_obdfilter_lustrefs-OST0002_job_stats.txt"
)
TARGET_SAMPLE_MS = 2.0
TARGET_CPU_PERCENT = 1.0
REQUESTS = [
    Request("CPU_ENERGY", "package", None),
    Request("CPU_POWER", "package", None),
    Request("DRAM_ENERGY", "package", None),
    Request("GPU_ENERGY", "gpu", None),
    Request("GPU_POWER", "gpu", None),
]


def build_tree(root: Path) -> Path:
    """A 2-socket powercap tree: package-N with core, uncore and dram subzones."""
    base = root / "class" / "powercap"
    for package in range(2):
        zones = {
            f"{package}": f"package-{package}",
            f"{package}:0": "core",
            f"{package}:1": "uncore",
            f"{package}:2": "dram",
        }
        for zone, name in zones.items():
            path = base / f"intel-rapl:{zone}"
            path.mkdir(parents=True)
            (path / "name").write_text(name + "\n")
            (path / "energy_uj").write_text(f"{123456789 * (package + 1)}\n")
            (path / "max_energy_range_uj").write_text("262143328850\n")
            (path / "enabled").write_text("1\n")
    return root


def naive_powercap_read(root: Path) -> list[float]:
    """Baseline: re-read every file of every zone at each interval, no caching."""
    values = []
    for zone in sorted((root / "class" / "powercap").glob("intel-rapl:*")):
        (zone / "name").read_text()
        (zone / "max_energy_range_uj").read_text()
        values.append(int((zone / "energy_uj").read_text()) / 1e6)
    return values


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def bench_powercap(tree: Path, repeats: int) -> dict:
    sampler = Sampler([PowercapBackend(tree)], 1.0)
    sampler.sample_once()
    ours = timed(sampler.sample_once, repeats)
    naive = timed(lambda: naive_powercap_read(tree), repeats)
    return {
        "zones": 8,
        "sample_ms": ms(ours),
        "naive_reread_ms": ms(naive),
        "ratio_vs_naive": ms(ours) / ms(naive),
        "target_ms": TARGET_SAMPLE_MS,
    }


def standin_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GEOPM_STANDIN_TOPOLOGY": "package=2,gpu=8",
            "GEOPM_STANDIN_POWER": "CPU=100,DRAM=10,GPU=250",
        }
    )
    return env


def bench_geopmsession(repeats: int, seconds: float) -> dict:
    backend = GeopmsessionBackend(str(STANDIN), REQUESTS, 0.1, standin_env())
    backend.open()
    lines = []
    try:
        started = time.monotonic()
        cpu_started = time.process_time()
        rows = 0
        while time.monotonic() - started < seconds:
            backend.read()
            rows += 1
        cpu = time.process_time() - cpu_started
        wall = time.monotonic() - started
        header = ",".join(
            f'"{k.signal}-{k.domain}-{k.index}"' if k.domain != "board" else f'"{k.signal}"'
            for k in backend._parser.keys
        )
    finally:
        backend.close()
    # Replay rows of the same shape through the exporter's per-row work, timed alone.
    columns = header.count(",") + 1
    for n in range(repeats + 1):
        lines.append(
            ",".join(
                ["%.16g" % (n * 0.1)]
                + ["%.16g" % (51985.06903076172 + n * 10.0 + c) for c in range(columns - 1)]
            )
            + "\n"
        )
    parser = TraceParser()
    parser.feed(header + "\n")
    tracker = CounterTracker()
    times = []
    for line in lines:
        began = time.perf_counter()
        values, problems = parser.feed(line)
        assert values is not None, problems  # rows made just above, to the header's shape
        batch = SampleBatch("geopmsession", values[0], 0, samples_from_row(parser.keys, values))
        readings_from_batch(batch, tracker)
        times.append(time.perf_counter() - began)
    return {
        "columns": columns,
        "row_ms": ms(times[1:]),
        "target_ms": TARGET_SAMPLE_MS,
        "live_rows": rows,
        "live_seconds": wall,
        "live_rows_per_second": rows / wall,
        "live_cpu_percent": 100 * cpu / wall,
    }


def bench_sampler_cpu(tree: Path, seconds: float) -> dict:
    sampler = Sampler([PowercapBackend(tree)], 1.0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    wall = time.monotonic() - started
    return {
        "interval_s": 1.0,
        "seconds": wall,
        "cpu_percent": 100 * cpu / wall,
        "target_percent": TARGET_CPU_PERCENT,
        "samples": sampler.snapshot.seq,
    }


def scrape_latency(tree: Path, jobstats: bool, repeats: int) -> dict:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "hpcmon.exporter",
        "--collector.geopm",
        "--geopm.backend",
        "powercap",
        "--path.sysfs",
        str(tree),
        "--collector.jobs",
        "--web.listen-address",
        f"127.0.0.1:{port}",
    ]
    have_jobstats = "jobstats" in available_collectors()
    if have_jobstats and jobstats and JOBSTATS_CAPTURE.exists():
        args += [
            "--collector.jobstats",
            "--jobstats.source",
            "file",
            "--jobstats.path",
            str(JOBSTATS_CAPTURE),
        ]
    elif have_jobstats:
        args.append("--no-collector.jobstats")
        jobstats = False
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                body = opener.open(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("exporter did not start") from None
                time.sleep(0.1)
        time.sleep(1.5)  # let every collector take its first samples
        times = timed(lambda: opener.open(url, timeout=10).read(), repeats)
        body = opener.open(url, timeout=10).read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {
        "with_jobstats": jobstats,
        "scrape_ms": ms(times),
        "p90_ms": sorted(times)[int(0.9 * len(times))] * 1e3,
        "bytes": len(body),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    args = parser.parse_args(argv)
    repeats = 200 if args.quick else 2000
    cpu_seconds = 5.0 if args.quick else 30.0
    live_seconds = 2.0 if args.quick else 10.0
    scrapes = 30 if args.quick else 200
    with tempfile.TemporaryDirectory(prefix="hpcmon-bench-geopm-") as temporary:
        tree = build_tree(Path(temporary))
        results = {
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load1": os.getloadavg()[0],
            },
            "quick": args.quick,
            "powercap": bench_powercap(tree, repeats),
            "geopmsession": bench_geopmsession(repeats, live_seconds),
            "sampler_cpu": bench_sampler_cpu(tree, cpu_seconds),
            "scrape": [scrape_latency(tree, False, scrapes), scrape_latency(tree, True, scrapes)],
        }
    p, g, c = results["powercap"], results["geopmsession"], results["sampler_cpu"]
    rows = [
        (
            "powercap sample, 8 zones (ms)",
            p["sample_ms"],
            f"naive re-read {p['naive_reread_ms']:.3f} (x{p['ratio_vs_naive']:.2f})",
            f"< {TARGET_SAMPLE_MS}",
        ),
        (
            f"geopmsession row, {g['columns']} columns (ms)",
            g["row_ms"],
            f"live {g['live_rows_per_second']:.1f} rows/s at -p 0.1, "
            f"{g['live_cpu_percent']:.2f}% CPU",
            f"< {TARGET_SAMPLE_MS}",
        ),
        (
            "sampler CPU at 1 s (% of a core)",
            c["cpu_percent"],
            f"{c['samples']} samples",
            f"< {TARGET_CPU_PERCENT}",
        ),
    ]
    for scrape in results["scrape"]:
        label = "scrape geopm+jobs" + ("+jobstats" if scrape["with_jobstats"] else "")
        rows.append(
            (
                f"{label} (ms)",
                scrape["scrape_ms"],
                f"p90 {scrape['p90_ms']:.2f}, {scrape['bytes']} bytes",
                "-",
            )
        )
    print(f"{'measure':44} {'median':>9}  {'detail':42} target")
    for name, value, detail, target in rows:
        print(f"{name:44} {value:9.3f}  {detail:42} {target}")
    results["targets_met"] = {
        "powercap_sample": p["sample_ms"] < TARGET_SAMPLE_MS,
        "geopmsession_row": g["row_ms"] < TARGET_SAMPLE_MS,
        "sampler_cpu": c["cpu_percent"] < TARGET_CPU_PERCENT,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"targets met: {results['targets_met']}\nwritten: {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
