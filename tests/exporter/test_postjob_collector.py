"""Issue 21, part 2: ``--collector.postjob`` reads the node's post-job spool.

Against the real hook: a run into an unreachable InfluxDB leaves its lines in the spool (the
collector counts them, independently of the spool's own decoder: one text line per frame),
then ``flush`` into a real InfluxDB 1.6.7 empties it; a line the server refuses as bad data
is counted in rejected/. A spool being written and flushed while it is read never counts a
line twice nor fails; a spool directory that does not exist is 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from devtools.demo import POST_JOB_INPUTS
from hpcmon.common import metric_names as names
from hpcmon.exporter.collector import add_path_flags
from hpcmon.exporter.postjob import PostJobCollector
from hpcmon.post_job.spool import Spool
from hpcmon.post_job.spool_format import KINDS
from tests.exporter.test_jobstats_collector import samples_of, value
from tests.servers import InfluxDB1, free_port, http_get, run_exporter

REPO = Path(__file__).resolve().parents[2]


def collector_for(spool_dir: Path) -> PostJobCollector:
    parser = argparse.ArgumentParser()
    add_path_flags(parser)
    PostJobCollector.add_arguments(parser)
    return PostJobCollector(parser.parse_args(["--postjob.spool-dir", str(spool_dir)]))


def figures(collector: PostJobCollector, kind: str = "influx-v1") -> dict[str, float]:
    """The spool's figures for ``kind``: each is exported for every kind, 0 when empty."""
    found = samples_of(collector.exposition())
    shown: dict[str, float] = {}
    for name in (
        names.POSTJOB_SPOOL_LINES,
        names.POSTJOB_SPOOL_FILES,
        names.POSTJOB_SPOOL_OLDEST_AGE,
        names.POSTJOB_REJECTED_LINES,
        names.POSTJOB_REJECTED_FILES,
    ):
        figure = value(found, name, kind=kind)
        assert figure is not None, f"{name} is not exported for {kind}"
        shown[name] = figure
    return shown


def frames_on_disk(directory: Path) -> int:
    """Lines spooled, counted without the spool's decoder: text lines minus the header."""
    return sum(len(p.read_bytes().splitlines()) - 1 for p in directory.glob("*.spool"))


def hook(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "hpcmon.post_job", *args],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


def test_a_missing_spool_dir_is_zero_for_every_kind(tmp_path: Path) -> None:
    found = samples_of(collector_for(tmp_path / "nowhere").exposition())
    for kind in KINDS:
        for name in (names.POSTJOB_SPOOL_LINES, names.POSTJOB_SPOOL_OLDEST_AGE,
                     names.POSTJOB_REJECTED_LINES, names.POSTJOB_SPOOL_FILES,
                     names.POSTJOB_REJECTED_FILES):  # fmt: skip
            assert value(found, name, kind=kind) == 0


@pytest.mark.integration
def test_spool_of_a_real_hook_run_then_flushed_into_influxdb(
    influxdb1: InfluxDB1, tmp_path: Path
) -> None:
    database = f"pj_{uuid.uuid4().hex[:8]}"
    influxdb1.create_database(database)
    spool_dir = tmp_path / "spool"
    collector = collector_for(spool_dir)
    job = f"spool-{uuid.uuid4().hex[:6]}"
    started = time.time()
    unreachable = f"http://127.0.0.1:{free_port()}"
    run = hook(
        "--job-id", job, "--cluster", "demo", *POST_JOB_INPUTS, "--influx.v1-url", unreachable,
        "--influx.database", database, "--spool-dir", str(spool_dir),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr  # everything safely spooled
    spooled = frames_on_disk(spool_dir / "influx-v1")
    before = figures(collector)
    print(f"\nafter the hook into an unreachable InfluxDB: {before}")
    assert spooled > 100
    assert before[names.POSTJOB_SPOOL_LINES] == spooled
    assert before[names.POSTJOB_SPOOL_FILES] == len(list((spool_dir / "influx-v1").glob("*.spool")))
    assert 0 < before[names.POSTJOB_SPOOL_OLDEST_AGE] <= time.time() - started + 1
    assert before[names.POSTJOB_REJECTED_LINES] == 0
    time.sleep(1.1)
    assert (
        figures(collector)[names.POSTJOB_SPOOL_OLDEST_AGE]
        >= before[names.POSTJOB_SPOOL_OLDEST_AGE] + 1
    )  # the backlog ages

    writer = ["--influx.v1-url", influxdb1.url, "--influx.database", database]
    flushed = hook("flush", "--spool-dir", str(spool_dir), *writer)
    assert flushed.returncode == 0, flushed.stderr
    assert f"replayed_lines={spooled} " in flushed.stderr
    after = figures(collector)
    print(f"after flush into InfluxDB 1.6.7: {after}")
    assert after[names.POSTJOB_SPOOL_LINES] == 0 and after[names.POSTJOB_SPOOL_FILES] == 0
    assert after[names.POSTJOB_SPOOL_OLDEST_AGE] == 0
    stored = influxdb1.query(f"SELECT count(*) FROM /.*/ WHERE jobid = '{job}'", database)
    assert stored["results"][0].get("series"), stored

    # A line the server refuses as bad data (a field of another type): kept in rejected/.
    spool = Spool(spool_dir, "influx-v1")
    spool.add([f"pj_conflict,jobid={job} value=1 1000000000"])
    assert hook("flush", "--spool-dir", str(spool_dir), *writer).returncode == 0
    spool.add([f'pj_conflict,jobid={job} value="text" 2000000000',
               f"pj_conflict,jobid={job} value=3 3000000000"])  # fmt: skip
    refused = hook("flush", "--spool-dir", str(spool_dir), *writer)
    assert "rejected" in refused.stderr, refused.stderr
    rejected = figures(collector)
    print(f"after a refused line: {rejected}")
    assert rejected[names.POSTJOB_REJECTED_LINES] == 1
    assert rejected[names.POSTJOB_REJECTED_FILES] == 1
    assert rejected[names.POSTJOB_SPOOL_LINES] == 0


def test_reading_while_the_spool_is_written_and_flushed_never_double_counts(
    tmp_path: Path,
) -> None:
    """A writer keeps TOTAL lines in the spool at every instant, moving them between files the
    way the hook does (add whole, rewrite partly sent files whole, remove sent ones): every
    read sees at most TOTAL and never fails."""
    total, spool = 60, Spool(tmp_path, "influx-v1")
    collector = collector_for(tmp_path)
    lines = [f"m,jobid=j value={i} {i}" for i in range(total)]
    first = spool.add(lines)
    assert first is not None  # lines were given
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        path = first
        try:
            while not stop.is_set():
                spool.replace(path, lines[: total // 2])  # half sent, rewritten whole
                spool.remove(path)  # then the rest
                path = spool.add(lines)  # the next run's lines
                assert path is not None
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    seen: set[float] = set()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            found = figures(collector)
            assert found[names.POSTJOB_SPOOL_LINES] <= total, found
            assert found[names.POSTJOB_SPOOL_FILES] <= 1, found
            seen.add(found[names.POSTJOB_SPOOL_LINES])
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert len(seen) >= 2  # the reads did meet the writer at work


def test_the_exporter_serves_the_spool_of_its_node(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", "influx-v2")
    spool.add(["m value=1 1", "m value=2 2"])
    args = ["--no-collector.jobstats", "--collector.postjob",
            f"--postjob.spool-dir={tmp_path / 'spool'}"]  # fmt: skip
    with run_exporter(args, tmp_path) as exporter:
        status, body = http_get(f"http://{exporter.address}/metrics", timeout=30)
    found = samples_of(body)
    assert status == 200
    assert value(found, names.POSTJOB_SPOOL_LINES, kind="influx-v2") == 2
    assert value(found, names.POSTJOB_SPOOL_LINES, kind="influx-v1") == 0
    assert value(found, names.COLLECTOR_SUCCESS, collector="postjob") == 1


def test_the_collector_needs_nothing_of_the_post_job_extra() -> None:
    """The exporter extra alone runs it: importing it loads no numpy, pandas, influxdb."""
    code = "import sys, hpcmon.exporter.postjob; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60
    ).stdout.split()
    tops = {name.split(".")[0] for name in loaded}
    assert "prometheus_client" in tops
    assert not {"numpy", "pandas", "influxdb_client", "darshan"} & tops
    assert "hpcmon.post_job.spool_format" in loaded and "hpcmon.post_job.writers" not in loaded


def test_every_spool_the_hook_writes_is_read() -> None:
    from hpcmon.post_job.writers import InfluxV1Writer, InfluxV2Writer

    assert {InfluxV1Writer.kind, InfluxV2Writer.kind} == set(KINDS)


READ_AS_EXPORTER = """
import argparse, logging, sys
logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(message)s")
from hpcmon.exporter.collector import add_path_flags
from hpcmon.exporter.postjob import PostJobCollector
parser = argparse.ArgumentParser()
add_path_flags(parser)
PostJobCollector.add_arguments(parser)
collector = PostJobCollector(parser.parse_args(["--postjob.spool-dir", sys.argv[1]]))
for _ in range(3):  # three scrapes: one log line
    text = collector.exposition().decode()
print(text)
"""


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write as root and read as nobody")
def test_spool_is_0640_in_0750_and_an_exporter_outside_its_group_says_so() -> None:
    """The hook (root, umask 0) writes its spool 0640 in 0750 directories; the exporter as
    nobody reads it only with the spool's group: without it, spool_up 0, one line, no figure."""
    base = Path(tempfile.mkdtemp(prefix="hpcmon-spool-modes-", dir="/tmp"))
    base.chmod(0o755)  # pytest's own tmp_path is root's 0700: the spool's modes must matter
    spool_dir = base / "spool"
    try:
        _spool_modes_and_groups(spool_dir)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _spool_modes_and_groups(spool_dir: Path) -> None:
    from tests.post_job.test_post_job_privileges import NOBODY, _become, _python_for

    run = subprocess.run(
        [sys.executable, "-P", "-m", "hpcmon.post_job", "--job-id", "1", "--cluster", "demo",
         *POST_JOB_INPUTS, "--influx.v1-url", f"http://127.0.0.1:{free_port()}",
         "--influx.database", "db", "--spool-dir", str(spool_dir)],
        capture_output=True, text=True, timeout=300, cwd=REPO, preexec_fn=lambda: os.umask(0),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    made = [spool_dir, *spool_dir.rglob("*")]
    modes = {stat.S_IMODE(p.stat().st_mode) for p in made if p.is_dir()}
    assert modes == {0o750}
    assert {stat.S_IMODE(p.stat().st_mode) for p in made if p.is_file()} == {0o640}
    spooled = frames_on_disk(spool_dir / "influx-v1")

    def as_nobody(gid: int) -> subprocess.CompletedProcess:
        python = _python_for(NOBODY, gid)
        script = python[:-1] + [python[-1].split("; from hpcmon")[0] + "\n" + READ_AS_EXPORTER]
        return subprocess.run(
            [*script, str(spool_dir)], capture_output=True, text=True, timeout=120, cwd="/",
            preexec_fn=_become(NOBODY, gid),
        )  # fmt: skip

    refused = as_nobody(NOBODY)
    assert refused.returncode == 0, refused.stderr
    found = samples_of(refused.stdout.encode())
    for kind in KINDS:
        assert value(found, names.POSTJOB_SPOOL_UP, kind=kind) == 0
        assert not [s for s in found if s[0] == names.POSTJOB_SPOOL_LINES]  # no figure at all
    lines = refused.stderr.splitlines()
    assert len(lines) == len(KINDS), lines  # one line per kind, not one per scrape
    assert all("cannot read: Permission denied" in line for line in lines), lines

    # the documented setup: the spool's group (set-group-ID, so new files take it)
    for path in made:
        os.chown(path, 0, NOBODY)
    spool_dir.chmod(0o2750)
    (spool_dir / "influx-v1").chmod(0o2750)
    allowed = as_nobody(NOBODY)
    found = samples_of(allowed.stdout.encode())
    assert value(found, names.POSTJOB_SPOOL_UP, kind="influx-v1") == 1, allowed.stderr
    assert value(found, names.POSTJOB_SPOOL_LINES, kind="influx-v1") == spooled > 100
