"""Slurm's view of a finished job: the environment Slurm 22.05 really gives the node epilog
(tests/data/slurm), the answer of squeue, which node reads the job's inputs, the slurm_job
point. The real Slurm runs in tests/test_slurm_epilog.py."""

from __future__ import annotations

import stat
import string
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.slurm import (
    SlurmEnvironmentError,
    SlurmJob,
    first_node,
    job_exit,
    node_position,
    reads_job_inputs,
    slurm_job,
    slurm_node,
)
from hpcmon.post_job.slurm_controller import SQUEUE_FORMAT, ask_controller, parse_squeue
from hpcmon.post_job.slurm_points import slurm_job_point

DATA = Path(__file__).parent.parent / "data" / "slurm"


def environment(name: str) -> dict[str, str]:
    lines = (DATA / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_the_22_05_node_epilog_of_a_two_node_job() -> None:
    """What the node epilog of Debian's Slurm 22.05 is given: node list and exit status, no
    job name, no times."""
    job = slurm_job(environment("epilog-env-2nodes-n1.txt"))
    assert job == SlurmJob(
        "7577001",
        "nobody",
        "65534",
        None,
        None,
        None,
        "65534",
        partition="debug",
        nodelist="n[1-2]",
        num_nodes=2,
        account="acct1",
        exit_code=0,
        exit_signal=0,
    )


def test_only_the_first_node_reads_the_job_inputs() -> None:
    first = slurm_node(environment("epilog-env-2nodes-n1.txt"))
    second = slurm_node(environment("epilog-env-2nodes-n2.txt"))
    assert (first.name, first.job_nodelist) == ("n1", "n[1-2]")
    assert reads_job_inputs(first) and not reads_job_inputs(second)
    # EpilogSlurmctld (and older releases' epilogs) name the list SLURM_JOB_NODELIST
    controller = slurm_job(environment("epilogslurmctld-env-2nodes.txt"))
    assert controller is not None and controller.nodelist == "n[1-2]"
    assert controller.job_name == "twonode"


def test_without_a_node_name_or_list_the_node_reads_everything() -> None:
    env = environment("epilog-env-2nodes-n2.txt")
    for missing in ("SLURMD_NODENAME", "SLURM_NODELIST"):
        partial = {k: v for k, v in env.items() if k != missing}
        assert reads_job_inputs(slurm_node(partial))


@pytest.mark.parametrize(
    ("name", "code", "signal"), [("epilog-env-exit3.txt", 3, 0), ("epilog-env-kill9.txt", 0, 9)]
)
def test_exit_status_and_signal_from_the_epilog(name: str, code: int, signal: int) -> None:
    env = environment(name)
    assert job_exit(env) == {"exit_code": code, "exit_signal": signal}
    # the wait status alone (SLURM_JOB_EXIT_CODE: 768 = exit 3, 9 = SIGKILL) says the same
    assert job_exit({"SLURM_JOB_EXIT_CODE": env["SLURM_JOB_EXIT_CODE"]}) == job_exit(env)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("n1", "n1"),
        ("n[1-2]", "n1"),
        ("n[07-12],m3", "n07"),
        ("r[2-3]-n[1,5-6]", "r2-n1"),
        ("gpu[3,1]", "gpu3"),
        ("a,b[1-2]", "a"),
        ("", None),
        ("n[1-2", None),
    ],
)
def test_first_node(nodelist: str, first: str | None) -> None:
    assert first_node(nodelist) == first


@pytest.mark.parametrize(
    ("nodelist", "node", "place"),
    [
        ("n1", "n1", 0),
        ("n[1-3]", "n3", 2),
        ("n[07-12],m3", "m3", 6),
        ("n[07-12],m3", "n10", 3),
        ("r[2-3]-n[1,5-6]", "r3-n1", 3),
        ("gpu[3,1]", "gpu1", 1),
        ("a,b[1-2]", "b2", 2),
        ("n[1-2]", "n3", None),  # not in the list
        ("n[1-2", "n1", None),  # malformed
        ("n[2-1]", "n1", None),
        ("n[1-x]", "n1", None),
        ("", "n1", None),
        ("n[0-99999999999999]", "m1", None),  # hostile: not read to its end
        ("n[0-999],m[0-999],k[0-999]", "k999", 2999),
    ],
)
def test_node_position(nodelist: str, node: str, place: int | None) -> None:
    """A node's place in its job's node list (the real scontrol agrees: test_slurm_epilog)."""
    assert node_position(nodelist, node) == place


@given(st.text(max_size=60))
def test_any_environment_text_is_refused_or_slurm_s(value: str) -> None:
    """A value that is not what Slurm would set is left out (or refused in one line), never
    used raw: node names, lists, partitions and accounts are Slurm names, exit statuses in
    range."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "0"}
    for key in (
        "SLURMD_NODENAME",
        "SLURM_NODELIST",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_EXIT_CODE2",
        "SLURM_JOB_EXIT_CODE",
        "SLURM_JOB_NAME",
    ):
        try:
            job = slurm_job({**env, key: value})
        except SlurmEnvironmentError:
            continue
        assert job is not None
        allowed = set(string.ascii_letters + string.digits + "_.-[],")
        for text in (job.partition, job.account, job.nodelist):
            assert text is None or (set(text) <= allowed and text == value.strip())
        assert job.exit_code is None or 0 <= job.exit_code <= 255
        assert job.exit_signal is None or 0 <= job.exit_signal <= 128
        assert job.job_name is None or job.job_name.isprintable()
        node = slurm_node({key: value})
        assert node.name is None or node.name == value.strip()


def test_squeue_s_answer() -> None:
    answer = "7577001|debug|acct1|2|n[1-2]|1795879517|1795879518|twonode\n"
    assert parse_squeue("7577001", answer) == SlurmJob(
        "7577001",
        None,
        None,
        1795879517.0,
        1795879518.0,
        "twonode",
        partition="debug",
        nodelist="n[1-2]",
        num_nodes=2,
        account="acct1",
    )
    unknown = parse_squeue("7", "7|debug|(null)|1|n1|N/A|Unknown|x\n")
    assert (unknown.account, unknown.start, unknown.end) == (None, None, None)


@given(st.text(min_size=1, max_size=80).filter(lambda s: s.strip()))
def test_a_job_name_is_the_rest_of_the_answer(name: str) -> None:
    """The job name is the user's own text, separators and line breaks included: it is the
    last column, so it cannot move Slurm's columns."""
    job = parse_squeue("42", f"42|debug|acct|1|n1|100|200|{name}\n")
    assert (job.partition, job.account, job.num_nodes, job.start, job.end) == (
        "debug",
        "acct",
        1,
        100.0,
        200.0,
    )
    assert job.job_name is not None and job.job_name.isprintable()
    if name.isprintable():
        assert job.job_name == name[:200]


@pytest.mark.parametrize(
    "answer", ["", "\n", "8|debug|a|1|n1|1|2|x\n", "garbage", "42|debug|a|1|n1|1|2"[:10]]
)
def test_an_answer_about_another_job_or_none_is_refused(answer: str) -> None:
    from hpcmon.post_job.slurm_controller import ControllerAnswerError

    with pytest.raises(ControllerAnswerError):
        parse_squeue("42", answer)


def _program(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_squeue_is_asked_once_in_its_fixed_format(tmp_path, caplog) -> None:
    """The command line and time format the hook relies on, with a program that answers as
    squeue does (the real squeue answers in tests/test_slurm_epilog.py)."""
    record = tmp_path / "argv"
    squeue = _program(
        tmp_path / "squeue",
        "import os, sys\n"
        f"open({str(record)!r}, 'a').write(repr((sys.argv[1:], os.environ.get("
        "'SLURM_TIME_FORMAT'))) + '\\n')\n"
        "print('42|batch|proj|3|c[1-3]|1700000000|1700000600|my job|x')\n",
    )
    job = ask_controller("42", squeue, 5.0, {})
    assert (job.job_name, job.nodelist, job.start) == ("my job|x", "c[1-3]", 1700000000.0)
    [line] = record.read_text().splitlines()
    assert eval(line) == (  # noqa: S307 - our own repr
        ["--noheader", "--states=all", "--jobs", "42", "--format", SQUEUE_FORMAT],
        "%s",
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("import time\ntime.sleep(30)\n", "no answer within 0.5 s"),
        ("import sys\nsys.exit(1)\n", "squeue exited with 1"),
        ("print('JobId=42 garbage')\n", "not one line about this job"),
    ],
)
def test_an_unanswering_controller_costs_the_timeout_and_one_line(
    tmp_path, caplog, body: str, reason: str
) -> None:
    squeue = _program(tmp_path / "squeue", body)
    job = ask_controller("42", squeue, 0.5, {})
    assert job == SlurmJob("42", None, None, None, None)
    [line] = [r.getMessage() for r in caplog.records]
    assert reason in line and line.startswith("job=42 slurmctld not asked")


def test_no_squeue_is_one_line(tmp_path, caplog) -> None:
    job = ask_controller("42", str(tmp_path / "missing"), 1.0, {})
    assert job.job_name is None
    assert "cannot run" in caplog.records[0].getMessage()


def test_the_slurm_job_point() -> None:
    env = environment("epilog-env-exit3.txt")
    job = slurm_job(env)
    assert job is not None
    job = job.completed_by(parse_squeue(job.job_id, f"{job.job_id}|debug|(null)|1|n1|100|160|e3"))
    point = slurm_job_point(job, JobContext(job.job_id, "c1", "nobody"))
    assert point.measurement == "slurm_job"
    assert point.tags == {"jobid": job.job_id, "cluster": "c1"}
    assert point.time_ns == 100 * 10**9  # the job's start: a rerun writes the same point
    assert point.fields == {
        "partition": "debug",
        "nodelist": "n1",
        "num_nodes": 1,
        "exit_code": 3,
        "exit_signal": 0,
        "job_name": "e3",
        "start": 100.0,
        "end": 160.0,
        "job_id": job.job_id,
    }


def test_a_job_slurm_said_nothing_about_still_gets_its_point() -> None:
    point = slurm_job_point(SlurmJob("5", None, None, None, None), JobContext("5"), now=50.0)
    assert point.fields == {"job_id": "5"} and point.time_ns == 50 * 10**9


def test_environment_values_win_over_the_controller_s() -> None:
    from_env = SlurmJob("5", "u", "1", None, None, partition="a")
    asked = SlurmJob("5", None, None, 10.0, 20.0, "name", partition="b")
    merged = from_env.completed_by(asked)
    assert (merged.partition, merged.start, merged.job_name, merged.user) == (
        "a",
        10.0,
        "name",
        "u",
    )
