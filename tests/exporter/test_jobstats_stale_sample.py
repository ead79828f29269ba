"""A read that hangs (a stuck Lustre procfs read; here a FIFO nobody writes) must not leave the
exporter serving its last sample as current: after the bound the collector fails, with no
per-job series, and once the source reads again a fresh sample is served."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.exporter.test_jobstats_collector import HP_MDT, Samples, named, samples_of, value
from tests.exporter.test_jobstats_failing_sources import oss_capture
from tests.servers import http_get, run_exporter

# Slow (waits out hung reads and their timeouts): not in `make check`.
pytestmark = pytest.mark.slow

SUCCESS = ("hpcmon_exporter_collector_success", frozenset({("collector", "jobstats")}))


def scrape(address: str) -> Samples:
    status, body = http_get(f"http://{address}/metrics", timeout=30)
    assert status == 200
    return samples_of(body)


def scrape_until(address: str, wanted: float, seconds: float = 45) -> Samples:
    """The first scrape whose jobstats collector_success is ``wanted``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = scrape(address)
        if found[SUCCESS] == wanted:
            return found
        time.sleep(0.5)
    raise AssertionError(f"collector_success never became {wanted} in {seconds} s")


def per_job(found: Samples) -> dict:
    """Every per-job series and every per-target health series of the scrape."""
    return {
        key: v
        for key, v in found.items()
        if key[0].startswith("lustre_job_") or key[0].startswith("lustre_jobstats_")
    }


def replace(path: Path, make) -> None:
    """Swap ``path`` in one step, so the sampler never reads a half-made file."""
    new = path.with_suffix(".new")
    make(new)
    os.replace(new, path)


def test_a_hung_read_is_not_served_as_current_and_a_fresh_sample_follows(tmp_path: Path) -> None:
    path = oss_capture(tmp_path)
    args = [
        "--jobstats.source=file",
        f"--jobstats.path={path}",
        "--jobstats.interval=1",
        "--jobstats.timeout=1",  # stale after max(3 x 1, 1 + 1 + 5) = 7 s
    ]
    with run_exporter(args, tmp_path) as exporter:
        found = scrape_until(exporter.address, 1)
        assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000")
        assert named(found, "lustre_job_write_bytes_total")

        replace(path, os.mkfifo)  # the next read blocks in open() for ever
        found = scrape_until(exporter.address, 0)
        assert per_job(found) == {}  # neither the old counters nor the old up 1
        # It stays failed over more than one kill and restart of the stuck child, and says so
        # once, not once per scrape.
        until = time.monotonic() + 10
        while time.monotonic() < until:
            found = scrape(exporter.address)
            assert found[SUCCESS] == 0 and per_job(found) == {}
            time.sleep(0.5)
        log = exporter.log_path.read_text()
        assert log.count("a read is stuck; restarting the sampler process") == 1, log
        assert log.count("collector jobstats failed to render") == 1, log
        assert "Traceback" not in log

        mdt = "mdt.lustrefs-MDT0000.job_stats=\n" + HP_MDT.read_text()
        replace(path, lambda new: new.write_text(mdt))
        found = scrape_until(exporter.address, 1)
        assert value(found, "lustre_jobstats_jobs", component="mdt", target="lustrefs-MDT0000")
        up = named(found, "lustre_jobstats_up")
        assert up == {
            frozenset(
                {"component": "mdt", "target": "lustrefs-MDT0000", "source": str(path)}.items()
            ): 1
        }
        assert not any(dict(labels).get("component") == "ost" for _, labels in found)
        assert "samples arrive again" in exporter.log_path.read_text()


def test_sampling_on_scrape_a_hung_read_fails_the_scrapes_until_it_returns(
    tmp_path: Path,
) -> None:
    # --jobstats.interval=0 samples in the scrape's own thread: the scrape that meets the hung
    # read waits; the others were served the last sample for ever while it hung.
    path = oss_capture(tmp_path)
    args = [
        "--jobstats.source=file",
        f"--jobstats.path={path}",
        "--jobstats.interval=0",
        "--jobstats.timeout=1",  # stuck after max(0, 0 + 1 + 5) = 6 s
    ]
    with run_exporter(args, tmp_path) as exporter:
        assert named(scrape_until(exporter.address, 1), "lustre_job_write_bytes_total")
        fifo = tmp_path / "hung.fifo"
        os.mkfifo(fifo)
        os.replace(fifo, path)  # the next read blocks in open() until a writer comes

        def hung_scrape() -> None:
            try:
                http_get(f"http://{exporter.address}/metrics", timeout=60)
            except OSError:
                pass

        stuck = threading.Thread(target=hung_scrape, daemon=True)
        stuck.start()
        time.sleep(1)
        found = scrape_until(exporter.address, 0, seconds=40)
        assert per_job(found) == {}
        log = exporter.log_path.read_text()
        assert "a read is stuck" in log and "Traceback" not in log

        # the read returns (a writer opens the FIFO and leaves: end of file), then a good file
        writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(writer)
        stuck.join(60)
        mdt = "mdt.lustrefs-MDT0000.job_stats=\n" + HP_MDT.read_text()
        replace(path, lambda new: new.write_text(mdt))
        found = scrape_until(exporter.address, 1)
        assert value(found, "lustre_jobstats_jobs", component="mdt", target="lustrefs-MDT0000")
