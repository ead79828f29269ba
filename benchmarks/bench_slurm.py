"""Benchmark of the Slurm collector (issue 32): 10,000 running jobs.

Data: an squeue answer of 10,000 running and completing jobs in the collector's format
(framed as tests/data/slurm/squeue_running.out, which the real squeue printed), with
realistic job names (application, step and number; some long, some with spaces or accents),
300 users, 80 accounts, 4 partitions; a stand-in squeue program prints it (what slurmctld
itself takes to answer is not measured here: it is one squeue call per interval).

Measured:
- one Slurm sample (``SlurmCollector.sample()``: run squeue, parse, render the families,
  swap), median of repeats; the parsing alone; target < 1 s;
- the real squeue of a private Slurm holding 2,000 pending jobs (skipped without root or
  Slurm): the collector's call against ``squeue --json`` (what slurmctld and the host spend);
- scrapes of the real exporter (one scraper, gzip accepted, every 0.1 s): p50 and p99 with the
  Slurm collector sampling every second, against the control in the same run: the same
  exporter and exposition with no sample during the run (interval longer than the run), the
  two in turn twice; and, for reference, the exporter without the Slurm collector. Target: p50
  and p99 while sampling within 1.5x of the control (the noise of this shared machine).

    .venv/bin/python benchmarks/bench_slurm.py [--quick]

Prints a table and writes bench-results/slurm.json. Figures are indicative on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_jobstats import _scrape, _scrape_until  # noqa: E402
from timing import median_seconds  # noqa: E402

from devtools.servers import run_exporter  # noqa: E402
from devtools.slurm import run_slurm, slurm_installed  # noqa: E402
from hpcmon.exporter.cli import available_collectors, build_parser  # noqa: E402
from hpcmon.exporter.slurm import SlurmCollector  # noqa: E402
from hpcmon.exporter.squeue import new_marker, parse_squeue, squeue_command  # noqa: E402
from tests.exporter.slurm_fakes import RECORDED_MARKER, write_script  # noqa: E402

RESULTS = REPO / "bench-results" / "slurm.json"
JOBS = 10_000
TARGET_SAMPLE_S = 1.0
TARGET_SCRAPE_RATIO = 1.5
HELD_JOBS = 2_000  # pending jobs in the real slurmctld (sbatch --hold: about 20 ms each)
CHURN = 100  # jobs that end (and start) between two samples: 10,000 jobs of 50 min, at 30 s
NO_SAMPLE = 86400.0  # an interval longer than the run: the control, one sample at start only

APPS = ["vasp", "gromacs", "lammps", "cp2k", "wrf", "openfoam", "namd", "nwchem", "qe-pw",
        "train", "python", "julia", "matlab", "R", "bash"]  # fmt: skip
STEPS = ["relax", "md", "scf", "prod", "eq", "test", "sweep", "post", "run"]


def job_name(rng: random.Random, number: int) -> bytes:
    app, step = rng.choice(APPS), rng.choice(STEPS)
    kind = rng.random()
    if kind < 0.7:
        name = f"{app}_{step}_{number:04d}"
    elif kind < 0.85:
        name = f"{app}.sbatch"
    elif kind < 0.95:  # a command line as the name (sbatch --wrap): long, with spaces
        name = f"python3 {app}/{step}.py --config configs/{step}-{number}.yaml --seed {number}"
    else:
        name = f"étude {app} {step} n°{number}"
    return name.encode()


def write_pool(path: Path, jobs: int) -> int:
    """``jobs`` records framed with RECORDED_MARKER, one a line, in job id order; returns the
    size of the first JOBS of them (one answer)."""
    rng = random.Random(32)
    parts = []
    for index in range(jobs):
        state = rng.choices(["RUNNING", "COMPLETING", "CONFIGURING"], [97, 2.5, 0.5])[0]
        fields = [
            str(4_000_000 + index).encode(),
            f"user{rng.randrange(300):03d}".encode(),
            f"proj{rng.randrange(80):03d}".encode(),
            rng.choice([b"cpu", b"cpu", b"cpu", b"gpu", b"bigmem", b"debug"]),
            state.encode(),
            job_name(rng, index),
        ]
        parts.append(RECORDED_MARKER + b"|".join(fields) + RECORDED_MARKER + b"\n")
    path.write_bytes(b"".join(parts))
    return sum(map(len, parts[:JOBS]))


# squeue for the benchmark, in sh and C tools as squeue is C (a Python stand-in would spend
# 0.1 s of CPU per call starting itself, which is not the collector's): at each call the JOBS
# records that follow the last call's first CHURN records (CHURN jobs ended, CHURN new ones
# started), with this call's marker ("--format=<marker>%A|...").
CHURNING = """#!/bin/sh
for arg; do case "$arg" in --format=*) format="${{arg#--format=}}";; esac; done
marker="${{format%%%*}}"
calls=$(cat {counter} 2>/dev/null || echo 0)
echo $((calls + 1)) > {counter}
start=$((calls * {churn} % ({pool_jobs} - {jobs}) + 1))
tail -n +"$start" {pool} | head -n {jobs} | sed "s/{recorded}/$marker/g"
"""


def churning_squeue(path: Path, pool: Path) -> Path:
    return write_script(
        path,
        CHURNING.format(
            counter=shlex.quote(str(path.with_suffix(".calls"))),
            pool=shlex.quote(str(pool)),
            pool_jobs=2 * JOBS,
            churn=CHURN,
            jobs=JOBS,
            recorded=RECORDED_MARKER.decode(),
        ),
    )


def new_collector(squeue: Path) -> SlurmCollector:
    options = build_parser(available_collectors()).parse_args(
        ["--collector.slurm", f"--slurm.squeue={squeue}"]
    )
    return SlurmCollector(options)


def sample_cost(squeue: Path, pool: Path, repeats: int) -> dict:
    """A new collector's first sample (every job new), and the samples that follow (CHURN
    jobs new at each); the parsing of one answer alone, every record new."""
    collector = new_collector(squeue)
    sample = collector.sample()
    assert sample.up and len(sample.jobs) == JOBS and sample.bad_records == 0, sample.bad_records
    answer = b"".join(pool.read_bytes().splitlines(keepends=True)[:JOBS])
    return {
        "first_sample_median_s": median_seconds(lambda: new_collector(squeue).sample(), repeats),
        "next_sample_median_s": median_seconds(collector.sample, repeats),
        "parse_median_s": median_seconds(lambda: parse_squeue(answer, RECORDED_MARKER), repeats),
        "exposition_bytes": len(collector.exposition()),
    }


def real_squeue(held: int, repeats: int) -> dict | None:
    """The real squeue of a private Slurm 22.05 (devtools/slurm.py) holding ``held`` pending
    jobs: the collector's call against ``squeue --json``, which 22.05 answers with every job
    whatever ``--states`` says. slurmctld's side of one sample; None without Slurm or root."""
    if os.geteuid() != 0 or not slurm_installed():
        return None
    with run_slurm(nodes=1) as cluster:
        for number in range(held):
            cluster.sbatch("#!/bin/sh\ntrue\n", job_name=f"held-{number}", extra_args=["--hold"])
        ours = squeue_command("squeue", new_marker())
        json_command = ["squeue", "--json"]
        return {
            "held_jobs": held,
            "collector_call_median_s": median_seconds(lambda: cluster.run(ours), repeats),
            "json_median_s": median_seconds(lambda: cluster.run(json_command), repeats),
            "json_bytes": len(cluster.run(json_command).stdout.encode()),
            "all_jobs_in_format_bytes": len(
                cluster.run([c for c in ours if not c.startswith("--states")]).stdout.encode()
            ),
        }


def scrape_latencies(
    squeue: Path | None, interval: float, seconds: float, workdir: Path
) -> tuple[list[float], int]:
    """Scrape times of a new exporter (one scrape every 0.1 s for ``seconds``, gzip
    accepted; the first one apart), and its text size."""
    args = ["--no-collector.jobstats", "--collector.postjob",
            f"--postjob.spool-dir={workdir / 'spool'}", "--log.level=warn"]  # fmt: skip
    workdir.mkdir()
    if squeue is not None:
        args += ["--collector.slurm", f"--slurm.squeue={squeue}", f"--slurm.interval={interval:g}"]
    with run_exporter(args, workdir) as exporter:
        url = f"http://{exporter.address}/metrics"
        deadline = time.monotonic() + 60
        while squeue is not None and _scrape(url, gzip_ok=True)[2] < 500_000:
            if time.monotonic() > deadline:
                raise TimeoutError("no Slurm sample within 60 s")
            time.sleep(0.2)
        _, found = _scrape_until(url, seconds, period=0.1, offset=0.0)
        text_bytes = _scrape(url, gzip_ok=True)[2]
    return [seconds for seconds, _, _ in found], text_bytes


def summary(latencies: list[float], text_bytes: int) -> dict:
    ordered = sorted(latencies)
    return {
        "scrapes": len(ordered),
        "p50_s": statistics.median(ordered),
        "p99_s": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "text_bytes": text_bytes,
    }


def scrape_runs(squeue: Path, seconds: float, work: Path) -> dict[str, dict]:
    """The exporter without the Slurm collector, then the control (no sample during the run)
    and the Slurm collector sampling every second, in turn twice (so that what else the
    machine does falls on both alike), each kind's scrapes pooled."""
    found: dict[str, tuple[list[float], int]] = {}
    plan = [("without_slurm", None, 0.0)] + [
        ("slurm_not_sampling", squeue, NO_SAMPLE),
        ("slurm_sampling_1s", squeue, 1.0),
    ] * 2
    for number, (name, program, interval) in enumerate(plan):
        latencies, text_bytes = scrape_latencies(
            program, interval, seconds / 2, work / f"{number}-{name}"
        )
        found[name] = (found.get(name, ([], 0))[0] + latencies, text_bytes)
    return {name: summary(*kind) for name, kind in found.items()}


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    cli.add_argument("--quick", action="store_true", help="fewer repeats, shorter scrape runs")
    args = cli.parse_args(argv)
    repeats = 5 if args.quick else 15
    seconds = 10.0 if args.quick else 30.0
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        work = Path(tmp)
        pool = work / "pool.out"
        answer_bytes = write_pool(pool, 2 * JOBS)  # the pool_jobs of CHURNING
        squeue = churning_squeue(work / "squeue", pool)
        sample = sample_cost(squeue, pool, repeats)
        runs = scrape_runs(squeue, seconds, work)
    real = real_squeue(300 if args.quick else HELD_JOBS, repeats)
    control, sampling = runs["slurm_not_sampling"], runs["slurm_sampling_1s"]
    ratios = {
        "p50_sampling_over_control": sampling["p50_s"] / control["p50_s"],
        "p99_sampling_over_control": sampling["p99_s"] / control["p99_s"],
    }
    ok = sample["first_sample_median_s"] < TARGET_SAMPLE_S and all(
        ratio <= TARGET_SCRAPE_RATIO for ratio in ratios.values()
    )
    results = {
        "jobs": JOBS,
        "answer_bytes": answer_bytes,
        "churn_per_sample": CHURN,
        "repeats": repeats,
        "quick": args.quick,
        **sample,
        "scrapes": runs,
        **ratios,
        "real_squeue": real,
        "targets": {"sample_s": TARGET_SAMPLE_S, "scrape_ratio": TARGET_SCRAPE_RATIO},
        "targets_met": ok,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0],
        },
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")

    print(f"{JOBS:,} jobs, squeue answer {answer_bytes / 1e6:.2f} MB, "
          f"exposition {sample['exposition_bytes'] / 1e6:.2f} MB")  # fmt: skip
    print(f"one Slurm sample (squeue + parse + render + swap), median: first "
          f"{sample['first_sample_median_s'] * 1e3:.0f} ms (target < {TARGET_SAMPLE_S:g} s), "
          f"next ({CHURN} new jobs) {sample['next_sample_median_s'] * 1e3:.0f} ms; "
          f"parsing alone {sample['parse_median_s'] * 1e3:.0f} ms")  # fmt: skip
    print(f"\n{'scrapes (gzip, every 0.1 s)':<34}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}{'text MB':>9}")
    for name, run in runs.items():
        print(f"{name:<34}{run['scrapes']:>6}{run['p50_s'] * 1e3:>9.1f}"
              f"{run['p99_s'] * 1e3:>9.1f}{run['text_bytes'] / 1e6:>9.2f}")  # fmt: skip
    print(f"sampling / control: p50 {ratios['p50_sampling_over_control']:.2f}x, "
          f"p99 {ratios['p99_sampling_over_control']:.2f}x "
          f"(target <= {TARGET_SCRAPE_RATIO:g}x)")  # fmt: skip
    if real is None:
        print("real squeue: skipped (needs root and Slurm: ./scripts/install-servers.sh)")
    else:
        print(f"real squeue, {real['held_jobs']:,} pending jobs in slurmctld: the collector's "
              f"call {real['collector_call_median_s'] * 1e3:.0f} ms, squeue --json "
              f"{real['json_median_s'] * 1e3:.0f} ms ({real['json_bytes'] / 1e6:.1f} MB; "
              f"every job in the collector's format: "
              f"{real['all_jobs_in_format_bytes'] / 1e6:.2f} MB)")  # fmt: skip
    print(f"targets {'met' if ok else 'NOT all met'}; written to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
