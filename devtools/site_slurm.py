"""A busy site Slurm on this host, for checking that the test suite does not read the host:

    python -m devtools.site_slurm --seconds 900 &   # then, beside it:
    make test

A private Slurm (devtools.slurm: its own munge, controller and two slurmd named site1 and
site2, proctrack/cgroup where the machine allows) keeps three jobs of uid 65534 queued or
running, each sleeping 3 minutes, until the time is up or SIGTERM/SIGINT; then everything it
started is stopped and removed. Its jobs are in the host's cgroups and /proc as a site's are:
an exporter or hook under test that read the host by accident would see them.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from devtools.slurm import FINISHED_STATES, run_slurm

JOBS = 3
JOB_SCRIPT = "#!/bin/sh\nsleep 180\n"


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)  # leaves run_slurm's block: its cluster is stopped and removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=900.0, help="how long it runs")
    options = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with run_slurm(nodes=2, cluster_name="site", node_prefix="site") as cluster:
        print(f"site Slurm up (proctrack/{cluster.proctrack})", flush=True)
        end = time.monotonic() + options.seconds
        queued: list[str] = []
        while time.monotonic() < end:
            queued = [
                job
                for job in queued
                if cluster.job_info(job).get("JobState") not in FINISHED_STATES
            ]
            while len(queued) < JOBS:
                queued.append(cluster.sbatch(JOB_SCRIPT, job_name="site-job"))
                print(f"submitted job {queued[-1]}", flush=True)
            time.sleep(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
