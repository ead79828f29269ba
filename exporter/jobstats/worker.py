"""The jobstats background sampler, in a child process of its own.

Reading, parsing and rendering a big server's job_stats costs seconds of CPU every interval.
In the exporter's process that work would hold the interpreter lock while scrapes are being
served, so scrapes that coincide with a sample would be several times slower than the others.
In a child process, at a lower CPU priority, it never delays a scrape: the exporter receives
each finished exposition, already compressed, and serves the last one until the next arrives.

The child dies with the exporter (parent-death signal); on SIGTERM it kills a running lctl
first. If the child dies on its own, the collector reports failure (no stale data served as
current) and the child is started again.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection

from exporter.collector import LOG_FORMAT, Periodic
from exporter.exposition import Compressed

log = logging.getLogger("hpcmon.exporter.jobstats")

PR_SET_PDEATHSIG = 1
NICENESS = 10
RESTART_SECONDS = 1.0


class SamplerGone(RuntimeError):
    """The sampler process is not running: there is no current snapshot."""


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _child_main(options: argparse.Namespace, conn: Connection, log_level: int) -> None:
    """Sample every ``--jobstats.interval`` seconds and send each exposition, compressed."""
    from exporter.jobstats.collector import JobstatsCollector

    _die_with_parent()
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
            conn.send(collector.snapshot)
        except OSError:  # the exporter is gone
            stopping.set()

    sampler = Periodic("jobstats-sampler", step, options.jobstats_interval)
    sampler.start()
    while not stopping.wait(1.0):
        pass
    sampler.stop(timeout=5)


class SamplerProcess:
    """Runs ``_child_main`` in a spawned child; ``latest()`` is the last exposition it sent."""

    def __init__(self, options: argparse.Namespace) -> None:
        # Only what the jobstats collector reads: other collectors' values need not pickle.
        self.options = argparse.Namespace(
            **{
                key: value
                for key, value in vars(options).items()
                if key.startswith("jobstats_") or key == "path_procfs"
            }
        )
        self._context = multiprocessing.get_context("spawn")
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
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
        receiving, sending = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child_main,
            args=(self.options, sending, logging.getLogger().getEffectiveLevel()),
            name="hpcmon-jobstats-sampler",
            daemon=True,
        )
        process.start()
        sending.close()
        self._process, self._conn = process, receiving

    def _receive(self) -> None:
        while not self._stopping.is_set():
            try:
                snapshot = self._conn.recv()
            except (EOFError, OSError):
                if self._stopping.is_set():
                    return
                self._process.join(timeout=5)
                log.error(
                    "jobstats sampler process exited (code %s); starting it again",
                    self._process.exitcode,
                )
                self._snapshot = None
                self._ready.clear()
                self._conn.close()
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
        if process is not None and process.is_alive():
            process.terminate()
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join(5)
        if self._conn is not None:
            self._conn.close()
        if self._receiver is not None:
            self._receiver.join(timeout=5)
            self._receiver = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None
