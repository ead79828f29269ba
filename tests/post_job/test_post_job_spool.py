"""The spool: durable batches, exactly-once replay against real servers, hostile spool files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job import spool as spool_module
from hpcmon.post_job.cli import main
from hpcmon.post_job.delivery import WriterSettings, ship, ship_to_server
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines
from hpcmon.post_job.spool import (
    Spool,
    SpoolFileError,
    decode_batch,
    encode_batch,
    replay,
)
from hpcmon.post_job.writers import Deadline, InfluxV1Writer, InfluxV2Writer
from tests import servers
from tests.post_job.test_post_job_frame import GEOPM_REPORT
from tests.post_job.test_post_job_writers import counting, job_points

REPO = Path(__file__).resolve().parents[2]
lines_strategy = st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=20)


# ---------------------------------------------------------------- file format (hypothesis)
@settings(max_examples=200, deadline=None)
@given(lines_strategy)
def test_batch_round_trip(lines: list[str]) -> None:
    decoded = decode_batch(encode_batch(lines, "influx-v1", 1))
    assert decoded.lines == lines and not decoded.damaged and not decoded.problems


@settings(max_examples=300, deadline=None)
@given(lines_strategy, st.data())
def test_a_flipped_byte_costs_at_most_the_frames_it_touches(
    lines: list[str], data: st.DataObject
) -> None:
    """Any one damaged byte: every other line is read back intact and in order, at most two
    lines are lost (a byte that joins or splits two frames), and no line is ever changed."""
    encoded = encode_batch(lines, "influx-v2", 5)
    position = data.draw(st.integers(0, len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= data.draw(st.integers(1, 255))
    try:
        decoded = decode_batch(bytes(flipped), "f.spool")
    except SpoolFileError as exc:  # only when nothing at all is left to read
        assert str(exc).startswith("f.spool: ") and len(lines) <= 2
        return
    assert _is_subsequence(decoded.lines, lines)
    assert len(lines) - len(decoded.lines) <= 2
    if decoded.lines != lines or decoded.damaged:
        assert decoded.damaged and any("damaged" in p for p in decoded.problems)


@settings(max_examples=200, deadline=None)
@given(lines_strategy, st.data())
def test_truncated_file_keeps_the_complete_frames(lines: list[str], data: st.DataObject) -> None:
    encoded = encode_batch(lines, "influx-v1", 5)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    try:
        decoded = decode_batch(encoded[:cut], "f.spool")
    except SpoolFileError:
        return  # the header or every line is gone
    assert decoded.lines == lines[: len(decoded.lines)] and decoded.problems


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    remaining = iter(long)
    return all(any(item == other for other in remaining) for item in short)


def test_version_1_files_of_earlier_releases_are_still_read() -> None:
    import hashlib
    import json as json_module

    body = "".join(json_module.dumps(line) + "\n" for line in ["a 1", "b 2"]).encode()
    header = {"format": "hpcmon-spool", "version": 1, "kind": "influx-v1", "created_ns": 1,
              "lines": 2, "sha256": hashlib.sha256(body).hexdigest()}  # fmt: skip
    data = json_module.dumps(header).encode() + b"\n" + body
    assert decode_batch(data).lines == ["a 1", "b 2"]
    with pytest.raises(SpoolFileError):
        decode_batch(data[:-2])


@pytest.mark.parametrize(
    "header, body",
    [
        ({"version": "SECRET-v9"}, b""),  # a version no release wrote
        (None, b""),  # a header that is not JSON (not UTF-8 either)
        ({"version": 1}, b"\xffSECRET\n"),  # a line that is not UTF-8 JSON
    ],
)
def test_spool_errors_name_the_problem_never_the_file_bytes(header, body: bytes) -> None:
    import hashlib
    import json as json_module

    if header is None:
        data = b"{\xffSECRET-header\n"
    else:
        fields = {"format": "hpcmon-spool", "kind": "influx-v1", "created_ns": 1, "lines": 1,
                  "sha256": hashlib.sha256(body).hexdigest(), **header}  # fmt: skip
        data = json_module.dumps(fields).encode() + b"\n" + body
    with pytest.raises(SpoolFileError) as caught:
        decode_batch(data, "f.spool")
    message = str(caught.value)
    assert message.startswith("f.spool: ") and "SECRET" not in message, message
    assert "\\x" not in message and "0xff" not in message, message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_reader(data: bytes) -> None:
    try:
        decoded = decode_batch(data, "x")
    except SpoolFileError:
        return
    assert all(isinstance(line, str) for line in decoded.lines)


# ---------------------------------------------------------------- local behaviour
def test_spool_is_fifo_and_atomic(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "influx-v1")
    first = spool.add(["a 1", "b 2"])
    second = spool.add(["c 3"])
    assert first is not None and second is not None
    assert spool.pending() == [first, second]
    assert spool.read(first).lines == ["a 1", "b 2"]
    assert sorted(p.name for p in spool.dir.iterdir() if not p.name.startswith(".lock")) == sorted(
        [first.name, second.name]
    )  # no temporary files left behind


def test_damaged_line_is_set_aside_and_the_rest_is_sent(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    influxdb1.create_database("quarantine")
    spool = Spool(tmp_path, "influx-v1")
    lines = to_lines(job_points("pj_q", "q", 4)).splitlines()
    damaged = spool.add(lines)
    assert damaged is not None
    data = bytearray(damaged.read_bytes())
    second_frame = data.index(b"\n", data.index(b"\n") + 1) + 1
    data[second_frame + 30] ^= 0x20  # a byte inside the second line's frame
    damaged.write_bytes(bytes(data))
    garbage = spool.add(["m v=1 1"])
    assert garbage is not None
    garbage.write_bytes(b"\x00not a spool file at all")
    good = spool.add(to_lines(job_points("pj_q2", "q", 3)).splitlines())
    assert good is not None
    result = replay(spool, InfluxV1Writer(influxdb1.url, "quarantine"), Deadline(30), 5)
    assert result.lines_sent == 3 + 3 and result.files_sent == 2
    assert len(result.corrupt) == 2 and str(damaged) in result.corrupt[0]
    assert not good.exists() and spool.pending() == []
    assert _count_influx(influxdb1, "quarantine", "pj_q") == 3  # only the damaged line lost
    [aside] = spool.rejected_dir.glob(damaged.name + ".*.damaged")
    assert len(aside.read_bytes().splitlines()) == 1
    assert (spool.rejected_dir / (garbage.name + ".corrupt")).exists()


def test_locked_spool_is_not_replayed(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "influx-v1")
    spool.add(["m v=1 1"])
    with spool.replay_lock() as locked:
        assert locked
        result = replay(
            Spool(tmp_path, "influx-v1"), InfluxV1Writer("http://127.0.0.1:9", "d"), Deadline(5), 1
        )
    assert result.skipped_locked and result.files_left == 1


SERIES_LIMIT = 'HTTP 400: {"error":"partial write: max-series-per-database limit exceeded"}'


def test_refused_lines_are_not_queued_again_while_another_run_holds_the_spool(
    tmp_path: Path,
) -> None:
    """Two ``flush`` runs at once both queued every line refused for the series limit (and
    counted it twice): the queueing waits for the spool's replay lock like the replay."""
    spool = Spool(tmp_path, "influx-v1")
    spool.reject([(f"m v={i} {i}", SERIES_LIMIT) for i in range(3)], "old.spool")
    with spool.replay_lock() as locked:
        assert locked
        assert Spool(tmp_path, "influx-v1").requeue_capacity_refusals() == 0
    assert spool.pending() == [] and len(list(spool.rejected_dir.glob("*.jsonl"))) == 1
    assert Spool(tmp_path, "influx-v1").requeue_capacity_refusals() == 3
    [queued] = spool.pending()
    assert spool.read(queued).lines == [f"m v={i} {i}" for i in range(3)]


def test_runs_racing_to_queue_refused_lines_again_queue_and_count_each_line_once(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path, "influx-v1")
    lines = [f"m v={i} {i}" for i in range(300)]
    for line in lines:
        spool.reject([(line, SERIES_LIMIT)], "old.spool")
    go = tmp_path / "go"
    children = []
    for run in range(4):
        pid = os.fork()
        if pid == 0:  # a run: waits for the others, then queues what it finds
            code = 1
            try:
                while not go.exists():
                    pass
                queued = Spool(tmp_path, "influx-v1").requeue_capacity_refusals()
                (tmp_path / f"queued-{run}").write_text(str(queued))
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    go.touch()
    assert all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children)
    counted = sum(int((tmp_path / f"queued-{run}").read_text()) for run in range(4))
    queued = Counter(line for path in spool.pending() for line in spool.read(path).lines)
    assert queued == Counter(lines) and counted == len(lines)


# ---------------------------------------------------------------- outage, then flush
def _count_influx(server: servers.InfluxDB1, db: str, measurement: str) -> int:
    series = server.series(f'SELECT count("bytes") FROM "{measurement}"', db=db)
    return series[0]["values"][0][1] if series else 0


def test_influxdb1_outage_then_flush_every_point_once(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    influxdb1.create_database("outage")
    points = job_points("pj_outage", "4242", 12)
    spool_dir = tmp_path / "spool"
    writer_flags = [
        "--influx.v1-url",
        influxdb1.url,
        "--influx.database",
        "outage",
        "--spool-dir",
        str(spool_dir),
        "--influx.batch-size",
        "5",
    ]
    settings_ = WriterSettings(
        v1_url=influxdb1.url, v1_database="outage", spool_dir=str(spool_dir), batch_size=5
    )
    influxdb1.stop()
    try:
        [report] = ship(to_lines(points).splitlines(), settings_, Deadline(30))
        assert (report.written, report.spooled, report.lost) == (0, 12, 0)
        assert len(Spool(spool_dir, "influx-v1").pending()) == 3  # one file per batch
        assert main(["flush", *writer_flags]) == 1  # still down: kept, reported
    finally:
        influxdb1.start_again()
    assert main(["flush", *writer_flags]) == 0
    assert _count_influx(influxdb1, "outage", "pj_outage") == 12
    assert Spool(spool_dir, "influx-v1").pending() == []
    assert main(["flush", *writer_flags]) == 0  # nothing left to send twice
    assert _count_influx(influxdb1, "outage", "pj_outage") == 12


def _vm_samples(server: servers.VictoriaMetrics, job_id: str) -> Counter:
    """(series, timestamp) -> how many samples VictoriaMetrics holds (it does not dedup)."""
    samples: Counter = Counter()
    for row in server.export(f'{{jobid="{job_id}"}}'):
        key = tuple(sorted(row["metric"].items()))
        for stamp in row["timestamps"]:
            samples[(key, stamp)] += 1
    return samples


def test_victoria_metrics_outage_next_run_replays_exactly_once(
    victoria_metrics: servers.VictoriaMetrics, tmp_path: Path
) -> None:
    """VictoriaMetrics keeps duplicate samples, so any double send would show up here."""
    job_id = f"vm-out-{uuid.uuid4().hex[:6]}"
    first = job_points("pj_vmout", job_id, 9)
    second = [Point("pj_vmout2", {"jobid": job_id}, {"bytes": 5}, 1_700_000_100_000_000_000)]
    settings_ = WriterSettings(
        v2_url=victoria_metrics.url,
        v2_org="o",
        v2_bucket="b",
        spool_dir=str(tmp_path),
        batch_size=4,
        request_timeout=3,
    )
    victoria_metrics.stop()
    try:
        [report] = ship(to_lines(first).splitlines(), settings_, Deadline(30))
        assert (report.written, report.spooled) == (0, 9)
    finally:
        victoria_metrics.start_again()
    writer, sent = counting(InfluxV2Writer(victoria_metrics.url, "o", "b", None))
    # the next job's run replays the spool first, then sends its own point
    report = ship_to_server(to_lines(second).splitlines(), writer, settings_, Deadline(30))
    writer.close()
    assert report.replayed_files == 3 and report.replayed_lines == 9 and report.written == 1
    assert sent == [4, 4, 1, 1]
    samples = _vm_samples(victoria_metrics, job_id)
    numeric_fields = 3  # bytes, bw, ok (strings are not stored as samples we compare)
    expected = 9 * numeric_fields + 1
    assert (
        sum(1 for (key, _), n in samples.items() if not dict(key)["__name__"].endswith("_label"))
        == expected
    )
    assert set(samples.values()) == {1}


def freeze(pid: int) -> None:
    """SIGSTOP a server and wait until every one of its threads is really stopped."""
    os.kill(pid, signal.SIGSTOP)
    tasks = Path(f"/proc/{pid}/task")
    for _ in range(500):
        states = {(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()}
        if states <= {"T", "t"}:
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} did not stop: thread states {states}")


def test_hung_server_costs_only_the_time_budget_and_nothing_is_lost(
    victoria_metrics: servers.VictoriaMetrics, tmp_path: Path
) -> None:
    """A frozen server (SIGSTOP: connections accepted, never answered) must not hold the hook
    past its sending deadline, whatever the request timeout, and every point must be kept."""
    job_id = f"vm-hung-{uuid.uuid4().hex[:6]}"
    lines = to_lines(job_points("pj_hung", job_id, 6)).splitlines()
    settings_ = WriterSettings(
        v2_url=victoria_metrics.url,
        v2_org="o",
        v2_bucket="b",
        spool_dir=str(tmp_path),
        batch_size=2,
        request_timeout=60,
    )
    freeze(victoria_metrics.proc.pid)
    try:
        started = time.monotonic()
        [report] = ship(lines, settings_, Deadline(2))
        elapsed = time.monotonic() - started
    finally:
        os.kill(victoria_metrics.proc.pid, signal.SIGCONT)
    assert elapsed < 15  # the 60 s request timeout was cut to the 2 s budget
    assert (report.written, report.spooled, report.lost) == (0, 6, 0)
    [report] = ship([], settings_, Deadline(30))  # the next run replays the spool
    assert report.replayed_lines == 6 and not Spool(tmp_path, "influx-v2").pending()
    # The timed-out request may still have been applied when the server woke up: InfluxDB
    # overwrites such a repeat; VictoriaMetrics keeps it, so compare the distinct samples.
    want = {
        (f"pj_hung_{name}", line.split(" ")[-1]) for line in lines for name in ("bytes", "bw", "ok")
    }
    got = {
        (dict(key)["__name__"], str(stamp * 1_000_000))
        for key, stamp in _vm_samples(victoria_metrics, job_id)
        if not dict(key)["__name__"].endswith("_label")
    }
    assert got == want


def test_two_concurrent_flushes_send_each_file_once(
    victoria_metrics: servers.VictoriaMetrics, tmp_path: Path
) -> None:
    job_id = f"vm-conc-{uuid.uuid4().hex[:6]}"
    spool = Spool(tmp_path, "influx-v2")
    points = job_points("pj_conc", job_id, 40)
    lines = to_lines(points).splitlines()
    for start in range(0, 40, 2):
        spool.add(lines[start : start + 2])
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(REPO)
    flush_args = ["flush", "--spool-dir", str(tmp_path), "--influx.url", victoria_metrics.url,
                  "--influx.org", "o", "--influx.bucket", "b"]  # fmt: skip
    command = [sys.executable, "-m", "hpcmon.post_job", *flush_args]
    procs = [
        subprocess.Popen(command, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    if spool.pending():  # the second process may have started after the first took the lock
        assert main(flush_args) == 0
    assert spool.pending() == []
    samples = _vm_samples(victoria_metrics, job_id)
    assert len(samples) == 40 * 4 and set(samples.values()) == {1}


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5))
def test_partial_batches_left_after_time_limit_are_replayed_later(
    influxdb1: servers.InfluxDB1, tmp_path_factory, sizes: list[int]
) -> None:
    """A spool left by a run that ran out of time is replayed whole, in order."""
    db = f"late_{uuid.uuid4().hex[:8]}"
    influxdb1.create_database(db)
    root = tmp_path_factory.mktemp("spool")
    spool = Spool(root, "influx-v1")
    total = 0
    for size in sizes:
        spool.add([f"pj_late,jobid=1 bytes={total + k}i {total + k + 1}" for k in range(size)])
        total += size
    writer = InfluxV1Writer(influxdb1.url, db)
    assert replay(spool, writer, Deadline(0), 5).files_sent == 0  # no time: nothing sent
    result = replay(spool, writer, Deadline(30), 5)
    assert result.files_sent == len(sizes) and result.lines_sent == total
    assert _count_influx(influxdb1, db, "pj_late") == total
    assert spool.pending() == []


def test_partly_sent_spool_file_keeps_only_what_was_not_acknowledged(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    """A spooled batch with a bad line; the server dies half-way through the bisection.
    The file must then hold exactly the lines never acknowledged, and the next replay sends
    only those."""
    influxdb1.create_database("half")
    good = [f"pj_half,jobid=h bytes={k}i {k + 1}" for k in range(4)]
    bad = "pj_half,jobid=h bytes= 9"
    spool = Spool(tmp_path, "influx-v1")
    path = spool.add([good[0], bad, good[1], good[2], good[3]])
    assert path is not None
    writer = InfluxV1Writer(influxdb1.url, "half")
    requests: list[list[str]] = []
    send = writer.send

    def send_then_die(lines, timeout):
        requests.append(list(lines))
        try:
            send(lines, timeout)
        finally:
            if len(requests) == 4:  # [all] [good0, bad] [good0] [bad], then the outage
                influxdb1.stop()

    writer.send = send_then_die
    try:
        result = replay(spool, writer, Deadline(30), 5)
        assert requests[3] == [bad] and result.lines_rejected == 1
        assert result.unavailable_reason and result.files_sent == 0
        assert spool.pending() == [path] and spool.read(path).lines == good[1:]
    finally:
        influxdb1.start_again()
    resent, sent = counting(InfluxV1Writer(influxdb1.url, "half"))
    result = replay(spool, resent, Deadline(30), 5)
    assert sent == [3] and result.files_sent == 1 and spool.pending() == []
    assert _count_influx(influxdb1, "half", "pj_half") == 4
    [rejected] = spool.rejected_dir.glob("*.jsonl")
    assert bad in rejected.read_text()


def test_spool_names_never_collide_between_spool_objects(tmp_path: Path, monkeypatch) -> None:
    """Even on a coarse clock, a new batch never replaces an older one of the same process."""
    monkeypatch.setattr(spool_module.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    paths = [Spool(tmp_path, "influx-v1").add([f"m v={k} {k}"]) for k in range(20)]
    assert len(set(paths)) == 20 and len(Spool(tmp_path, "influx-v1").pending()) == 20


def test_stale_temporary_file_is_ignored_and_cleaned(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    influxdb1.create_database("stale")
    spool = Spool(tmp_path, "influx-v1")
    spool.add(["pj_stale,jobid=1 bytes=1i 1"])
    stale = spool.dir / ".tmp-0000-1-1.spool-99-1"
    stale.write_bytes(b"half a batch")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    result = replay(spool, InfluxV1Writer(influxdb1.url, "stale"), Deadline(30), 5)
    assert result.files_sent == 1 and not result.corrupt and not stale.exists()


def test_hook_run_during_outage_then_flush_real_report(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    """The whole command: a real GEOPM report while InfluxDB is down, then flush, then rerun."""
    from hpcmon.post_job.geopm_report import collect_geopm_report

    influxdb1.create_database("hook_outage")
    expected = collect_geopm_report([GEOPM_REPORT], JobContext("808")).points
    per_measurement = Counter(point.measurement for point in expected)
    per_measurement["job_index"] = 1
    writers = ["--influx.v1-url", influxdb1.url, "--influx.database", "hook_outage",
               "--spool-dir", str(tmp_path), "--influx.batch-size", "1"]  # fmt: skip
    hook_run = ["--job-id", "808", "--geopm-report", str(GEOPM_REPORT), *writers]
    influxdb1.stop()
    try:
        assert main(hook_run) == 0  # spooled counts as success: nothing is lost
        # one file per line (batch size 1): the report's points and the job's index
        assert len(Spool(tmp_path, "influx-v1").pending()) == len(expected) + 1
    finally:
        influxdb1.start_again()
    assert main(["flush", *writers]) == 0
    assert Spool(tmp_path, "influx-v1").pending() == []

    def stored() -> Counter:
        found: Counter = Counter()
        for measurement in per_measurement:
            for series in influxdb1.series(f'SELECT * FROM "{measurement}"', db="hook_outage"):
                found[measurement] += len(series["values"])
        return found

    assert stored() == per_measurement
    assert main(hook_run) == 0  # the same job again: same points, no duplicates
    assert stored() == per_measurement


def test_every_directory_the_spool_makes_is_fsynced_in_its_parent(
    tmp_path: Path, monkeypatch
) -> None:
    # the spool root itself, when this run made it, was not: a crash could lose the root
    # and with it every batch written ahead in it
    synced: list[Path] = []
    real_fsync_dir = spool_module._fsync_dir

    def recording(path: Path) -> None:
        synced.append(Path(path))
        real_fsync_dir(path)

    monkeypatch.setattr(spool_module, "_fsync_dir", recording)
    root = tmp_path / "var" / "spool" / "hpcmon"
    Spool(root, "influx-v1").add(["m v=1i 1"])
    for made in (tmp_path / "var", tmp_path / "var" / "spool", root, root / "influx-v1"):
        assert made.parent in synced, made
