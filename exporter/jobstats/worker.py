"""The jobstats background sampler, in a child process of its own.

Reading, parsing and rendering a big server's job_stats costs seconds of CPU every interval.
In the exporter's process that work would hold the interpreter lock while scrapes are being
served, so scrapes that coincide with a sample would be several times slower than the others.
In a child process (``python -m hpcmon.exporter.jobstats.worker``), at a lower CPU priority,
it never delays a scrape: the exporter receives each finished exposition, already compressed,
through the child's stdout, and serves the last one until the next arrives.

The child dies with the exporter (parent-death signal, or a closed pipe); on SIGTERM it kills
a running lctl first. If the child dies on its own, the collector reports failure (no stale
data served as current) and the child is started again.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from hpcmon.exporter.collector import LOG_FORMAT, Periodic
from hpcmon.exporter.exposition import Compressed

log = logging.getLogger("hpcmon.exporter.jobstats")

PR_SET_PDEATHSIG = 1
NICENESS = 10
RESTART_SECONDS = 1.0
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where ``exporter`` is importable from


class SamplerGone(RuntimeError):
    """The sampler process is not running: there is no current snapshot."""


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def child_main(source: BinaryIO, out: BinaryIO) -> None:
    """Read (options, log level) from ``source``, then sample every ``--jobstats.interval``
    seconds and write each compressed exposition to ``out``, pickled."""
    from hpcmon.exporter.jobstats.collector import JobstatsCollector

    _die_with_parent()
    options, log_level = pickle.load(source)
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    try:
        os.nice(NICENESS)
    except OSError:
        pass
    stopping = threading.Event()
    collector = JobstatsCollector(options)

    def on_signal(_signum: int, _frame: object) -> None:
        stopping.set()
        collector.source.close()  # a running lctl is killed now, not at its timeout

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the exporter, which stops us

    def step() -> None:
        collector.sample()
        try:
            pickle.dump(collector.snapshot, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except OSError:  # the exporter is gone
            stopping.set()

    sampler = Periodic("jobstats-sampler", step, options.jobstats_interval)
    sampler.start()
    while not stopping.wait(1.0):
        pass
    sampler.stop(timeout=5)


class SamplerProcess:
    """Runs ``child_main`` in a child; ``latest()`` is the last exposition it sent."""

    def __init__(self, options: argparse.Namespace) -> None:
        # Only what the jobstats collector reads: other collectors' values need not pickle.
        self.options = argparse.Namespace(
            **{
                key: value
                for key, value in vars(options).items()
                if key.startswith("jobstats_") or key == "path_procfs"
            }
        )
        self._process: subprocess.Popen[bytes] | None = None
        self._snapshot: Compressed | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._receiver: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._spawn()
        self._receiver = threading.Thread(
            target=self._receive, name="jobstats-receiver", daemon=True
        )
        self._receiver.start()

    def _spawn(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "hpcmon.exporter.jobstats.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        pickle.dump((self.options, logging.getLogger().getEffectiveLevel()), process.stdin)
        process.stdin.close()
        self._process = process

    def _receive(self) -> None:
        while not self._stopping.is_set():
            process = self._process
            try:
                snapshot = pickle.load(process.stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                if self._stopping.is_set():
                    return
                try:
                    code = process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
                log.error("jobstats sampler process exited (code %s); starting it again", code)
                self._snapshot = None
                self._ready.clear()
                process.stdout.close()
                if self._stopping.wait(RESTART_SECONDS):
                    return
                self._spawn()
                continue
            self._snapshot = snapshot
            self._ready.set()

    def latest(self, deadline: float) -> Compressed:
        """The last exposition; waits (up to ``deadline``, time.monotonic) only for the
        first one. Raises SamplerGone while the child is down."""
        while (snapshot := self._snapshot) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._ready.wait(remaining):
                raise SamplerGone("no jobstats sample yet: the sampler process is not running")
        return snapshot

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self._receiver is not None:
            self._receiver.join(timeout=5)
            self._receiver = None
        if process is not None:
            process.stdout.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None


if __name__ == "__main__":
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but expositions goes down the pipe
    child_main(sys.stdin.buffer, stdout)
