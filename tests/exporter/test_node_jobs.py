"""Jobs on the node: Slurm cgroup v1/v2 trees (layouts from Slurm's cgroup documentation),
a prolog-written directory, merging, hostile names, and the exposition."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.exporter.cli import available_collectors, build_parser
from hpcmon.exporter.node_jobs import (
    NodeJob,
    NodeJobsCollector,
    jobs_from_cgroup_v1,
    jobs_from_cgroup_v2,
    jobs_from_prolog_dir,
    merge_jobs,
)
from tests.exporter.test_geopm_helpers import DATA

# A real /proc/<pid>/status (Linux 6.18) of a process running as uid 1000.
STATUS = DATA / "node_jobs" / "proc_pid_status_uid1000.txt"


def mkdirs(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).mkdir(parents=True, exist_ok=True)


@pytest.fixture
def cgroup_v1(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    mkdirs(
        root,
        "cpuset/slurm/uid_2001/job_4242/step_0/task_0",
        "freezer/slurm/uid_2001/job_4242/step_batch",  # same job, another controller
        "memory/slurm_node07/uid_3003/job_77/step_0",  # multiple-slurmd variant
        "cpuset/slurm/system",  # slurmstepd's own, not a job
        "cpuset/slurm/uid_x/job_1",  # not a uid
        "cpuset/user.slice/job_5",
    )  # not under slurm
    return root


@pytest.fixture
def cgroup_v2(tmp_path: Path) -> tuple[Path, Path]:
    root, procfs = tmp_path / "cgroup2", tmp_path / "proc"
    scope = "system.slice/slurmstepd.scope"
    mkdirs(
        root,
        f"{scope}/system",
        f"{scope}/job_900/step_0/user/task_0",
        "system.slice/node07_slurmstepd.scope/job_901/step_batch/user/task_0",
        "system.slice/sshd.service/job_902",
    )
    (root / scope / "job_900/step_0/user/task_0/cgroup.procs").write_text("12345\n12346\n")
    # slurmstepd has its own leaf next to user/ and runs as root: not the job's uid.
    (root / scope / "job_900/step_0/slurm").mkdir()
    (root / scope / "job_900/step_0/slurm/cgroup.procs").write_text("555\n")
    (procfs / "555").mkdir(parents=True)
    (procfs / "555" / "status").write_text(
        re.sub(r"(?m)^(Uid|Gid):.*$", "\\1:\t0\t0\t0\t0", STATUS.read_text())
    )
    (
        root
        / "system.slice/node07_slurmstepd.scope/job_901/step_batch/user/task_0"
        / "cgroup.procs"
    ).write_text("999\n")  # process already gone from procfs
    (procfs / "12345").mkdir()
    shutil.copy(STATUS, procfs / "12345" / "status")
    return root, procfs


def test_cgroup_v1(cgroup_v1: Path) -> None:
    assert merge_jobs(jobs_from_cgroup_v1(cgroup_v1)) == [
        NodeJob("4242", "2001"),
        NodeJob("77", "3003"),
    ]


def test_cgroup_v2_uid_from_a_job_process(cgroup_v2: tuple[Path, Path]) -> None:
    root, procfs = cgroup_v2
    assert sorted(jobs_from_cgroup_v2(root, procfs), key=lambda j: j.jobid) == [
        NodeJob("900", "1000"),
        NodeJob("901", ""),
    ]


def test_prolog_directory(tmp_path: Path) -> None:
    (tmp_path / "4242").write_text("SLURM_JOB_ID=4242\nSLURM_JOB_UID=2001\n")
    (tmp_path / "5000").write_text("3003\n")
    (tmp_path / "5002").write_text("")
    (tmp_path / ".5001.tmp").write_text("1\n")  # being written
    (tmp_path / "bad name!").write_text("1\n")
    (tmp_path / "subdir").mkdir()
    jobs, problems = jobs_from_prolog_dir(tmp_path)
    assert sorted(jobs, key=lambda j: j.jobid) == [
        NodeJob("4242", "2001"),
        NodeJob("5000", "3003"),
        NodeJob("5002", ""),
    ]
    assert len(problems) == 1 and "bad name!" in problems[0]
    assert jobs_from_prolog_dir(tmp_path / "missing") == ([], [])


def test_known_uid_wins_when_merging() -> None:
    assert merge_jobs([NodeJob("7", "")], [NodeJob("7", "1000"), NodeJob("8", "")]) == [
        NodeJob("7", "1000"),
        NodeJob("8", ""),
    ]


def test_collector_exposition(cgroup_v1: Path, tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    (jobs_dir / "4243").write_text("UID=2001\n")
    options = build_parser(available_collectors()).parse_args(
        ["--collector.jobs", "--path.cgroupfs", str(cgroup_v1), "--jobs.dir", str(jobs_dir)]
    )
    body = NodeJobsCollector(options).exposition()
    got = {
        (s.labels["jobid"], s.labels["uid"]): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
        if s.name == "hpc_node_job_info"
    }
    assert got == {("4242", "2001"): 1.0, ("4243", "2001"): 1.0, ("77", "3003"): 1.0}
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    assert check.returncode == 0, check.stderr
    (jobs_dir / "4243").unlink()  # epilog removed it: gone at the next scrape
    assert b'jobid="4243"' not in NodeJobsCollector(options).exposition()


def test_nothing_mounted(tmp_path: Path) -> None:
    options = build_parser(available_collectors()).parse_args(
        ["--path.cgroupfs", str(tmp_path / "none"), "--jobs.dir", str(tmp_path / "none")]
    )
    body = NodeJobsCollector(options).exposition()
    assert b"hpc_node_job_info{" not in body


names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=70,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(names, st.binary(max_size=200), max_size=5),
    dirs=st.lists(names, max_size=4),
)
def test_hostile_names_and_contents(
    tmp_path: Path, files: dict[str, bytes], dirs: list[str]
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    jobs_dir = root / "jobs"
    jobs_dir.mkdir()
    for name, content in files.items():
        if name in (".", ".."):
            continue
        try:
            (jobs_dir / name).write_bytes(content)
        except OSError:  # name too long for the file system
            continue
    for name in dirs:
        if name in (".", ".."):
            continue
        try:
            (root / "cg" / "cpuset" / "slurm" / "uid_1" / f"job_{name}").mkdir(parents=True)
            (root / "cg" / "system.slice" / "slurmstepd.scope" / f"job_{name}").mkdir(parents=True)
        except OSError:
            continue
    options = build_parser(available_collectors()).parse_args(
        ["--path.cgroupfs", str(root / "cg"), "--jobs.dir", str(jobs_dir)]
    )
    body = NodeJobsCollector(options).exposition()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            assert re.fullmatch(r"[A-Za-z0-9_.+\-]{1,64}", sample.labels["jobid"])
            assert re.fullmatch(r"\d{0,10}", sample.labels["uid"])
