"""Benchmark of the report's history (issue 23): what the history section adds to a report.

Target: at most +0.2 s (median) to hpcmon-report over 10,000 stored jobs of 100 applications.
InfluxDB 1.6.7 is loaded with 10,000 jobs, each with the points the real hook writes for a
real Darshan log (mpi-io-test 3.5.0: darshan_job, modules, records, heatmap and bins, and the
app_run point), re-tagged per job: 100 apps x 100 jobs, 20 users, one job a minute. The report
of one application's newest job (read -> diagnosis -> text + JSON + HTML) is timed with
``--history.runs 0`` (the baseline, no history) and with the default 10 earlier runs, for both
scopes, interleaved in the same run; the figure is the difference of the medians.

    .venv/bin/python benchmarks/bench_history.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from devtools.servers import run_influxdb1  # noqa: E402
from hpcmon.post_job.app import identify  # noqa: E402
from hpcmon.post_job.darshan import collect_darshan  # noqa: E402
from hpcmon.post_job.model import JobContext  # noqa: E402
from hpcmon.post_job.points import Point, to_lines  # noqa: E402
from hpcmon.report.api import Sources, build, collect, render  # noqa: E402
from hpcmon.report.history import read_history  # noqa: E402
from hpcmon.report.influx import InfluxSettings  # noqa: E402

LOG = ROOT / "tests/data/darshan/logs/mpi-io-test-x86_64-3.5.0.darshan"
APPS, JOBS, USERS = 100, 10_000, 20
FIRST = 1_600_000_000  # job k starts FIRST + 60 k
TARGET_S = 0.2


def job_points(template: list[Point], k: int, rng: np.random.Generator) -> list[Point]:
    """The template job's points as job k (its own id, app, user, start and app_run sizes)."""
    shift = (FIRST + 60 * k) * 1_000_000_000 - min(p.time_ns for p in template if p.time_ns)
    context = JobContext(str(100_000 + k), None, f"user{k % USERS:02d}", f"app{k % APPS:03d}")
    points = [
        Point(
            p.measurement,
            {**p.tags, "jobid": context.job_id},
            dict(p.fields),
            None if p.time_ns is None else p.time_ns + shift,
        )
        for p in template
        if p.measurement != "app_run"
    ]
    points = identify(points, context)
    scale = float(rng.lognormal(0, 0.3))
    run = points[-1]
    for name in ("bytes_read", "bytes_written", "runtime"):
        run.fields[name] = float(run.fields[name]) * scale
    return points


def load(url: str, rng: np.random.Generator) -> int:
    output = collect_darshan([LOG], [], JobContext("0"))
    template = output.points
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    written, batch = 0, []
    for k in range(JOBS):
        batch += job_points(template, k, rng)
        if len(batch) >= 20_000 or k == JOBS - 1:
            body = to_lines(batch).encode()
            request = urllib.request.Request(f"{url}/write?db=hpcmon&precision=ns", body)
            opener.open(request, timeout=120).read()
            written += len(batch)
            batch = []
    return written


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 21")
    repeats = 5 if parser.parse_args().quick else 21
    rng = np.random.default_rng(23)
    results: dict[str, object] = {"jobs": JOBS, "apps": APPS, "users": USERS, "repeats": repeats}
    with run_influxdb1() as influx:
        influx.create_database("hpcmon")
        started = time.perf_counter()
        results["points"] = load(influx.url, rng)
        results["load_s"] = time.perf_counter() - started
        print(f"loaded {results['points']:,} points of {JOBS:,} jobs in {results['load_s']:.1f} s")
        settings = InfluxSettings(v1_url=influx.url, database="hpcmon")
        job = str(100_000 + JOBS - APPS + 50)  # app050's newest job
        base = Sources(settings, history_runs=0)
        timed = {
            "without": base,
            "user": replace(base, history_runs=10, history_scope="user"),
            "all": replace(base, history_runs=10, history_scope="all"),
        }

        def report(sources: Sources) -> int:
            data = collect(job, None, sources)
            report = build(data, sources)
            return sum(len(render(data, report, fmt)) for fmt in ("text", "json", "html"))

        for name, sources in timed.items():  # warm up, and check the history is there
            report(sources)
            data = collect(job, None, sources)
            if name != "without":
                assert data.history is not None and len(data.history.runs) == 10, name
        medians = {name: [] for name in timed}
        for _ in range(3):  # interleaved rounds: a slow spell of the shared box hits all alike
            for name, sources in timed.items():
                medians[name].append(median_seconds(lambda s=sources: report(s), repeats))
        seconds = {name: float(np.median(values)) for name, values in medians.items()}
        query = {
            scope: median_seconds(lambda s=scope: read_history(settings, job, None, 10, s), 21)
            for scope in ("user", "all")
        }
    for name, value in seconds.items():
        results[f"report_{name}_s"] = value
    for scope in ("user", "all"):
        added = seconds[scope] - seconds["without"]
        results[f"added_{scope}_s"] = added
        results[f"history_query_{scope}_s"] = query[scope]
        print(
            f"  report with history ({scope:>4} scope) {seconds[scope]:.3f} s, without"
            f" {seconds['without']:.3f} s: {added:+.3f} s (target <= +{TARGET_S} s);"
            f" the history reads alone {query[scope] * 1000:.1f} ms"
        )
    results["target_met"] = all(
        seconds[s] - seconds["without"] <= TARGET_S for s in ("user", "all")
    )
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "history.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
