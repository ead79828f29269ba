"""The private Slurm cluster of devtools/slurm.py: jobs run as another uid on the nodes they
asked for, the node Epilog runs once per node as root with Slurm's job variables, exit
codes come back, and the controller can go away and come back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.slurm import SlurmCluster, run_slurm, slurm_installed

SLURM_TESTS = [  # also tests/test_slurm_epilog.py's
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd runs jobs as other uids: needs root"),
    pytest.mark.skipif(
        not slurm_installed(),
        reason="slurmctld, slurmd, slurm-client or munge missing: ./scripts/install-servers.sh",
    ),
]
pytestmark = SLURM_TESTS

NOBODY = 65534

# Appends its whole environment, then its uid as one more NUL-terminated record, to a file
# per job and node: a second run on the same node would show as a second EPILOG_UID record.
EPILOG = """#!/bin/sh
out="{out}/epilog-$SLURM_JOB_ID-$SLURMD_NODENAME"
{{ env -0; printf 'EPILOG_UID=%s\\0' "$(id -u)"; }} >> "$out"
"""


@pytest.fixture(scope="module")
def epilog_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("epilog-out")


@pytest.fixture(scope="module")
def cluster(epilog_out: Path) -> Iterator[SlurmCluster]:
    script = epilog_out.parent / "epilog.sh"
    script.write_text(EPILOG.format(out=epilog_out))
    script.chmod(0o755)
    with run_slurm(nodes=3, epilog=script) as slurm:
        print(f"Slurm cluster {slurm.conf_path}: proctrack/{slurm.proctrack}")
        yield slurm


def epilog_runs(out: Path, jobid: str) -> dict[str, list[dict[str, str]]]:
    """Node -> one environment per Epilog run for that job."""
    runs: dict[str, list[dict[str, str]]] = {}
    for path in out.glob(f"epilog-{jobid}-*"):
        node = path.name.rsplit("-", 1)[1]
        env: dict[str, str] = {}
        for record in path.read_bytes().split(b"\0"):
            key, _, value = record.decode().partition("=")
            if key:
                env[key] = value
            if key == "EPILOG_UID":
                runs.setdefault(node, []).append(env)
                env = {}
    return runs


def job_output(cluster: SlurmCluster, jobid: str) -> str:
    return (cluster.jobs_dir / f"slurm-{jobid}.out").read_text()


def test_one_node_job(cluster: SlurmCluster, epilog_out: Path) -> None:
    jobid = cluster.sbatch("#!/bin/sh\nid -u\n", job_name="one-node", account="proj1")
    info = cluster.wait_job_done(jobid)
    assert info["JobState"] == "COMPLETED"
    assert info["ExitCode"] == "0:0"
    assert info["UserId"] == f"nobody({NOBODY})"
    assert job_output(cluster, jobid).split() == [str(NOBODY)]
    assert set(cluster.node_states().values()) == {"idle"}

    runs = epilog_runs(epilog_out, jobid)
    assert list(runs) == [info["NodeList"]]
    [env] = runs[info["NodeList"]]
    assert env["EPILOG_UID"] == "0"
    assert env["SLURM_JOB_ID"] == jobid
    assert env["SLURMD_NODENAME"] == info["NodeList"]
    assert env["SLURM_JOB_UID"] == str(NOBODY)
    assert env["SLURM_JOB_ACCOUNT"] == "proj1"
    assert env["SLURM_JOB_PARTITION"] == "debug"
    assert env["SLURM_CLUSTER_NAME"] == "hpcmon"
    assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert env["SLURM_CONF"] == str(cluster.conf_path)


def test_two_node_job(cluster: SlurmCluster, epilog_out: Path) -> None:
    script = "#!/bin/sh\nid -u\nsrun --ntasks-per-node=1 sh -c 'echo $SLURMD_NODENAME $(id -u)'\n"
    jobid = cluster.sbatch(script, nodes=2)
    info = cluster.wait_job_done(jobid)
    assert info["JobState"] == "COMPLETED"
    assert info["NumNodes"] == "2"
    nodes = cluster.run(["scontrol", "show", "hostnames", info["NodeList"]]).stdout.split()
    assert len(nodes) == 2
    lines = job_output(cluster, jobid).splitlines()
    assert lines[0] == str(NOBODY)
    assert sorted(lines[1:]) == [f"{node} {NOBODY}" for node in sorted(nodes)]

    runs = epilog_runs(epilog_out, jobid)
    assert sorted(runs) == sorted(nodes)  # on each of the job's nodes, nowhere else
    for node, envs in runs.items():
        assert len(envs) == 1, f"Epilog ran {len(envs)} times on {node}"
        assert envs[0]["EPILOG_UID"] == "0"
        assert envs[0]["SLURMD_NODENAME"] == node
        assert envs[0]["SLURM_NODELIST"] == info["NodeList"]
        assert envs[0]["SLURM_JOB_NUM_NODES"] == "2"
    assert set(cluster.node_states().values()) == {"idle"}


def test_exit_code(cluster: SlurmCluster, epilog_out: Path) -> None:
    jobid = cluster.sbatch("#!/bin/sh\nexit 3\n")
    info = cluster.wait_job_done(jobid)
    assert info["JobState"] == "FAILED"
    assert info["ExitCode"] == "3:0"
    [[env]] = epilog_runs(epilog_out, jobid).values()
    assert env["SLURM_JOB_EXIT_CODE2"] == "3:0"


def test_controller_stop_and_start(cluster: SlurmCluster) -> None:
    cluster.stop_controller()
    try:
        assert cluster.run(["sinfo"], check=False).returncode != 0
    finally:
        cluster.start_controller()
    cluster.wait_nodes_idle()
    jobid = cluster.sbatch("#!/bin/sh\ntrue\n")
    assert cluster.wait_job_done(jobid)["JobState"] == "COMPLETED"
