"""Issue 32: squeue's answer read into job records: a real recorded answer, hostile job names
(any bytes, new lines, the separator), garbage, records cut short, and squeue failing as a
process (missing, exit 1, hanging, garbage, endless)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.exporter import squeue
from hpcmon.exporter.exposition import render_families
from hpcmon.exporter.slurm import SlurmSample, sample_families
from hpcmon.exporter.squeue import (
    MAX_JOB_NAME,
    SlurmJobState,
    SqueueError,
    parse_squeue,
    read_squeue,
)
from tests.exporter.slurm_fakes import (
    RECORDED,
    RECORDED_MARKER,
    failing_squeue,
    garbage_squeue,
    hanging_squeue,
    replaying_squeue,
    write_script,
)

MARKER = RECORDED_MARKER


def record(jobid: bytes, name: bytes, account=b"proj1", partition=b"debug", state=b"RUNNING"):
    return MARKER + b"|".join([jobid, b"alice", account, partition, state, name]) + MARKER + b"\n"


def test_recorded_answer_of_the_real_squeue() -> None:
    """What Slurm 22.05 printed for three jobs (tests/data/slurm/SOURCES.md)."""
    answer = parse_squeue(RECORDED.read_bytes(), MARKER)
    assert answer.bad_records == 0
    assert answer.jobs == (
        SlurmJobState("2504009", "nobody", "proj2", "debug", "bad\ufffd\ufffd utf8 é | pipe",
                      "RUNNING"),
        SlurmJobState("2504010", "nobody", "", "debug", '{"json":1}\\n\n%j %u', "RUNNING"),
        SlurmJobState("2504012", "nobody", "", "debug", "array-task", "RUNNING"),
    )  # fmt: skip


def test_empty_queue() -> None:
    assert parse_squeue(b"", MARKER) == squeue.SqueueAnswer((), 0)


def test_names_are_cut_to_the_documented_length() -> None:
    answer = parse_squeue(record(b"1", "é".encode() * 100) + record(b"2", b"\xff" * 300), MARKER)
    assert [job.job_name for job in answer.jobs] == ["é" * 64, "\ufffd" * 64]
    assert MAX_JOB_NAME == 64


@pytest.mark.parametrize(
    ("answer", "jobids", "bad"),
    [
        (b"squeue: warning\n" + record(b"1", b"a"), ["1"], 1),  # text before the first record
        (record(b"1", b"a") + b"garbage\n" + record(b"2", b"b"), ["1", "2"], 1),  # between
        (record(b"1", b"a") + MARKER + b"2|alice|proj1|debug|RUNN", ["1"], 1),  # cut short
        (record(b"1", b"a") + record(b"x2", b"b"), ["1"], 1),  # job id not a number
        (record(b"1", b"a", state=b"running"), [], 1),  # not a Slurm state
        (record(b"1", b"a", partition=b"de bug"), [], 1),  # not a Slurm name
        (record(b"1", b"a", account=b"(null)"), ["1"], 0),  # no account
        (MARKER + b"1|alice|proj1|debug" + MARKER + b"\n", [], 1),  # too few fields
        (MARKER + b"1|al ice|proj1|debug|RUNNING|n" + MARKER + b"\n", [], 1),  # user
        (MARKER + b"1|1234|proj1|debug|RUNNING|n" + MARKER + b"\n", ["1"], 0),  # uid, no name
        (b"\x00\xff" * 1000, [], 1),
    ],
)
def test_bad_pieces_are_counted_and_good_records_kept(
    answer: bytes, jobids: list[str], bad: int
) -> None:
    parsed = parse_squeue(answer, MARKER)
    assert [job.jobid for job in parsed.jobs] == jobids
    assert parsed.bad_records == bad


# Any bytes a user can put in a job name (Slurm keeps them as given, new lines included).
names = st.binary(max_size=300)
jobs = st.lists(
    st.tuples(
        st.integers(1, 2**63),
        names,
        st.sampled_from([b"proj1", b"(null)", b"a.b-c_9"]),
        st.sampled_from([b"RUNNING", b"COMPLETING", b"CONFIGURING"]),
    ),
    max_size=20,
)


@given(jobs, st.lists(st.binary(max_size=50).filter(lambda b: b != b"\n"), max_size=5))
def test_any_job_names_with_garbage_between(jobs_given: list, garbage: list[bytes]) -> None:
    """Every record comes back with its name (decoded, cut); each piece of garbage between
    records counts once. The marker is chosen per call, so no name holds it."""
    parts: list[bytes] = []
    for number, (jobid, name, account, state) in enumerate(jobs_given):
        if MARKER in name:
            continue
        parts.append(record(str(jobid).encode(), name, account=account, state=state))
        if number < len(garbage) and MARKER not in garbage[number]:
            parts[-1] = parts[-1][:-1] + garbage[number]  # replaces the record's line break
    answer = parse_squeue(b"".join(parts), MARKER)
    kept = [(j, n, a, s) for j, n, a, s in jobs_given if MARKER not in n]
    assert [(job.jobid, job.state) for job in answer.jobs] == [
        (str(j), s.decode()) for j, _, _, s in kept
    ]
    for job, (_, name, account, _) in zip(answer.jobs, kept, strict=True):
        assert job.job_name == name.decode("utf-8", "replace")[:MAX_JOB_NAME]
        assert job.account == ("" if account == b"(null)" else account.decode())
    assert answer.bad_records == sum(1 for part in parts if not part.endswith(MARKER + b"\n"))


@given(st.lists(st.one_of(st.binary(max_size=200), st.just(MARKER), st.just(b"|")), max_size=30))
def test_any_answer_never_raises(pieces: list[bytes]) -> None:
    answer = parse_squeue(b"".join(pieces), MARKER)
    for job in answer.jobs:
        assert job.jobid.isdigit() and len(job.job_name) <= MAX_JOB_NAME
        assert "|" not in job.user + job.account + job.partition + job.state


@given(st.lists(names, min_size=1, max_size=10))
def test_any_job_name_is_one_label_value_in_the_exposition(raw_names: list[bytes]) -> None:
    """Quotes, backslashes, braces, new lines, bytes that are not UTF-8: one series per job,
    its job_name label reads back as the decoded name."""
    jobs_given = tuple(
        SlurmJobState(str(n), "alice", "proj1", "debug", squeue.job_name(raw), "RUNNING")
        for n, raw in enumerate(raw_names)
    )
    text = render_families(sample_families(SlurmSample(True, jobs_given))).decode()
    [info] = [f for f in text_string_to_metric_families(text) if f.name == "hpc_slurm_job_info"]
    assert [(s.labels["jobid"], s.labels["job_name"]) for s in info.samples] == [
        (job.jobid, raw.decode("utf-8", "replace")[:MAX_JOB_NAME])
        for job, raw in zip(jobs_given, raw_names, strict=True)
    ]


def test_promtool_accepts_hostile_names() -> None:
    hostile = [b'q"uote', b"back\\slash", b"{brace}", b"new\nline", b"\xff\xfe\x00", b"\r\t"]
    jobs_given = tuple(
        SlurmJobState(str(n), "alice", "", "debug", squeue.job_name(raw), "RUNNING")
        for n, raw in enumerate(hostile)
    )
    body = render_families(sample_families(SlurmSample(True, jobs_given)))
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert body.count(b"\nhpc_slurm_job_info{") == len(hostile)


# ---------------------------------------------------------------- squeue as a process


def test_replayed_answer(tmp_path: Path) -> None:
    answer = read_squeue(str(replaying_squeue(tmp_path / "squeue")), timeout=30)
    assert [job.jobid for job in answer.jobs] == ["2504009", "2504010", "2504012"]


def test_missing_squeue(tmp_path: Path) -> None:
    with pytest.raises(SqueueError, match=r"cannot run .*: No such file or directory"):
        read_squeue(str(tmp_path / "squeue"), timeout=30)


def test_squeue_failing(tmp_path: Path) -> None:
    with pytest.raises(SqueueError) as caught:
        read_squeue(str(failing_squeue(tmp_path / "squeue")), timeout=30)
    assert str(caught.value) == (
        "squeue exited with 1: slurm_load_jobs error: Unable to contact slurm controller "
        "(connect failure)"
    )


def test_squeue_printing_garbage(tmp_path: Path) -> None:
    with pytest.raises(SqueueError, match="not in the format asked for") as caught:
        read_squeue(str(garbage_squeue(tmp_path / "squeue")), timeout=30)
    assert "\n" not in str(caught.value) and "JOBID" not in str(caught.value)


def test_hanging_squeue_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with pytest.raises(SqueueError, match=r"no answer within 0.5 s"):
        read_squeue(str(hanging_squeue(tmp_path / "squeue", pid_file)), timeout=0.5)
    child = int(pid_file.read_text())
    for _ in range(100):  # the kill is sent; the zombie is reaped by init
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_endless_squeue_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(squeue, "MAX_ANSWER", 1 << 20)
    script = write_script(tmp_path / "squeue", "#!/bin/sh\nexec yes\n")
    with pytest.raises(SqueueError, match=r"longer than 1048576 bytes"):
        read_squeue(str(script), timeout=60)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
