"""Benchmark of the bounded reading child (issue 22).

What the hook pays for reading a job's inputs in a forked, bounded child (as the job's user
when it is root) instead of in its own process. Baseline, measured in the same run: the same
source requests collected in this process (``sources.collect``). The issue sets no target;
the ratio is reported so a change that makes it worse shows.

    .venv/bin/python benchmarks/bench_reading_child.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from hpcmon.post_job.model import JobContext  # noqa: E402
from hpcmon.post_job.reading import ReadPolicy, collect_isolated  # noqa: E402
from hpcmon.post_job.sources import SourceRequest, collect  # noqa: E402

DATA = ROOT / "tests" / "data"
JOB = JobContext("1", "bench")
CASES = {
    "1 Darshan log": [
        SourceRequest(
            "darshan", ([DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"], [])
        )
    ],
    "a job: 12 logs, 3 traces, 2 reports": [
        SourceRequest("darshan", (sorted((DATA / "darshan" / "logs").glob("*.darshan"))[:12], [])),
        SourceRequest("viztracer", (sorted((DATA / "viztracer").glob("*.json*"))[:3],)),
        SourceRequest("geopm_report", (sorted((DATA / "geopm_report").glob("geopm-2*.yaml"))[:2],)),
    ],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    repeats = 3 if parser.parse_args().quick else 9
    policy = ReadPolicy(memory_limit_mib=2048, cpu_seconds=60.0)
    results = []
    for case, requests in CASES.items():
        collect(requests, JOB)  # warm: imports, PyDarshan's reader child
        collect_isolated(requests, JOB, policy)
        inline = median_seconds(lambda requests=requests: collect(requests, JOB), repeats)
        child = median_seconds(
            lambda requests=requests: collect_isolated(requests, JOB, policy), repeats
        )
        points = len(collect_isolated(requests, JOB, policy).points)
        results.append(
            {
                "case": case,
                "points": points,
                "in_process_s": round(inline, 4),
                "reading_child_s": round(child, 4),
                "ratio": round(child / inline, 2),
            }
        )
    print(f"Reading child vs in-process, medians of {repeats} runs; {platform.python_version()}")
    print(f"{'case':38} {'points':>7} {'in-process s':>12} {'child s':>8} {'ratio':>6}")
    for row in results:
        print(
            f"{row['case']:38} {row['points']:7d} {row['in_process_s']:12.3f} "
            f"{row['reading_child_s']:8.3f} {row['ratio']:6.2f}"
        )
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "reading_child.json").write_text(
        json.dumps(
            {
                "benchmark": "reading_child",
                "target": None,
                "baseline": "the same requests collected in the hook's own process",
                "repeats": repeats,
                "python": platform.python_version(),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
