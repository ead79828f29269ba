"""Benchmark: Recorder trace decoding throughput in records/s (target >= 1,000,000/s counting).

The trace is written with devtools.recorder_writer in the 3.0 layout (interprocess
compression, zlib-compressed timestamps in 1M-word blocks as Recorder's default buffer makes
them): 8 ranks of the call pattern of a checkpointing loop (open, (write lseek)^k fsync,
close, MPI_Barrier, nested in an outer rule), loop counts differing per rank so there are
several unique grammars. Reference in the same run: zlib-decompressing the same trace's
blocks alone (the floor any reader of this format pays).

    .venv/bin/python benchmarks/bench_recorder.py [--quick] [--records N]

Prints a table of medians and writes bench-results/recorder.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from devtools.recorder_writer import RankCalls, Signature, write_trace  # noqa: E402
from hpcmon.post_job.model import JobContext  # noqa: E402
from hpcmon.post_job.recorder import RecorderDataFrame, collect_recorder  # noqa: E402
from hpcmon.post_job.recorder.reader import read_recorder_trace  # noqa: E402

TARGET_RECORDS_PER_S = 1_000_000
RANKS = 8
NAMES = ["open", "write", "lseek", "fsync", "close", "read", "MPI_Barrier", "MPI_Comm_rank"]


def build_trace(path: Path, records: int) -> int:
    """Write the benchmark trace; returns the number of records it holds."""
    signatures = [
        Signature("MPI_Comm_rank", ("MPI_COMM_WORLD", "0")),
        Signature("open", ("/scratch/demo/ckpt.dat", "578", "420")),
        Signature("write", ("/scratch/demo/ckpt.dat", "%p", "1048576")),
        Signature("lseek", ("/scratch/demo/ckpt.dat", "0", "0")),
        Signature("fsync", ("/scratch/demo/ckpt.dat",)),
        Signature("close", ("/scratch/demo/ckpt.dat",)),
        Signature("MPI_Barrier", ("MPI_COMM_WORLD",), call_depth=0),
        Signature("read", ("/scratch/demo/input.dat", "%p", "4096")),
    ]
    per_rank = records // RANKS
    rng = np.random.default_rng(42)
    ranks = []
    total = 0
    for rank in range(RANKS):
        inner = 6 + rank % 3  # (write lseek)^inner per checkpoint
        step = 2 * inner + 4  # open, pairs, fsync, close, barrier
        outer = max(1, (per_rank - 2) // step)
        grammar = {
            -3: [(2, 1), (3, 1)],
            -2: [(1, 1), (-3, inner), (4, 1), (5, 1), (6, 1)],
            -1: [(0, 1), (7, 1), (-2, outer)],
        }
        n = 2 + outer * step
        gaps = rng.integers(5, 2000, size=n)
        tstart = np.cumsum(gaps)
        tend = tstart + rng.integers(0, 1000, size=n)
        ranks.append(RankCalls(grammar, tstart, tend))
        total += n
    write_trace(path, "3.0", NAMES, signatures, ranks)
    return total


def zlib_floor(path: Path) -> None:
    """Decompress every zlib block of the trace, nothing else."""
    for name in ("recorder.cst", "ug.cfg"):
        data = (path / name).read_bytes()
        offset = 0
        while offset < len(data):
            csize = int.from_bytes(data[offset : offset + 8], "little")
            zlib.decompress(data[offset + 16 : offset + 16 + csize])
            offset += 16 + csize
    data = (path / "recorder.ts").read_bytes()
    offset = 8 * RANKS
    while offset < len(data):
        csize = int.from_bytes(data[offset : offset + 8], "little")
        zlib.decompress(data[offset + 16 : offset + 16 + csize])
        offset += 16 + csize


def count_calls(path: Path) -> int:
    trace = read_recorder_trace(path)
    return sum(sum(trace.function_counts(rank).values()) for rank in trace.ranks)


def iterate_records(path: Path) -> int:
    return sum(1 for _ in read_recorder_trace(path).records())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--records", type=int, default=1_200_000)
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 7
    job = JobContext("bench")
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = Path(tmp) / "trace"
        records = build_trace(trace_dir, args.records)
        size = sum(p.stat().st_size for p in trace_dir.iterdir())
        assert count_calls(trace_dir) == records
        cases: list[tuple[str, Callable[[], object], int]] = [
            ("zlib floor (reference)", lambda: zlib_floor(trace_dir), repeats),
            ("decode (grammar + timestamps)", lambda: read_recorder_trace(trace_dir), repeats),
            ("count calls per rank x function", lambda: count_calls(trace_dir), repeats),
            (
                "RecorderDataFrame.from_recorder",
                lambda: RecorderDataFrame.from_recorder(trace_dir),
                max(1, repeats // 2),
            ),
            (
                "collect_recorder (points)",
                lambda: collect_recorder([trace_dir], job),
                max(1, repeats // 2),
            ),
            ("iterate typed Record objects", lambda: iterate_records(trace_dir), 1),
        ]
        floor = None
        results = []
        print(
            f"Recorder 3.0 trace: {records:,} records, {RANKS} ranks, {size / 1e6:.2f} MB "
            f"on disk; medians of up to {repeats} runs"
        )
        print(f"{'case':34} {'seconds':>9} {'records/s':>13} {'vs target':>10} {'vs zlib':>8}")
        for name, func, runs in cases:
            seconds = median_seconds(func, runs)
            rate = records / seconds
            if floor is None:
                floor = seconds
            row = {
                "case": name,
                "seconds": round(seconds, 4),
                "records_per_s": round(rate),
                "ratio_vs_target": round(rate / TARGET_RECORDS_PER_S, 2),
                "time_vs_zlib_floor": round(seconds / floor, 2),
                "runs": runs,
            }
            results.append(row)
            print(
                f"{name:34} {seconds:9.3f} {rate:13,.0f} {row['ratio_vs_target']:9.2f}x "
                f"{row['time_vs_zlib_floor']:7.1f}x"
            )
    counting = next(r for r in results if r["case"].startswith("count"))
    meets = counting["records_per_s"] >= TARGET_RECORDS_PER_S
    print(
        f"target >= {TARGET_RECORDS_PER_S:,} records/s for counting: "
        f"{'met' if meets else 'NOT met'}"
    )
    out = {
        "benchmark": "recorder",
        "target": f">= {TARGET_RECORDS_PER_S} records/s for counting",
        "baseline": "target rate; zlib decompression of the same blocks as the floor",
        "quick": args.quick,
        "records": records,
        "ranks": RANKS,
        "trace_bytes": size,
        "python": platform.python_version(),
        "results": results,
        "meets_target": meets,
    }
    (ROOT / "bench-results").mkdir(exist_ok=True)
    (ROOT / "bench-results" / "recorder.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
