"""A small live site for dashboard and rule tests: the real exporter on replayed Lustre captures
(with one job in an I/O storm), a powercap tree whose counters advance, a Slurm jobs directory,
a post-job spool holding an undelivered batch, a broken exporter and a dead target, and a real
Slurm cluster running the two jobs of the compute node, listed by a pair of exporters with
--collector.slurm (a controller pair: each job exported twice); all scraped by a real
Prometheus with the generated rules.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devtools.replay import load_sections, render, write_atomically
from devtools.servers import ExporterProcess, Prometheus, free_port, run_exporter, run_prometheus
from devtools.slurm import SlurmCluster, run_slurm
from hpcmon.post_job.spool import Spool
from tests.exporter.test_geopm_helpers import write_zone
from tests.exporter.test_geopm_integration import START_UJ, EnergyWriter

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class SlurmJob:
    name: str
    account: str
    user: str
    uid: int


CAPTURE_GLOBS = (
    "*public1-OST000[7d]*lustre2.12.5.txt",  # two of the six 2.12.5 OSTs: about 1,700 jobs
    "*lustrefs-*_job_stats__lustre2.10.1.txt",
    "*jobstats_only_2.14.0_16*.txt",
)
STORM_JOB = "43"  # on lustrefs-MDT0000 and lustrefs-OST0000 (Lustre 2.10.1 captures)
OTHER_JOB = "44"  # there too
SHARED_NODE_JOBS = (STORM_JOB, OTHER_JOB)  # both run on the one compute node
# The two as real Slurm jobs (Slurm gives ids from FirstJobId: 43, then 44): job name,
# account, user (uid).
SLURM_JOBS = {
    STORM_JOB: SlurmJob("metadata-storm", "climate", "nobody", 65534),
    OTHER_JOB: SlurmJob("lattice qcd", "physics", "daemon", 1),
}
# procname_uid ids (gzip.2748), or Slurm's plain numeric ids, as slurm_job (43)
JOBID_PATTERN = r"(?P<exe>[A-Za-z_][\w-]*)\.(?P<uid>\d+)|(?P<slurm_job>\d+)"
SCRAPE_JOB = "hpcmon-jobstats"


@dataclass
class LiveStack:
    prometheus: Prometheus
    exporter: ExporterProcess
    broken_exporter: ExporterProcess
    job: str  # a job with Lustre I/O on OSTs and an MDT, running on the compute node
    controllers: list[ExporterProcess]  # --collector.slurm, both on the one cluster


def captures() -> list[Path]:
    return sorted({p for pattern in CAPTURE_GLOBS for p in (DATA / "jobstats").glob(pattern)})


class Replay(threading.Thread):
    """Rewrites jobstats files every 0.5 s with counters grown since the start; a storm (job
    id -> operations/s on each of its operations) starts `storm_start` seconds in."""

    def __init__(
        self,
        outputs: dict[Path, list],
        storms: dict[str, float] | None = None,
        storm_start: float = 0.0,
        storm_request_bytes: int = 4096,
    ) -> None:
        super().__init__(daemon=True, name="replay")
        self.outputs = outputs
        self.storms = storms or {}
        self.storm_start = storm_start
        self.storm_request_bytes = storm_request_bytes
        self.started = time.time()
        self.halt = threading.Event()
        self.tick()

    def tick(self) -> None:
        now = time.time()
        elapsed = now - self.started
        for out, sections in self.outputs.items():
            text = render(
                sections,
                elapsed,
                now,
                self.storms,
                storm_elapsed=elapsed - self.storm_start,
                storm_request_bytes=self.storm_request_bytes,
            )
            write_atomically(out, text)

    def run(self) -> None:
        while not self.halt.wait(0.5):
            self.tick()


@dataclass
class LiveExporters:
    exporter: ExporterProcess  # Lustre targets, power and jobs of one node
    broken: ExporterProcess  # a source that cannot be read, no power source
    dead_target: str  # an address where nothing listens
    controllers: list[ExporterProcess]  # Slurm's job list, twice

    @property
    def addresses(self) -> list[str]:
        exporters = [self.exporter, self.broken, *self.controllers]
        return [e.address for e in exporters] + [self.dead_target]


@contextlib.contextmanager
def run_slurm_jobs(workdir: Path) -> Iterator[list[ExporterProcess]]:
    """A real Slurm cluster running SLURM_JOBS (until the end), and two exporters listing its
    queue with --collector.slurm and nothing else, as a controller pair would."""
    # linuxproc: no cgroup of job 43 that another cluster of the same ids would share
    with run_slurm(
        nodes=len(SLURM_JOBS), proctrack="linuxproc", extra_conf={"FirstJobId": 43}
    ) as slurm:
        for jobid, job in SLURM_JOBS.items():
            got = slurm.sbatch(
                "#!/bin/sh\nexec sleep 100000\n",
                uid=job.uid,
                gid=job.uid,
                job_name=job.name,
                account=job.account,
            )
            assert got == jobid, f"Slurm gave job id {got}, not {jobid}"
        for jobid in SLURM_JOBS:
            _wait_running(slurm, jobid)
        args = ["--no-collector.jobstats", "--collector.slurm", "--slurm.interval=1"]
        env = {"SLURM_CONF": str(slurm.conf_path)}
        with (
            run_exporter(args, workdir, env=env, log_name="controller-1.log") as first,
            run_exporter(args, workdir, env=env, log_name="controller-2.log") as second,
        ):
            yield [first, second]


def _wait_running(slurm: SlurmCluster, jobid: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (state := slurm.job_info(jobid).get("JobState")) != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"Slurm job {jobid} not running after {timeout}s: {state}")
        time.sleep(0.2)


@contextlib.contextmanager
def run_live_exporters(workdir: Path) -> Iterator[LiveExporters]:
    jobstats = workdir / "jobstats.txt"
    replay = Replay({jobstats: load_sections(captures())}, {STORM_JOB: 12_000})
    sysfs = workdir / "sysfs"
    zones = {zone: write_zone(sysfs, zone, f"package-{zone}", START_UJ[zone]) for zone in START_UJ}
    write_zone(sysfs, "0:0", "dram", 1_000_000)
    energy = EnergyWriter(zones)
    jobs_dir = workdir / "slurm-jobs"
    jobs_dir.mkdir()
    for job in SHARED_NODE_JOBS:
        (jobs_dir / job).write_text("SLURM_JOB_UID=1000\n")
    spool_dir = workdir / "post-job-spool"  # a batch the node's hook could not deliver yet
    Spool(spool_dir, "influx-v1").add([f"darshan_job,jobid={STORM_JOB} bytes=1 1000000000"])
    empty_sysfs = workdir / "empty-sysfs"
    empty_sysfs.mkdir()
    (workdir / "broken").mkdir()
    replay.start()
    energy.start()
    exporter_args = [
        "--jobstats.source=file",
        f"--jobstats.path={jobstats}",
        "--jobstats.interval=1",
        "--jobstats.max-jobs=800",  # public1-OST0007 lists 874 jobs: some are dropped
        f"--jobstats.jobid-pattern={JOBID_PATTERN}",
        "--collector.geopm",
        "--geopm.backend=powercap",
        f"--path.sysfs={sysfs}",
        "--geopm.interval=0.5",
        "--collector.jobs",
        f"--jobs.dir={jobs_dir}",
        "--collector.postjob",
        f"--postjob.spool-dir={spool_dir}",
    ]
    broken_args = [
        "--jobstats.source=file",
        f"--jobstats.path={workdir / 'missing' / 'jobstats.txt'}",
        "--jobstats.interval=1",
        "--collector.geopm",
        "--geopm.backend=powercap",
        f"--path.sysfs={empty_sysfs}",
    ]
    dead_target = f"127.0.0.1:{free_port()}"  # nothing listens there
    try:
        with (
            run_exporter(exporter_args, workdir) as exporter,
            run_exporter(broken_args, workdir / "broken") as broken,
            run_slurm_jobs(workdir) as controllers,
        ):
            yield LiveExporters(exporter, broken, dead_target, controllers)
    finally:
        replay.halt.set()
        energy.halt.set()
        replay.join()
        energy.join()


def scrape_config(addresses: list[str]) -> list[dict]:
    return [{"job_name": SCRAPE_JOB, "static_configs": [{"targets": addresses}]}]


@contextlib.contextmanager
def run_live_stack(workdir: Path, rule_files: list[str]) -> Iterator[LiveStack]:
    with run_live_exporters(workdir) as live:
        scrape = scrape_config(live.addresses)
        with run_prometheus(scrape, scrape_interval="2s", rule_files=rule_files) as prom:
            yield LiveStack(prom, live.exporter, live.broken, STORM_JOB, live.controllers)
