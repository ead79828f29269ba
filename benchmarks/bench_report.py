"""Benchmark of hpcmon-report (issue 16): the report for a 1,000-rank job with 100,000 records.

Target: < 3 s (median) from typed input to all three renderings. Two inputs, both synthetic
with real layouts: "log" = the hook reader's DarshanLog (100,000 POSIX records with every
counter, 1,000 per-rank heatmaps of 200 bins), and "points" = the rows InfluxDB would return
if the hook had stored all 100,000 records (the real hook's signals and points, converted to
rows), and the real read of the hook's default points (top 100 records per module, the
shared files and the 1,000 x 200 heatmap bins summed over ranks) from InfluxDB 1.6.7 over
HTTP. The report also gets 16 Lustre targets and a power series of 300 samples, and 50
functions. Each row is read -> typed records -> insights -> text + JSON + HTML.

Comparison, in the same run: Drishti (drishti-io, the tool the diagnosis agrees with) and
`hpcmon-report --darshan` on the largest real log (384 ranks, 9,217 records), each as the
command a user runs (process start included).

    .venv/bin/python benchmarks/bench_report.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from devtools.servers import run_influxdb1  # noqa: E402
from hpcmon.post_job.darshan.model import DarshanLog, HeatmapRecord, JobInfo, ModuleTable  # noqa: E402
from hpcmon.post_job.darshan.points import log_points  # noqa: E402
from hpcmon.post_job.darshan.signals import compute_signals  # noqa: E402
from hpcmon.post_job.points import to_lines  # noqa: E402
from hpcmon.report.api import Sources, build, collect, render  # noqa: E402
from hpcmon.report.darshan_log import darshan_from_log_objects  # noqa: E402
from hpcmon.report.influx import InfluxSettings  # noqa: E402
from hpcmon.report.model import FunctionStat, JobData, PrometheusData, Series, TargetUse  # noqa: E402
from hpcmon.report.records import darshan_from_rows, rows_from_points  # noqa: E402

RANKS = 1000
START = 1_700_000_000
LOG = (
    ROOT
    / "tests/data/darshan/logs"
    / ("jlbez_8a_benchmark_write_parallel_id1322696_8-21-14519-8141979180909667175_12.darshan")
)


def synthetic_log(records: int) -> DarshanLog:
    """`records` POSIX records over RANKS ranks (100 of them shared files), all counters set."""
    from darshan.backend.cffi_backend import counter_names, fcounter_names

    ints, floats = counter_names("POSIX"), fcounter_names("POSIX")
    if ints is None or floats is None:
        raise RuntimeError("darshan's libdarshan-util names no POSIX counters")
    rng = np.random.default_rng(16)
    n = records
    ranks = np.where(np.arange(n) < 100, -1, np.arange(n) % RANKS).astype(np.int64)
    ids = (10**15 + np.arange(n)).astype(np.uint64)
    counters = {name: rng.integers(0, 50, n).astype(np.int64) for name in ints}
    counters["POSIX_READS"] = rng.integers(0, 2000, n)
    counters["POSIX_WRITES"] = rng.integers(0, 2000, n)
    counters["POSIX_BYTES_READ"] = counters["POSIX_READS"] * 65536
    counters["POSIX_BYTES_WRITTEN"] = counters["POSIX_WRITES"] * 1048576
    counters["POSIX_MAX_BYTE_READ"] = counters["POSIX_BYTES_READ"]
    fcounters = {name: rng.random(n) for name in floats}
    table = ModuleTable("POSIX", ids, ranks, counters, fcounters)
    heatmaps = [
        HeatmapRecord(
            "POSIX",
            rank,
            16592106915301738621,
            5.0,
            rng.integers(0, 1 << 20, 200),
            rng.integers(0, 1 << 24, 200),
        )
        for rank in range(RANKS)
    ]
    job = JobInfo("1", 1000, RANKS, START, START + 1000, 1000.0, "/apps/synthetic")
    names = {int(i): f"/lus/scratch/run/out.{k:06d}" for k, i in enumerate(ids)}
    return DarshanLog("synthetic", job, {"POSIX": table}, heatmaps, names)


def stack_data() -> tuple[PrometheusData, list[FunctionStat]]:
    times = START + np.arange(300) * 3.4
    rng = np.random.default_rng(7)
    targets = []
    for k in range(16):
        t = TargetUse("ost", f"fs-OST{k:04x}", 1e9, 5e10, 0, 2e9, 8e10, 0)
        t.job_rate = Series({}, times, rng.random(300) * 1e8)
        t.all_rate = Series({}, times, rng.random(300) * 3e8)
        targets.append(t)
    power = Series({}, times, 2e5 + rng.random(300) * 2e4)
    functions = [
        FunctionStat(f"f{k}", 10 + k, 1.0 / (k + 1), 0.5 / (k + 1), "viztracer") for k in range(50)
    ]
    return PrometheusData(targets, power, []), functions


def report_all(job: JobData) -> int:
    report = build(job)
    return sum(len(render(job, report, fmt)) for fmt in ("text", "json", "html"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    records = 100_000
    log = synthetic_log(records)
    prom, functions = stack_data()
    signals = compute_signals(log)
    points = log_points(log.job, signals, {"jobid": "1"}, log.names, top_records=records)
    rows = rows_from_points(points)
    print(f"synthetic job: {RANKS} ranks, {records} POSIX records, {len(points)} points")

    def from_log() -> int:
        job = JobData(
            "1",
            darshan=darshan_from_log_objects([log]),
            prometheus=prom,
            functions=functions,
            window=(START, START + 1020),
        )
        return report_all(job)

    def from_rows() -> int:
        job = JobData(
            "1",
            darshan=darshan_from_rows(rows),
            prometheus=prom,
            functions=functions,
            window=(START, START + 1020),
        )
        return report_all(job)

    results: dict = {"ranks": RANKS, "records": records, "repeats": repeats, "target_s": 3.0}
    for name, action in (("log", from_log), ("points", from_rows)):
        action()  # warm-up: imports, matplotlib font cache
        seconds = median_seconds(action, repeats)
        results[f"{name}_s"] = seconds
        print(
            f"  {name:<7} records -> insights -> text+json+html  {seconds:6.2f} s   (target < 3 s)"
        )
    # The real read: the hook's default points (top 100 records per module by bytes and by
    # time, plus every shared file) in InfluxDB 1.6.7, read back with InfluxQL over HTTP.
    stored = log_points(log.job, signals, {"jobid": "1"}, log.names, top_records=100)
    with run_influxdb1() as influx:
        influx.create_database("hpcmon")
        lines = to_lines(stored).splitlines()
        for k in range(0, len(lines), 5000):
            body = "\n".join(lines[k : k + 5000]).encode()
            request = urllib.request.Request(f"{influx.url}/write?db=hpcmon&precision=ns", body)
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request).read()
        sources = Sources(InfluxSettings(v1_url=influx.url, database="hpcmon"))

        def from_influx() -> int:
            job = collect("1", None, sources)
            job.prometheus, job.functions = prom, functions
            job.window = (START, START + 1020)
            return report_all(job)

        from_influx()
        seconds = median_seconds(from_influx, repeats)
        results.update(influx_points=len(stored), influx_s=seconds)
        print(
            f"  InfluxDB 1.6.7 ({len(stored)} points: the hook's default top-100 records)"
            f" -> text+json+html  {seconds:6.2f} s   (target < 3 s)"
        )
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory)
        ours = [
            sys.executable,
            "-m",
            "hpcmon.report",
            "--job-id",
            "1",
            "--darshan",
            str(LOG),
            "--format",
            "html",
            "--output",
            str(out / "r.html"),
        ]
        drishti = shutil.which("drishti") or str(Path(sys.executable).parent / "drishti")
        theirs = [drishti, "--export_dir", str(out), str(LOG)]

        def run(command: list[str]) -> None:
            subprocess.run(
                command,
                cwd=out,
                capture_output=True,
                check=False,
                timeout=600,
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            )

        if Path(drishti).exists():
            ours_s = median_seconds(lambda: run(ours), repeats)
            theirs_s = median_seconds(lambda: run(theirs), repeats)
            results.update(
                real_log=LOG.name, report_cli_s=ours_s, drishti_s=theirs_s, ratio=ours_s / theirs_s
            )
            print(
                f"\nreal log {LOG.name[:40]}...: hpcmon-report --darshan (html) {ours_s:.2f} s,"
                f" drishti {theirs_s:.2f} s, ratio {ours_s / theirs_s:.2f}"
            )
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    raise SystemExit(main())
