"""Benchmark of the jobstats collector: a full scrape (read, parse, rates, exposition).

Data:
- ``real``: the six real Lustre 2.12.5 OST captures (HPE lustre_exporter PR 149, ~4,900 job
  entries) laid out as one procfs tree;
- ``synthetic``: 8 OSTs x 10,000 jobs in the 2.15 layout (quoted ids, secs.nsecs times,
  usecs latency, sumsq, hist), generated from the real records.

Baseline, in the same run: PyYAML's CSafeLoader (what Lustre's lljobstat uses) on the same
text after the minimal cleanup YAML needs (split per target, un-glue ``max:16777216``). On the
synthetic set it parses one of the eight OST files and the figure is multiplied by eight.

In this process (``sample()`` of a collector): ``cold`` = first sample of a new exporter;
``same`` = the files did not change since the previous scrape; ``changing`` = every non-zero
counter grew since the previous scrape (the worst realistic case).
In a separate process, the real exporter (``python -m hpcmon.exporter``, procfs source, a sample per
scrape): the median time of a full HTTP scrape, read to the last byte, and the exporter's peak
RSS (VmHWM: sampling and serving included) and RSS after the last scrape. Bytes on the wire of
the 6-OST scrape, plain and gzip.

Under load (issue 13): 20 scraper processes on the synthetic set, gzip accepted, for 30 s,
p50/p90/p99 latency (each scraper's first scrape timed apart, see ``_scrape_until``) and
bytes per scrape: (a) each scraping every second while the exporter
samples every 10 s in the background, its default; (b) the same with no sample during the run,
the control that shows what the machine itself adds; (c) scrapers flat out. The target is
p99 <= 2 x p50 for (a); on a shared machine compare (a) with (b).

Usage: .venv/bin/python benchmarks/bench_jobstats.py [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devtools.servers import run_exporter  # noqa: E402
from hpcmon.exporter.collector import add_path_flags  # noqa: E402
from hpcmon.exporter.jobstats import parser as jobstats_parser  # noqa: E402
from hpcmon.exporter.jobstats.collector import JobstatsCollector  # noqa: E402
from hpcmon.exporter.jobstats.parser import parse_text  # noqa: E402

DATA = REPO / "tests" / "data" / "jobstats"
REAL = sorted(DATA.glob("*pr149*lustre2.12.5.txt"))
RESULTS = REPO / "bench-results" / "jobstats.json"
SCRAPERS = 20
LOAD_SECONDS = 30
NO_SAMPLE = 1e5  # an interval longer than the run: the control, scrapes only
# (scrape period, sampling interval): 20 Prometheus servers scraping every second while the
# exporter samples every 10 s; the same without any sample during the run (the control:
# what the machine itself adds); and scrapers flat out (saturates a 2-core machine).
LOAD_RUNS = ((1.0, 10.0), (1.0, NO_SAMPLE), (0.0, 10.0))
TARGETS = {
    "real_scrape_s": 0.3,
    "real_speedup_vs_yaml": 10.0,
    "synthetic_scrape_s": 5.0,
    "synthetic_rss_mb": 600.0,
    "load_p99_over_p50": 2.0,
}
OST_OPS_215 = (
    "read",
    "write",
    "getattr",
    "setattr",
    "punch",
    "sync",
    "destroy",
    "create",
    "statfs",
    "get_info",
    "set_info",
    "quotactl",
    "prealloc",
)
_SAFE_ID = re.compile(r"[A-Za-z0-9.@_:/-]*")


# ---------------------------------------------------------------- data
def real_tree(root: Path) -> None:
    for path in REAL:
        found = re.search(r"public1-OST[0-9a-f]{4}", path.name)
        assert found is not None, f"{path.name}: not named after its OST"
        target = found.group(0)
        folder = root / "fs" / "lustre" / "obdfilter" / target
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job_stats").write_bytes(path.read_bytes())


def grow(root: Path, step: int) -> None:
    """Every non-zero ``samples``/``sum`` grows, and snapshot_time moves on by 10 s."""

    def bump(match: re.Match[str]) -> str:
        value = int(match.group(2))
        return f"{match.group(1)}{value + step * (1 + value // 1000) if value else 0}"

    for path in sorted(root.glob("fs/lustre/*/*/job_stats")):
        text = path.read_text()
        text = re.sub(r"(\b(?:samples|sum):\s*)(\d+)", bump, text)
        text = re.sub(
            r"(snapshot_time:\s*)(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + 10}", text
        )
        path.write_text(text)


def _quoted(jobid: str) -> str:
    """Lustre 2.15.2+ quoting: ids with other characters are quoted and \\xHH-escaped."""
    if _SAFE_ID.fullmatch(jobid) and not jobid.startswith("@"):
        return jobid
    return '"' + "".join(c if _SAFE_ID.fullmatch(c) else f"\\x{ord(c):02x}" for c in jobid) + '"'


def synthetic_tree(root: Path, osts: int, jobs_per_ost: int) -> int:
    """2.15-layout targets built from the real records (values and ids reused)."""
    records = [
        job
        for path in REAL
        for t in parse_text(path.read_text(), str(path)).targets
        for job in t.jobs
    ]
    base_ids = sorted({job.jobid for job in records})
    written = 0
    for ost in range(osts):
        lines = ["job_stats:"]
        for n in range(jobs_per_ost):
            job = records[(n * 7 + ost * 131) % len(records)]
            suffix = "" if n < len(base_ids) else f"~{n // len(base_ids)}"
            jobid = base_ids[n % len(base_ids)][: 31 - len(suffix)] + suffix
            snapshot = 1723114647.887515895 + n % 60
            start = snapshot - 3600 - n % 1000
            lines += [
                f"- job_id:          {_quoted(jobid)}",
                f"  snapshot_time:   {snapshot:.9f} secs.nsecs",
                f"  start_time:      {start:.9f} secs.nsecs",
                f"  elapsed_time:    {snapshot - start:.9f} secs.nsecs",
            ]
            for name in ("read_bytes", "write_bytes"):
                op = job.ops[name]
                hist = f"{{ 4K: {op.samples} }}" if op.samples else "{  }"
                lines.append(
                    f"  {name + ':':<17}{{ samples: {op.samples:>11}, unit: bytes, "
                    f"min: {op.min:>8}, max: {op.max:>8}, sum: {op.sum:>16}, "
                    f"sumsq: {op.max * op.sum:>18}, hist: {hist} }}"
                )
            for name in OST_OPS_215:
                source = {"read": "read_bytes", "write": "write_bytes"}.get(name, name)
                calls = job.ops[source].samples if source in job.ops else 0
                low, high = (12, 90) if calls else (0, 0)
                lines.append(
                    f"  {name + ':':<17}{{ samples: {calls:>11}, unit: usecs, "
                    f"min: {low:>8}, max: {high:>8}, sum: {calls * 37:>16}, "
                    f"sumsq: {calls * 1900:>18} }}"
                )
            written += 1
        folder = root / "fs" / "lustre" / "obdfilter" / f"synth-OST{ost:04x}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job_stats").write_text("\n".join(lines) + "\n")
    return written


# ---------------------------------------------------------------- measurements
def collector_for(root: Path) -> JobstatsCollector:
    options = argparse.ArgumentParser()
    add_path_flags(options)
    JobstatsCollector.add_arguments(options)
    return JobstatsCollector(
        options.parse_args(
            ["--jobstats.source", "procfs", "--path.procfs", str(root), "--jobstats.interval", "0"]
        )
    )


CPU_TIMES: list[float] = []  # process CPU seconds of each timed call, next to wall time


T = TypeVar("T")


def timed(action: Callable[[], T]) -> tuple[float, T]:
    started, cpu = time.perf_counter(), time.process_time()
    result = action()
    CPU_TIMES.append(time.process_time() - cpu)
    return time.perf_counter() - started, result


def yaml_baseline(root: Path) -> tuple[float, int]:
    """Read + CSafeLoader per target file after the minimal cleanup; returns (s, jobs)."""
    jobs = 0
    started = time.perf_counter()
    for path in sorted(root.glob("fs/lustre/*/*/job_stats")):
        data = yaml.load(path.read_text().replace("max:", "max: "), Loader=yaml.CSafeLoader)
        jobs += len((data or {}).get("job_stats") or [])
    return time.perf_counter() - started, jobs


def scrape_scenarios(root: Path, repeats: int, changing: bool) -> dict[str, float]:
    jobstats_parser._LINE_CACHE.clear()
    collector = collector_for(root)
    cold, first = timed(collector.sample)
    same = []
    CPU_TIMES.clear()
    for _ in range(repeats):
        seconds, body = timed(collector.sample)
        same.append(seconds)
    result = {
        "cold_s": cold,
        "same_median_s": statistics.median(same),
        "same_cpu_median_s": statistics.median(CPU_TIMES),
        "series": body.count(b"\n") - body.count(b"\n#"),
        "bytes": len(body),
        "first_sample_series": first.count(b"\n") - first.count(b"\n#"),
    }
    if changing:
        moving = []
        CPU_TIMES.clear()
        for step in range(1, repeats + 1):
            grow(root, step)
            seconds, body = timed(collector.sample)
            moving.append(seconds)
        result["changing_median_s"] = statistics.median(moving)
        result["changing_cpu_median_s"] = statistics.median(CPU_TIMES)
    return result


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def exporter_process(root: Path, scrapes: int) -> dict[str, float]:
    """The real exporter in its own process: HTTP scrape times and its memory."""
    args = [
        "--jobstats.source=procfs",
        f"--path.procfs={root}",
        "--jobstats.interval=0",
        "--log.level=warn",
    ]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with (
        tempfile.TemporaryDirectory(prefix="bench-exporter-") as workdir,
        run_exporter(args, Path(workdir)) as exporter,
    ):
        pid = exporter.proc.pid
        url = f"http://{exporter.address}/metrics"
        idle_mb = _status_mb(pid, "VmRSS")
        times, size = [], 0
        for _ in range(scrapes):
            started = time.perf_counter()
            size = 0
            with opener.open(url, timeout=300) as response:
                while chunk := response.read(1 << 20):
                    size += len(chunk)
            times.append(time.perf_counter() - started)
        return {
            "http_scrape_first_s": times[0],
            "http_scrape_median_s": statistics.median(times),
            "http_bytes": size,
            "exporter_idle_rss_mb": idle_mb,
            "exporter_peak_rss_mb": _status_mb(pid, "VmHWM"),
            "exporter_rss_after_mb": _status_mb(pid, "VmRSS"),
        }


def _scrape(url: str, gzip_ok: bool, inflate: bool = True) -> tuple[float, int, int]:
    """(seconds, bytes on the wire, bytes of text or 0 unless ``inflate``) of one scrape, read
    to the last byte; inflating is left out of the time."""
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    headers = {"Accept-Encoding": "gzip"} if gzip_ok else {}
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        encoding = response.getheader("Content-Encoding")
    finally:
        connection.close()
    seconds = time.perf_counter() - started
    if encoding != "gzip":
        return seconds, len(body), len(body)
    return seconds, len(body), len(zlib.decompress(body, 31)) if inflate else 0


def wire_bytes(root: Path) -> dict[str, float]:
    """One scrape with and without gzip (background sampling, as deployed)."""
    args = [
        "--jobstats.source=procfs",
        f"--path.procfs={root}",
        "--jobstats.interval=10",
        "--log.level=warn",
    ]
    with (
        tempfile.TemporaryDirectory(prefix="bench-exporter-") as workdir,
        run_exporter(args, Path(workdir)) as exporter,
    ):
        url = f"http://{exporter.address}/metrics"
        _wait_for_sample(url)
        _, plain, text = _scrape(url, gzip_ok=False)
        _, zipped, _ = _scrape(url, gzip_ok=True)
    return {"plain_bytes": plain, "gzip_bytes": zipped, "text_bytes": text}


def _wait_for_sample(url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _scrape(url, gzip_ok=True)[2] > 100_000:
            return
        time.sleep(0.5)
    raise TimeoutError("no jobstats sample within {timeout} s")


def _family(pid: int) -> list[int]:
    """The exporter and its children (the jobstats sampler process)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _scrape_until(
    url: str, seconds: float, period: float, offset: float
) -> tuple[float | None, list[tuple[float, int, int]]]:
    """A scraper process: (its first scrape's time, the times of the scrapes that follow
    it): for ``seconds``, one scrape every ``period`` seconds from ``offset`` (as a Prometheus
    server does), or back to back when ``period`` is 0.

    The first scrape of a newly forked scraper takes 2.5x the others whatever the exporter
    does (the same with no sample during the run): the client's first touch of the memory its
    18 MB answer lands in (glibc maps it fresh, then keeps it for the next answers). A
    Prometheus server scrapes for weeks: its first scrape is timed apart, not in the
    percentiles."""
    started = time.monotonic()
    found = []
    tick = started + offset
    first: float | None = None
    while time.monotonic() < started + seconds:
        if period:
            time.sleep(max(0.0, tick - time.monotonic()))
            tick += period
        if first is None:
            first = _scrape(url, gzip_ok=True, inflate=False)[0]
            continue
        found.append(_scrape(url, gzip_ok=True, inflate=False))
    return first, found


def concurrent_scrapes(
    root: Path, scrapers: int, seconds: float, period: float, interval: float
) -> dict[str, float]:
    """``scrapers`` processes scraping for ``seconds``, each every ``period`` seconds (0:
    back to back, which saturates this machine), gzip accepted (as Prometheus does), while
    the exporter samples in the background every ``interval`` seconds (10 is its default;
    a very long one is the control: no sample during the run)."""
    args = [
        "--jobstats.source=procfs",
        f"--path.procfs={root}",
        f"--jobstats.interval={interval:g}",
        "--log.level=warn",
    ]
    with (
        tempfile.TemporaryDirectory(prefix="bench-exporter-") as workdir,
        run_exporter(args, Path(workdir)) as exporter,
    ):
        url = f"http://{exporter.address}/metrics"
        _wait_for_sample(url)
        _, _, text_bytes = _scrape(url, gzip_ok=True)
        # One process per scraper, as separate Prometheus servers would be: threads of one
        # Python process would measure this process's own lock instead of the exporter.
        with multiprocessing.get_context("fork").Pool(scrapers) as pool:
            per_scraper = pool.starmap(
                _scrape_until,
                [(url, seconds, period, period * n / scrapers) for n in range(scrapers)],
            )
        results = [found for _, scraped in per_scraper for found in scraped]
        firsts = [first for first, _ in per_scraper if first is not None]
        peak_mb = sum(_status_mb(pid, "VmHWM") for pid in _family(exporter.proc.pid))
    latencies = sorted(seconds for seconds, _, _ in results)
    return {
        "scrapers": scrapers,
        "period_s": period,
        "sampling_interval_s": interval,
        "duration_s": seconds,
        "scrapes": len(results),
        "p50_s": statistics.median(latencies),
        "p90_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.90))],
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "load_average": os.getloadavg()[0],
        "max_s": latencies[-1],
        "first_scrape_median_s": statistics.median(firsts),
        "first_scrape_max_s": max(firsts),
        "wire_bytes_median": statistics.median(wire for _, wire, _ in results),
        "text_bytes": text_bytes,
        "exporter_peak_rss_mb": peak_mb,
    }


def main() -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    cli.add_argument("--quick", action="store_true", help="fewer repeats, 8 x 2,000 jobs")
    cli.add_argument(
        "--load-only", action="store_true", help="only the concurrent-scrape measurement"
    )
    args = cli.parse_args()
    if args.load_only:
        return load_only(args.quick)
    repeats = 3 if args.quick else 7
    jobs_per_ost = 2_000 if args.quick else 10_000
    results: dict[str, object] = {
        "quick": args.quick,
        "repeats": repeats,
        "python": sys.version.split()[0],
        "targets": TARGETS,
    }
    with tempfile.TemporaryDirectory(prefix="bench-jobstats-") as tmp:
        real = Path(tmp) / "real"
        real_tree(real)
        yaml_runs = [yaml_baseline(real) for _ in range(max(1, repeats // 2))]
        yaml_median = statistics.median(seconds for seconds, _ in yaml_runs)
        real_result = exporter_process(real, repeats)
        real_result.update(scrape_scenarios(real, repeats, changing=True))
        parse_runs = []
        texts = [(str(p), p.read_text()) for p in sorted(real.glob("fs/lustre/*/*/job_stats"))]
        for _ in range(repeats):
            jobstats_parser._LINE_CACHE.clear()
            parse_runs.append(timed(lambda: [parse_text(t, o) for o, t in texts])[0])
        real_result["parse_only_cold_median_s"] = statistics.median(parse_runs)
        real_result["yaml_csafeloader_median_s"] = yaml_median
        real_result["yaml_jobs"] = yaml_runs[0][1]
        real_result.update(wire_bytes(real))
        results["real"] = real_result

        synth = Path(tmp) / "synthetic"
        synthetic_jobs = synthetic_tree(synth, 8, jobs_per_ost)
        synth_result = exporter_process(synth, max(3, repeats // 2))
        synth_result.update(scrape_scenarios(synth, max(2, repeats // 2), changing=False))
        synth_result["jobs"] = synthetic_jobs
        one_ost = Path(tmp) / "one-ost"
        first = sorted(synth.glob("fs/lustre/*/*"))[0]
        (one_ost / "fs" / "lustre" / "obdfilter").mkdir(parents=True)
        (one_ost / "fs" / "lustre" / "obdfilter" / first.name).symlink_to(first)
        seconds, jobs = yaml_baseline(one_ost)
        synth_result["yaml_csafeloader_estimate_s"] = seconds * 8
        synth_result["yaml_jobs_one_ost"] = jobs
        results["synthetic"] = synth_result
        seconds = 10 if args.quick else LOAD_SECONDS
        results["load"] = [
            concurrent_scrapes(synth, SCRAPERS, seconds, period, interval)
            for period, interval in LOAD_RUNS
        ]

    worst_real = max(
        real_result["same_median_s"],
        real_result["changing_median_s"],
        real_result["http_scrape_median_s"],
    )
    results["real_speedup_vs_yaml"] = yaml_median / worst_real
    print_table(results, worst_real)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten: {RESULTS.relative_to(REPO)}")
    return 0


def load_only(quick: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-jobstats-") as tmp:
        synth = Path(tmp) / "synthetic"
        synthetic_tree(synth, 8, 2_000 if quick else 10_000)
        seconds = 10 if quick else LOAD_SECONDS
        loads = [
            concurrent_scrapes(synth, SCRAPERS, seconds, period, interval)
            for period, interval in LOAD_RUNS
        ]
    print_load(loads)
    return 0


def print_load(loads: list[dict]) -> None:
    for load in loads:
        _print_one_load(load)


def _print_one_load(load: dict) -> None:
    pace = f"each every {load['period_s']:g} s" if load["period_s"] else "back to back"
    interval = load["sampling_interval_s"]
    sampling = (
        "no sample during the run" if interval >= NO_SAMPLE else f"sampling every {interval:g} s"
    )
    print(
        f"\n{load['scrapers']} scraper processes, {pace}, for {load['duration_s']:g} s, gzip, "
        f"{sampling}: {load['scrapes']} scrapes"
    )
    ratio = load["p99_s"] / load["p50_s"]
    print(
        f"  latency p50 {load['p50_s']:.3f} s, p99 {load['p99_s']:.3f} s "
        f"(p99/p50 {ratio:.2f}, target <= 2), p90 {load['p90_s']:.3f} s, "
        f"max {load['max_s']:.3f} s; load average {load['load_average']:.1f}"
    )
    print(
        f"  each scraper's first scrape, apart (a new process): median "
        f"{load['first_scrape_median_s']:.3f} s, max {load['first_scrape_max_s']:.3f} s"
    )
    print(
        f"  bytes per scrape: {load['wire_bytes_median'] / 2**20:.1f} MB on the wire, "
        f"{load['text_bytes'] / 2**20:.1f} MB of text; "
        f"exporter peak RSS {load['exporter_peak_rss_mb']:.0f} MB (with its sampler process)"
    )


def print_table(results: dict, worst_real: float) -> None:
    real, synth = results["real"], results["synthetic"]

    def secs(value: float | None) -> str:
        return "" if value is None else f"{value:.3f} s"

    rows = []
    for data, title, target in (
        (real, f"6 real 2.12.5 OSTs, {real['series']:,} series", "< 0.3 s, >= 10x"),
        (
            synth,
            f"synthetic 2.15, 8 OSTs x {synth['jobs'] // 8:,} jobs, {synth['series']:,} series",
            "< 5 s",
        ),
    ):
        base = data.get("yaml_csafeloader_median_s") or data["yaml_csafeloader_estimate_s"]
        estimated = "yaml_csafeloader_estimate_s" in data
        rows += [
            (title, None, None, "", ""),
            (
                "  YAML CSafeLoader, parse only" + (" (1 OST x 8)" if estimated else ""),
                base,
                None,
                "baseline",
                "",
            ),
            (
                "  exporter process, HTTP scrape, median",
                data["http_scrape_median_s"],
                None,
                f"{base / data['http_scrape_median_s']:.1f}x",
                target,
            ),
            (
                "  exporter process, HTTP scrape, first",
                data["http_scrape_first_s"],
                None,
                f"{base / data['http_scrape_first_s']:.1f}x",
                "",
            ),
            ("  sample(), first", data["cold_s"], None, f"{base / data['cold_s']:.1f}x", ""),
            (
                "  sample(), files unchanged",
                data["same_median_s"],
                data["same_cpu_median_s"],
                f"{base / data['same_median_s']:.1f}x",
                "",
            ),
        ]
        if "changing_median_s" in data:
            rows.append(
                (
                    "  sample(), counters moving",
                    data["changing_median_s"],
                    data["changing_cpu_median_s"],
                    f"{base / data['changing_median_s']:.1f}x",
                    "",
                )
            )
        if "parse_only_cold_median_s" in data:
            rows.append(
                (
                    "  our parse only, cold cache",
                    data["parse_only_cold_median_s"],
                    None,
                    f"{base / data['parse_only_cold_median_s']:.1f}x",
                    "",
                )
            )
    print(f"\n{'measurement (medians)':<58}{'wall':>10}{'cpu':>10}{'vs YAML':>9}  target")
    for name, wall, cpu, ratio, target in rows:
        print(f"{name:<58}{secs(wall):>10}{secs(cpu):>10}{ratio:>9}  {target}")
    print("\nexporter process memory (real / synthetic)")
    for key, label, target in (
        ("exporter_peak_rss_mb", "peak RSS (VmHWM), sampling + serving", "< 600 MB synthetic"),
        ("exporter_rss_after_mb", "RSS after the last scrape", ""),
        ("exporter_idle_rss_mb", "RSS before the first scrape", ""),
    ):
        print(f"  {label:<56}{real[key]:>6.0f} / {synth[key]:.0f} MB  {target}")
    print(
        f"  {'exposition size':<56}{real['http_bytes'] / 2**20:>6.0f} / "
        f"{synth['http_bytes'] / 2**20:.0f} MB"
    )
    print(
        f"\n6 real OSTs on the wire: {real['plain_bytes'] / 1e6:.2f} MB plain, "
        f"{real['gzip_bytes'] / 1e6:.2f} MB gzip "
        f"({real['plain_bytes'] / real['gzip_bytes']:.0f}x smaller)"
    )
    print_load(results["load"])
    ok = (
        worst_real < TARGETS["real_scrape_s"]
        and results["real_speedup_vs_yaml"] >= TARGETS["real_speedup_vs_yaml"]
        and synth["http_scrape_median_s"] < TARGETS["synthetic_scrape_s"]
        and synth["exporter_peak_rss_mb"] < TARGETS["synthetic_rss_mb"]
        and results["load"][0]["p99_s"]
        <= TARGETS["load_p99_over_p50"] * results["load"][0]["p50_s"]
    )
    print(
        f"\ntargets {'met' if ok else 'NOT all met'} on wall time "
        f"(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
