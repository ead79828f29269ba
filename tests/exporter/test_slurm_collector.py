"""Issue 32: ``--collector.slurm`` when squeue fails: ``hpc_slurm_up 0``, no job series (never
the list of an earlier answer), one log line when it starts and one when it ends, and a
scrape that never waits for squeue while the other collectors go on. The squeue of a real
cluster is in tests/test_slurm_collector.py; these are squeue stand-ins (real processes)."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.common import metric_names as names
from hpcmon.exporter.cli import available_collectors, build_parser
from hpcmon.exporter.slurm import SlurmCollector
from tests.exporter.slurm_fakes import (
    RECORDED,
    RECORDED_MARKER,
    failing_squeue,
    garbage_squeue,
    hanging_squeue,
    replaying_squeue,
)
from tests.servers import http_get, run_exporter


def samples(text: bytes) -> dict[str, list]:
    """Metric name -> its samples."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def collector(squeue: Path, *flags: str) -> SlurmCollector:
    options = build_parser(available_collectors()).parse_args(
        ["--collector.slurm", f"--slurm.squeue={squeue}", *flags]
    )
    return SlurmCollector(options)


def test_defaults() -> None:
    options = build_parser(available_collectors()).parse_args([])
    assert options.collector_slurm is False
    assert (options.slurm_interval, options.slurm_timeout) == (30.0, 10.0)
    assert options.slurm_squeue == "squeue"


@pytest.mark.parametrize("make_failing", [failing_squeue, garbage_squeue, None])
def test_failing_squeue_drops_every_job_series_and_logs_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, make_failing
) -> None:
    """answer -> fail x3 -> answer: up 1, 0, 1; the jobs of the first answer are not shown
    while it fails; one warning when it starts failing and one when it answers again."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    replaying_squeue(good)
    if make_failing is not None:
        make_failing(bad)  # None: no such program
    squeue = tmp_path / "squeue"
    shutil.copy(good, squeue)
    slurm = collector(squeue, "--slurm.timeout=30")
    caplog.set_level(logging.DEBUG, logger="hpcmon.exporter.slurm")

    assert slurm.sample().up
    first = samples(slurm.exposition())
    assert first[names.SLURM_UP][0].value == 1
    assert len(first[names.SLURM_JOB_INFO]) == 3
    assert {s.labels["state"]: s.value for s in first[names.SLURM_JOBS]} == {
        "RUNNING": 3,
        "COMPLETING": 0,
    }

    caplog.clear()
    squeue.unlink()
    if make_failing is not None:
        shutil.copy(bad, squeue)
    for _ in range(3):
        assert not slurm.sample().up
        down = samples(slurm.exposition())
        assert down[names.SLURM_UP][0].value == 0
        assert names.SLURM_JOB_INFO not in down and names.SLURM_JOBS not in down
    warnings = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert (
        len(warnings) == 1
        and warnings[0].levelno == logging.WARNING
        and "hpc_slurm_up 0" in warnings[0].getMessage()
    )
    assert "\n" not in warnings[0].getMessage()

    caplog.clear()
    squeue.unlink(missing_ok=True)
    shutil.copy(good, squeue)
    assert slurm.sample().up
    assert len(samples(slurm.exposition())[names.SLURM_JOB_INFO]) == 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        "squeue answers again (3 jobs)"
    ]


def test_before_the_first_answer_no_job_series(tmp_path: Path) -> None:
    slurm = collector(replaying_squeue(tmp_path / "squeue"))
    before = samples(slurm.exposition())
    assert before[names.SLURM_UP][0].value == 0
    assert names.SLURM_JOB_INFO not in before


def test_scrape_never_waits_for_a_hanging_squeue(tmp_path: Path) -> None:
    """The exporter answers while squeue still hangs (its child is still there after the
    scrape), and the other collector enabled with it is unaffected."""
    pid_file = tmp_path / "child.pid"
    squeue = hanging_squeue(tmp_path / "squeue", pid_file)
    args = [
        "--no-collector.jobstats",
        "--collector.slurm",
        f"--slurm.squeue={squeue}",
        "--slurm.timeout=3600",
        "--collector.postjob",
        f"--postjob.spool-dir={tmp_path / 'spool'}",
    ]
    with run_exporter(args, tmp_path) as exporter:
        for _ in range(100):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.1)
        child = pid_file.read_text().strip()
        status, body = http_get(f"http://{exporter.address}/metrics", timeout=60)
        assert Path(f"/proc/{child}").exists()  # squeue had not answered when the scrape did
    assert status == 200
    found = samples(body)
    assert found[names.SLURM_UP][0].value == 0
    assert names.SLURM_JOB_INFO not in found
    success = {s.labels["collector"]: s.value for s in found[names.COLLECTOR_SUCCESS]}
    assert success == {"slurm": 1, "postjob": 1}
    assert {s.labels["kind"] for s in found[names.POSTJOB_SPOOL_UP]} == {"influx-v1", "influx-v2"}


def test_stop_ends_a_hanging_squeue(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    slurm = collector(hanging_squeue(tmp_path / "squeue", pid_file), "--slurm.timeout=3600")
    slurm.start()
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    child = pid_file.read_text().strip()
    slurm.stop()
    assert not slurm._periodic.running
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_exposition_is_prometheus_clients_own(tmp_path: Path) -> None:
    """The job series are written from lines escaped once per job (InfoLines): the text is
    the one prometheus-client writes for the same families, after each answer, also when
    jobs came and went between them."""
    first = replaying_squeue(tmp_path / "first")
    records = RECORDED.read_bytes().split(RECORDED_MARKER + b"\n")
    changed = tmp_path / "changed.out"
    hostile = b'77|bob|proj9|gpu|COMPLETING|a "b" \\c {d}\n\xff\xc3'
    changed.write_bytes(
        records[2] + RECORDED_MARKER + b"\n" + RECORDED_MARKER + hostile + RECORDED_MARKER + b"\n"
    )
    squeue = tmp_path / "squeue"
    shutil.copy(first, squeue)
    slurm = collector(squeue)
    counts = []
    for answer in (None, changed, None):
        if answer is not None:
            replaying_squeue(squeue, answer)
        elif squeue.read_bytes() != first.read_bytes():
            shutil.copy(first, squeue)
        counts.append(len(slurm.sample().jobs))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(slurm)
        assert slurm.exposition() == generate_latest(registry)
    assert counts == [3, 2, 3]
