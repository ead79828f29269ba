"""Benchmark of the Darshan source (issues 4 and 12).

Baseline, measured in the same run: PyDarshan reading the same log the way its users do
(DarshanReport + records[mod].to_df() for every I/O module we use, + the heatmaps).
Target (issues 4, 20): the hook's whole work per log (read + signals + points, the job's
record included) <= 1.5 x that read time on the largest fixture logs (variants measured in
turn within each round, median of rounds), and a synthetic 100,000-record POSIX log written
as darshan-parser text processed in < 10 s. "ours+child" is what the hook runs: binary logs
are read in a forked child (crash safety), one child per job; the "job of N logs" row shows
that cost spread over the logs of one job.

Issue 12 (small logs): per small fixture log, the median of PyDarshan's own read (baseline)
against the crash-isolating child: "child read" (the log read in the reader child and sent
back), "read+sig+pts" (issue 20's time per log: child read + signals + points) and "child
total" (all the hook does for a job of that one log: + the job's diagnosis), all with the
child already forked (it is forked once per process and reused), plus the one-off cost of
forking it ("first log"). Target: ratio to the baseline <= 1.5, measured in the same run.

    .venv/bin/python benchmarks/bench_darshan.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from hpcmon.post_job.darshan import collect_darshan  # noqa: E402
from hpcmon.post_job.darshan.model import IO_MODULES  # noqa: E402
from hpcmon.post_job.darshan.points import log_points  # noqa: E402
from hpcmon.post_job.darshan.reader_pydarshan import (  # noqa: E402
    close_reader_child,
    read_darshan_log,
    read_darshan_logs_isolated,
)
from hpcmon.post_job.darshan.signals import compute_signals  # noqa: E402
from hpcmon.post_job.model import JobContext  # noqa: E402

LOGS = ROOT / "tests" / "data" / "darshan" / "logs"
BIG_LOGS = {
    "drishti 384 ranks": LOGS
    / ("jlbez_8a_benchmark_write_parallel_id1322696_8-21-14519-8141979180909667175_12.darshan"),
    "e3sm 512 ranks": LOGS / "e3sm_io_heatmap_only.darshan",
    "skew 2048 ranks": LOGS / "skew-autobench-ior.darshan",
}
SMALL_LOGS = sorted(p for p in LOGS.glob("*.darshan") if p not in BIG_LOGS.values())
JOB = JobContext("bench")


def pydarshan_baseline(path: Path) -> None:
    import darshan

    report = darshan.DarshanReport(str(path), read_all=False)
    for module in report.modules:
        if module in IO_MODULES:
            report.mod_read_all_records(module, warnings=False)
            report.records[module].to_df()
    if "HEATMAP" in report.modules:
        report.read_all_heatmap_records()


def in_process(path: Path) -> None:
    log = read_darshan_log(path)
    log_points(log.job, compute_signals(log), JOB.base_tags(), log.names, 100)


def isolated(path: Path) -> None:
    output = collect_darshan([path], [], JOB)
    assert output.points


def isolated_log_only(path: Path) -> None:
    """What issue 20 times per log: read, signals, points (not the job's diagnosis)."""
    output = collect_darshan([path], [], JOB, diagnose=False)
    assert output.points


def child_read(path: Path) -> None:
    ((_, log),) = read_darshan_logs_isolated([path])
    assert not isinstance(log, Exception)


def first_log(path: Path) -> None:
    """The first log of a hook run: fork the reader child, read, then end the child and wait
    for it (a new run starts without one)."""
    import os

    from hpcmon.post_job.darshan import reader_pydarshan

    isolated(path)
    close_reader_child()
    for pid in list(reader_pydarshan._EXITING):
        os.waitpid(pid, 0)
        reader_pydarshan._EXITING.remove(pid)


def interleaved(variants: dict, rounds: int, inner: int = 3) -> list[float]:
    """Median time of each variant, the variants measured in turn within each round (the box
    is shared: interleaving keeps a busy moment from landing on one variant only)."""
    import statistics

    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, action in variants.items():
            times[name].append(median_seconds(action, inner))
    return [statistics.median(times[name]) for name in variants]


def small_log_rows(rounds: int) -> list[dict]:
    """Per small log, the variants measured in turn within each round, median of rounds."""
    rows = []
    for path in SMALL_LOGS:
        pydarshan_baseline(path)  # warm the page cache
        isolated(path)  # and the reader child
        variants = {
            "baseline": lambda p=path: pydarshan_baseline(p),
            "read": lambda p=path: child_read(p),
            "total": lambda p=path: isolated(p),
            "log only": lambda p=path: isolated_log_only(p),
        }
        baseline, read, total, log_only = interleaved(variants, rounds)
        close_reader_child()
        cold = median_seconds(lambda p=path: first_log(p), max(3, rounds // 2))
        isolated(path)  # fork the child again for the next log's warm timings
        rows.append(
            {
                "log": path.name,
                "baseline_pydarshan_read_s": baseline,
                "child_read_s": read,
                "child_total_s": total,
                "child_read_signals_points_s": log_only,
                "first_log_with_fork_s": cold,
                "ratio_child_read": read / baseline,
                "ratio_child_total": total / baseline,
                "ratio_read_signals_points": log_only / baseline,
            }
        )
    return rows


def many_logs_baseline(paths: list[Path]) -> None:
    for path in paths:
        pydarshan_baseline(path)


def many_logs_in_process(paths: list[Path]) -> None:
    for path in paths:
        in_process(path)


def many_logs_isolated(paths: list[Path]) -> None:
    output = collect_darshan(paths, [], JOB)
    assert len({p.fields["log_jobid"] for p in output.points if "log_jobid" in p.fields}) > 1


def write_synthetic_text(path: Path, records: int) -> None:
    """A darshan-parser-format POSIX log: `records` files over 512 ranks + 100 shared files."""
    from darshan.backend.cffi_backend import counter_names, fcounter_names

    ints, floats = counter_names("POSIX"), fcounter_names("POSIX")
    if ints is None or floats is None:
        raise RuntimeError("darshan's libdarshan-util names no POSIX counters")
    with path.open("w") as out:
        out.write("# darshan log version: 3.41\n# exe: /apps/synthetic -n 100000\n")
        out.write("# uid: 1000\n# jobid: 1\n# start_time: 1700000000\n")
        out.write("# end_time: 1700003600\n# nprocs: 512\n# run time: 3600.0000\n\n")
        for number in range(records):
            rank = -1 if number < 100 else number % 512
            record_id = 10**15 + number
            prefix = f"POSIX\t{rank}\t{record_id}\t"
            suffix = f"\t/lus/scratch/run/out.{number:06d}\t/lus/scratch\tlustre\n"
            size = 4096 * (1 + number % 7)
            lines = [
                f"{prefix}{name}\t{(number % 13) * (1 + i % 5)}{suffix}"
                for i, name in enumerate(ints)
            ]
            lines[3] = f"{prefix}POSIX_READS\t{number % 17}{suffix}"
            lines[14] = f"{prefix}POSIX_BYTES_READ\t{(number % 17) * size}{suffix}"
            lines += [
                f"{prefix}{name}\t{0.000137 * (1 + (number + i) % 9):.6f}{suffix}"
                for i, name in enumerate(floats)
            ]
            out.write("".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 20,000 records")
    args = parser.parse_args()
    repeats = 1 if args.quick else 5
    synthetic_records = 20_000 if args.quick else 100_000
    import darshan  # noqa: F401  (load the C library once, outside the timings)

    rows = []
    for label, path in BIG_LOGS.items():
        pydarshan_baseline(path)  # warm the page cache
        isolated(path)  # and the reader child
        baseline, ours, ours_isolated = interleaved(
            {
                "baseline": lambda p=path: pydarshan_baseline(p),
                "in process": lambda p=path: in_process(p),
                "isolated": lambda p=path: isolated(p),
            },
            max(3, repeats * 2),
        )
        rows.append(
            {
                "case": label,
                "baseline_pydarshan_read_s": baseline,
                "signals_in_process_s": ours,
                "signals_isolated_child_s": ours_isolated,
                "ratio_in_process": ours / baseline,
                "ratio_isolated": ours_isolated / baseline,
            }
        )
    job_logs = SMALL_LOGS * 3  # a job that left many small logs (e.g. one per srun step)
    baseline = median_seconds(lambda: many_logs_baseline(job_logs), repeats)
    ours = median_seconds(lambda: many_logs_in_process(job_logs), repeats)
    ours_isolated = median_seconds(lambda: many_logs_isolated(job_logs), repeats)
    rows.append(
        {
            "case": f"job of {len(job_logs)} logs",
            "baseline_pydarshan_read_s": baseline,
            "signals_in_process_s": ours,
            "signals_isolated_child_s": ours_isolated,
            "ratio_in_process": ours / baseline,
            "ratio_isolated": ours_isolated / baseline,
        }
    )
    small = small_log_rows(max(5, repeats * 2))
    with tempfile.TemporaryDirectory() as directory:
        text = Path(directory) / "synthetic.txt"
        start = time.perf_counter()
        write_synthetic_text(text, synthetic_records)
        generate = time.perf_counter() - start
        size_mb = text.stat().st_size / 1e6
        text_time = median_seconds(lambda: collect_darshan([], [text], JOB), max(1, repeats // 2))
        out = Path(directory) / "signals.txt"
        with_output = median_seconds(lambda: collect_darshan([], [text], JOB, signals_out=out), 1)
    print(
        f"{'log':<20} {'PyDarshan read':>15} {'ours':>9} {'ratio':>6} "
        f"{'ours+child':>11} {'ratio':>6}   (target ratio <= 1.5)"
    )
    for row in rows:
        print(
            f"{row['case']:<20} {row['baseline_pydarshan_read_s']:>14.3f}s "
            f"{row['signals_in_process_s']:>8.3f}s {row['ratio_in_process']:>6.2f} "
            f"{row['signals_isolated_child_s']:>10.3f}s {row['ratio_isolated']:>6.2f}"
        )
    print(
        f"\n{'small log (issue 12)':<44} {'PyDarshan':>10} {'child read':>11} {'ratio':>6}"
        f" {'read+sig+pts':>12} {'ratio':>6} {'child total':>12} {'ratio':>6} {'1st log+fork':>12}"
    )
    for row in small:
        print(
            f"{row['log'][:44]:<44} {row['baseline_pydarshan_read_s'] * 1e3:>8.2f}ms"
            f" {row['child_read_s'] * 1e3:>9.2f}ms {row['ratio_child_read']:>6.2f}"
            f" {row['child_read_signals_points_s'] * 1e3:>10.2f}ms"
            f" {row['ratio_read_signals_points']:>6.2f}"
            f" {row['child_total_s'] * 1e3:>10.2f}ms {row['ratio_child_total']:>6.2f}"
            f" {row['first_log_with_fork_s'] * 1e3:>8.2f}ms"
        )
    base_sum = sum(r["baseline_pydarshan_read_s"] for r in small)
    read_sum = sum(r["child_read_s"] for r in small)
    log_only_sum = sum(r["child_read_signals_points_s"] for r in small)
    total_sum = sum(r["child_total_s"] for r in small)
    print(
        f"{'all small logs (sum of medians)':<44} {base_sum * 1e3:>8.2f}ms {read_sum * 1e3:>9.2f}ms"
        f" {read_sum / base_sum:>6.2f} {log_only_sum * 1e3:>10.2f}ms"
        f" {log_only_sum / base_sum:>6.2f} {total_sum * 1e3:>10.2f}ms {total_sum / base_sum:>6.2f}"
        "   (target ratio <= 1.5)"
    )
    print(
        f"\nsynthetic darshan-parser text: {synthetic_records} POSIX records, {size_mb:.0f} MB "
        f"(generated in {generate:.1f}s)"
    )
    print(f"  text -> signals -> points        {text_time:6.2f}s   (target < 10 s)")
    print(f"  ... plus --signals-out text file {with_output:6.2f}s")
    results = {
        "logs": rows,
        "small_logs": small,
        "synthetic_text": {
            "records": synthetic_records,
            "megabytes": size_mb,
            "points_s": text_time,
            "with_signals_out_s": with_output,
            "target_s": 10.0,
        },
        "repeats": repeats,
        "quick": args.quick,
    }
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "darshan.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
