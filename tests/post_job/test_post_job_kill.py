"""Kill tests on a real InfluxDB 1.6.7: the hook is SIGKILLed or SIGTERMed at random moments
while it sends real Darshan points through a slow loopback proxy, then ``flush`` (or, when the
kill came before the first request, the next run) must leave exactly the points of a clean run
in the database, each once, with nothing left in the spool."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hpcmon.post_job.spool import Spool
from tests import servers
from tests.post_job.lineprotocol_parse import parse_line

REPO = Path(__file__).resolve().parents[2]
LOGS = sorted((REPO / "tests" / "data" / "darshan" / "logs").glob("*.darshan"))
BATCH = "40"
TRIALS = 4  # per signal; each trial is a fresh database and spool


class SlowProxy:
    """Forwards each write to the real server after ``delay`` seconds, counting requests."""

    def __init__(self, target: str, delay: float) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.requests += 1
                time.sleep(proxy.delay)
                request = urllib.request.Request(
                    target + self.path, data=body, method="POST", headers=dict(self.headers)
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, answer = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, answer = exc.code, exc.read()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:  # the hook was killed while waiting for the answer
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.delay = delay
        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(influxdb1: servers.InfluxDB1) -> Iterator[SlowProxy]:
    slow = SlowProxy(influxdb1.url, 0.03)
    yield slow
    slow.close()


def writers(url: str, db: str, spool: Path) -> list[str]:
    return ["--influx.v1-url", url, "--influx.database", db, "--spool-dir", str(spool),
            "--influx.batch-size", BATCH]  # fmt: skip


def hook(job: str, url: str, db: str, spool: Path) -> list[str]:
    return [sys.executable, "-m", "hpcmon.post_job", "--job-id", job, "--darshan", *map(str, LOGS),
            *writers(url, db, spool)]  # fmt: skip


def flush(url: str, db: str, spool: Path) -> list[str]:
    return [sys.executable, "-m", "hpcmon.post_job", "flush", *writers(url, db, spool)]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=servers.loopback_env()
    )


def point_key(measurement: str, tags: dict, time_ns: int | None) -> tuple:
    return measurement, tuple(sorted(tags.items())), time_ns


def expected_points(tmp_path: Path, job: str) -> dict[tuple, dict]:
    out = tmp_path / "expected.lp"
    argv = [sys.executable, "-m", "hpcmon.post_job", "--job-id", job, "--darshan", *map(str, LOGS),
            "--output", str(out)]  # fmt: skip
    run(argv)
    points: dict[tuple, dict] = {}
    for line in out.read_text().splitlines():
        measurement, tags, fields, stamp = parse_line(line)
        key = point_key(measurement, tags, stamp)
        assert key not in points, f"two lines of one run share a series and time: {key}"
        points[key] = fields
    return points


def canonical(value: object) -> object:
    """InfluxDB's JSON gives a float with an integral value as an integer (beyond 2**53 in
    decimal digits that only a float reads back exactly): compare numbers alike."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if abs(value) >= 2**53:
        return float(value)
    return int(value) if float(value).is_integer() else value


def stored_points(server: servers.InfluxDB1, db: str, measurements: set[str]) -> Counter:
    """Every stored point as (key, fields as JSON), counted."""
    found: Counter = Counter()
    for measurement in sorted(measurements):
        result = server.query(f'SELECT * FROM "{measurement}" GROUP BY *', db=db)
        for series in result["results"][0].get("series", []):
            tags = {k: v for k, v in series.get("tags", {}).items() if v != ""}
            columns = series["columns"]
            for row in series["values"]:
                values = dict(zip(columns, row, strict=True))
                stamp = values.pop("time")
                fields = {k: canonical(v) for k, v in values.items() if v is not None}
                key = point_key(measurement, tags, stamp)
                found[(key, json.dumps(fields, sort_keys=True))] += 1
    return found


def as_stored(points: dict[tuple, dict]) -> Counter:
    """What InfluxDB returns for these points (ints and floats both as JSON numbers)."""
    return Counter(
        (key, json.dumps({k: canonical(v) for k, v in fields.items()}, sort_keys=True))
        for key, fields in points.items()
    )


@pytest.mark.integration
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_kill_at_random_moments_then_flush_delivers_every_point_once(
    influxdb1: servers.InfluxDB1, proxy: SlowProxy, tmp_path: Path, how: signal.Signals
) -> None:
    job = f"kill{how.value}"
    want = expected_points(tmp_path, job)
    measurements = {key[0] for key in want}
    assert len(want) > 1000
    chance = random.Random(1000 + how.value)
    during_send = interrupted = 0
    for trial in range(TRIALS):
        db = f"kill_{uuid.uuid4().hex[:10]}"
        influxdb1.create_database(db)
        spool = tmp_path / f"spool{trial}"
        before = proxy.requests
        started = time.monotonic()
        process = subprocess.Popen(
            hook(job, proxy.url, db, spool),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=servers.loopback_env(),
        )
        # the first trial waits for the first request (kill while sending); the others die
        # at any moment of the run: reading logs, spooling or sending
        if trial == 0:
            while proxy.requests == before and process.poll() is None:
                time.sleep(0.005)
            time.sleep(chance.uniform(0.05, 0.6))
        else:
            time.sleep(chance.uniform(0.0, 2.5))
        sent_before_kill = proxy.requests > before
        killed = time.monotonic()
        process.send_signal(how)
        _, err = process.communicate(timeout=30)
        gone = time.monotonic() - killed
        if how == signal.SIGTERM and "SIGTERM" in err:
            interrupted += 1
            assert process.returncode == 1 and gone < 1.0, (process.returncode, gone, err)
            assert err.strip().splitlines()[-1].count("SIGTERM") == 1
            assert sum("SIGTERM" in line for line in err.splitlines()) == 1
        elif process.returncode == -how.value:
            # SIGKILL, or a SIGTERM before the handler was installed (Python still importing:
            # nothing of the run had started)
            interrupted += 1
        else:  # the run finished before the signal: fine, nothing to recover
            assert process.returncode in (0, 1), err
        if sent_before_kill:
            during_send += 1
            # every line was spooled before the first request: flush alone must finish the job
            result = run(flush(influxdb1.url, db, spool))
        else:
            result = run(hook(job, influxdb1.url, db, spool))  # the next run of the hook
        assert result.returncode in (0, 1), result.stderr
        assert "Traceback" not in result.stderr
        assert Spool(spool, "influx-v1").pending() == []
        stored = stored_points(influxdb1, db, measurements)
        assert stored == as_stored(want), (
            f"trial {trial} ({how.name} after {killed - started:.2f} s): "
            f"{len(stored)} stored vs {len(want)} expected"
        )
    assert during_send >= 1 and interrupted >= TRIALS - 1


def test_time_limit_waits_for_the_spooling_in_progress(tmp_path: Path) -> None:
    """The watchdog fires in the middle of spooling: the process exits right after the spool
    is complete (never half-way), with its one line and status."""
    marker = tmp_path / "spool-finished"
    script = f"""
import time
from hpcmon.post_job.lifetime import GUARD, Watchdog, configure_logging
configure_logging()
with Watchdog(0.2, exit_code=1):
    with GUARD.spooling():
        time.sleep(0.6)
        open({str(marker)!r}, "w").write("done")
    time.sleep(5)
"""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=30)  # fmt: skip
    assert result.returncode == 1 and marker.read_text() == "done"
    assert time.monotonic() - started < 4
    [line] = result.stderr.strip().splitlines()
    assert "time limit of 0.2s reached; spooling finished first" in line


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real ENOSPC (needs root and mount; skipped elsewhere)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_disk_full_while_spooling_is_one_line_and_keeps_the_old_spool(
    tiny_disk: Path, tmp_path: Path
) -> None:
    spool = Spool(tiny_disk, "influx-v1")
    old = spool.add([f"earlier,jobid=1 v={k}i {k}" for k in range(100)])
    assert old is not None
    old_bytes = old.read_bytes()
    down = f"http://127.0.0.1:{servers.free_port()}"
    argv = [sys.executable, "-m", "hpcmon.post_job", "--job-id", "full", "--darshan",
            str(LOGS[0].parent / "e3sm_io_heatmap_only.darshan"),
            *writers(down, "d", tiny_disk)]  # fmt: skip
    result = run(argv)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert old.read_bytes() == old_bytes
    for path in spool.pending():
        decoded = spool.read(path)
        assert not decoded.damaged and not decoded.problems
    assert not list(spool.dir.glob(".tmp-*"))
