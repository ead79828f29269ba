"""Issue 32: ``hpcmon-exporter --collector.slurm`` against a real Slurm (devtools/slurm.py):
running jobs with names, accounts and partitions, one with a hostile name, seen with exact
label values (and promtool's approval), gone once they end, and ``hpc_slurm_up 0`` within two
intervals of stopping slurmctld."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.slurm import SlurmCluster, run_slurm
from hpcmon.common import metric_names as names
from tests.servers import http_get, run_exporter
from tests.test_slurm_cluster import SLURM_TESTS

pytestmark = SLURM_TESTS

SECOND_PARTITION = "batch"
# Quotes, a backslash, braces, '=' and ',' (label syntax), a new line, bytes that are not
# UTF-8: Slurm keeps a job name as the bytes given.
HOSTILE_NAME = b"q\"uo'te \\back{brace}=x,\nline2 \xff\xfe end"
LONG_NAME = "analysis-" + "x" * 80
INTERVAL = 10  # seconds; squeue of a stopped slurmctld is killed after TIMEOUT
TIMEOUT = 3
# Each job waits for this file in the jobs directory, so they all run at once, then end.
JOB = "#!/bin/sh\nwhile [ ! -e {release} ]; do sleep 0.2; done\n"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    partition = f"PartitionName={SECOND_PARTITION} Nodes=n1,n2,n3 MaxTime=INFINITE State=UP"
    with run_slurm(nodes=3, extra_conf=partition) as slurm:
        yield slurm


def slurm_samples(body: bytes) -> dict[str, list]:
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.startswith("hpc_slurm_"):
                found.setdefault(sample.name, []).append(sample)
    return found


def scrape_until(address: str, done, what: str, timeout: float) -> tuple[bytes, dict]:
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_get(f"http://{address}/metrics", timeout=30)
        assert status == 200
        found = slurm_samples(body)
        if done(found):
            return body, found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {timeout} s: {found}")
        time.sleep(0.2)


def test_running_jobs_seen_then_gone_then_slurmctld_down(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = cluster.jobs_dir / f"release-{tmp_path.name}"
    script = JOB.format(release=release)
    submitted = {
        cluster.sbatch(script, job_name=LONG_NAME, account="proj1"): {
            "user": "nobody",
            "account": "proj1",
            "partition": "debug",
            "job_name": "analysis-" + "x" * 55,  # cut to 64 characters
        },
        cluster.sbatch(
            script,
            job_name=HOSTILE_NAME.decode("utf-8", "surrogateescape"),  # the bytes, as given
            account="proj2",
            partition=SECOND_PARTITION,
        ): {
            "user": "nobody",
            "account": "proj2",
            "partition": SECOND_PARTITION,
            "job_name": "q\"uo'te \\back{brace}=x,\nline2 \ufffd\ufffd end",
        },
        cluster.sbatch(script, job_name="sim", partition=SECOND_PARTITION): {
            "user": "nobody",
            "account": "",  # none given (squeue prints "(null)")
            "partition": SECOND_PARTITION,
            "job_name": "sim",
        },
    }
    for jobid in submitted:
        info = {}
        for _ in range(300):
            info = cluster.job_info(jobid)
            if info.get("JobState") == "RUNNING":
                break
            time.sleep(0.1)
        assert info.get("JobState") == "RUNNING", info

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf_path))  # the exporter's squeue asks it
    args = [
        "--no-collector.jobstats",
        "--collector.slurm",
        f"--slurm.interval={INTERVAL}",
        f"--slurm.timeout={TIMEOUT}",
    ]
    with run_exporter(args, tmp_path) as exporter:
        body, found = scrape_until(
            exporter.address,
            lambda f: (
                {s.labels["jobid"] for s in f.get(names.SLURM_JOB_INFO, [])} == set(submitted)
            ),
            "the three running jobs",
            timeout=3 * INTERVAL,
        )
        assert found[names.SLURM_UP][0].value == 1
        assert {s.labels["jobid"]: s.labels for s in found[names.SLURM_JOB_INFO]} == {
            jobid: {"jobid": jobid, "state": "RUNNING", **labels}
            for jobid, labels in submitted.items()
        }
        assert all(s.value == 1 for s in found[names.SLURM_JOB_INFO])
        jobs = {s.labels["state"]: s.value for s in found[names.SLURM_JOBS]}
        assert jobs == {"RUNNING": 3, "COMPLETING": 0}
        checked = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr

        release.touch()
        for jobid in submitted:
            assert cluster.wait_job_done(jobid)["JobState"] == "COMPLETED"
        _, found = scrape_until(
            exporter.address,
            lambda f: names.SLURM_JOB_INFO not in f,
            "no job series once the jobs ended",
            timeout=3 * INTERVAL,
        )
        assert found[names.SLURM_UP][0].value == 1
        assert {s.labels["state"]: s.value for s in found[names.SLURM_JOBS]} == {
            "RUNNING": 0,
            "COMPLETING": 0,
        }

        cluster.stop_controller()
        stopped = time.monotonic()
        _, found = scrape_until(
            exporter.address,
            lambda f: f[names.SLURM_UP][0].value == 0,
            "hpc_slurm_up 0 after slurmctld stopped",
            timeout=2 * INTERVAL,  # the bound: within two intervals
        )
        print(f"hpc_slurm_up 0 {time.monotonic() - stopped:.1f} s after slurmctld stopped")
        assert names.SLURM_JOB_INFO not in found and names.SLURM_JOBS not in found
    log = (tmp_path / "exporter.log").read_text()
    assert log.count("hpc_slurm_up 0") == 1, log
    cluster.start_controller()  # as the module's cluster was
