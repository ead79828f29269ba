"""Benchmark: clean the 1.2M-event VizTracer trace, against json.load on the same file.

Targets (issue 5): read + clean + write the cleaned JSON in at most 2.5x the time
``json.load(gzip.open(trace))`` takes (same run), peak RSS under 2 GB, at least 30% volume
reduction. Also reports the per-function total-time error against the raw trace, for both rule
orders (aggregate-first, the default, and filter-first), on the big trace and on the small test
traces.

    .venv/bin/python benchmarks/bench_viztracer.py [--quick] [--repeats N]

Every timed run is a fresh child process, so each peak RSS is that run's own. Prints a table of
medians and writes bench-results/viztracer.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcmon.post_job.viztracer import read_and_clean  # noqa: E402
from hpcmon.post_job.viztracer.cleaning import (  # noqa: E402
    AGGREGATE_FIRST,
    FILTER_FIRST,
    CleaningOptions,
    CleaningResult,
    clean_trace,
    function_totals,
    total_time_error,
)
from hpcmon.post_job.viztracer.reader import read_trace  # noqa: E402

BIG_TRACE = ROOT / "benchmarks" / "data" / "viztracer" / "big_1M.json.gz"
SMALL_TRACES = ROOT / "tests" / "data" / "viztracer"
RESULTS = ROOT / "bench-results" / "viztracer.json"
TARGET_RATIO = 2.5
TARGET_RSS_MB = 2048
TARGET_REDUCTION = 0.30


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_error(result: CleaningResult) -> dict[str, float | int]:
    """How far the cleaned per-function total times are from the raw trace's.

    weighted: sum over functions of |cleaned - raw| / sum of raw totals; lost: functions with
    at least min_duration of raw total time that vanished from the cleaned trace.
    """
    cleaned = function_totals(result.data)
    raw = {name: stats.total_us for name, stats in result.functions.items()}
    significant = [n for n, t in raw.items() if t >= result.data.options.min_duration_us]
    errors = [abs(cleaned.get(n, 0.0) - raw[n]) / raw[n] for n in significant]
    return {
        "functions": len(raw),
        "weighted_error": total_time_error(result),
        "significant_functions": len(significant),
        "significant_lost": sum(1 for n in significant if n not in cleaned),
        "significant_max_error": max(errors, default=0.0),
    }


def child_load(path: Path) -> dict:
    import gzip

    started, cpu_started = time.perf_counter(), time.process_time()
    with gzip.open(path, "rb") as handle:
        document = json.load(handle)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "events": len(document["traceEvents"]),
        "peak_rss_mb": peak_rss_mb(),
    }


def child_clean(path: Path, order: str) -> dict:
    options = CleaningOptions(order=order)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "cleaned.json"
        started, cpu_started = time.perf_counter(), time.process_time()
        trace, result = read_and_clean(path, options)
        text = result.data.to_json()
        out.write_text(text)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mb": peak_rss_mb(),
        "events_in": trace.event_count,
        "calls_in": result.calls_in,
        "events_out": len(result.data.function_calls),
        "bytes_in": trace.json_bytes,
        "bytes_out": len(text),
        "reduction": 1 - len(text) / trace.json_bytes,
        **time_error(result),
    }


def run_child(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def order_table(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        trace = read_trace(path)
        for order in (AGGREGATE_FIRST, FILTER_FIRST):
            result = clean_trace(trace, CleaningOptions(order=order))
            rows.append(
                {
                    "trace": path.name,
                    "order": order,
                    "calls_in": result.calls_in,
                    "events_out": len(result.data.function_calls),
                    "bytes_out": len(result.data.to_json()),
                    **time_error(result),
                }
            )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one run each, skip filter-first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, *rest = args.child
        result = child_load(BIG_TRACE) if mode == "load" else child_clean(BIG_TRACE, rest[0])
        print(json.dumps(result))
        return 0

    repeats = 1 if args.quick else max(1, args.repeats)
    orders = [AGGREGATE_FIRST] if args.quick else [AGGREGATE_FIRST, FILTER_FIRST]
    loads: list[dict] = []
    cleans: dict[str, list[dict]] = {order: [] for order in orders}
    for _ in range(repeats):  # interleaved, so load and clean see the same machine load
        loads.append(run_child("load"))
        for order in orders:
            cleans[order].append(run_child("clean", order))
    load_median = statistics.median(r["seconds"] for r in loads)
    load_cpu_median = statistics.median(r["cpu_seconds"] for r in loads)

    print(
        f"VizTracer cleaning, {BIG_TRACE.name} ({loads[0]['events']:,} events), "
        f"medians of {repeats} run(s), each in a fresh process"
    )
    print(
        f"{'case':<24}{'wall s':>8}{'x load':>8}{'cpu s':>8}{'x load':>8}{'peak RSS MB':>13}"
        f"{'reduction':>11}{'events out':>12}{'time err':>10}"
    )
    print(
        f"{'json.load (baseline)':<24}{load_median:>8.2f}{1.0:>8.2f}{load_cpu_median:>8.2f}"
        f"{1.0:>8.2f}{max(r['peak_rss_mb'] for r in loads):>13.0f}"
    )
    summary: dict[str, dict] = {}
    for order, runs in cleans.items():
        median = statistics.median(r["seconds"] for r in runs)
        cpu_median = statistics.median(r["cpu_seconds"] for r in runs)
        last = runs[-1]
        row = {
            "median_seconds": median,
            "ratio_to_json_load": median / load_median,
            "median_cpu_seconds": cpu_median,
            "cpu_ratio_to_json_load": cpu_median / load_cpu_median,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            **{
                k: last[k]
                for k in (
                    "events_in",
                    "calls_in",
                    "events_out",
                    "bytes_in",
                    "bytes_out",
                    "reduction",
                    "weighted_error",
                    "functions",
                    "significant_functions",
                    "significant_lost",
                    "significant_max_error",
                )
            },
        }
        summary[order] = row
        print(
            f"{'clean ' + order:<24}{median:>8.2f}{row['ratio_to_json_load']:>8.2f}"
            f"{cpu_median:>8.2f}{row['cpu_ratio_to_json_load']:>8.2f}{row['peak_rss_mb']:>13.0f}{row['reduction']:>10.4%}{row['events_out']:>12,}"
            f"{row['weighted_error']:>10.2%}"
        )
    default = summary[AGGREGATE_FIRST]
    checks = {
        f"time <= {TARGET_RATIO}x json.load": default["ratio_to_json_load"] <= TARGET_RATIO,
        f"peak RSS < {TARGET_RSS_MB} MB": default["peak_rss_mb"] < TARGET_RSS_MB,
        f"volume reduction >= {TARGET_REDUCTION:.0%}": default["reduction"] >= TARGET_REDUCTION,
    }
    for name, ok in checks.items():
        print(f"  target {name}: {'met' if ok else 'NOT met'}")

    rows = order_table(sorted(SMALL_TRACES.glob("*.json*")))
    print(
        "\nRule order on the test traces (time err = sum |cleaned - raw| / sum raw of "
        "per-function totals; lost = functions with >= 100 us raw total that vanished)"
    )
    print(
        f"{'trace':<28}{'order':<17}{'calls in':>10}{'out':>6}{'bytes out':>11}"
        f"{'time err':>10}{'lost':>6}{'max err':>9}"
    )
    for row in rows:
        print(
            f"{row['trace']:<28}{row['order']:<17}{row['calls_in']:>10,}{row['events_out']:>6}"
            f"{row['bytes_out']:>11,}{row['weighted_error']:>10.2%}"
            f"{row['significant_lost']:>3}/{row['significant_functions']:<2}"
            f"{row['significant_max_error']:>9.1%}"
        )

    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "viztracer",
                "trace": BIG_TRACE.name,
                "repeats": repeats,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "json_load": {
                    "median_seconds": load_median,
                    "median_cpu_seconds": load_cpu_median,
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in loads),
                },
                "clean": summary,
                "targets_met": checks,
                "order_comparison": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
