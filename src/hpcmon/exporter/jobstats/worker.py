"""The jobstats background sampler, in a child process of its own.

Reading, parsing and rendering a big server's job_stats costs seconds of CPU every interval.
In the exporter's process that work would hold the interpreter lock while scrapes are being
served, so scrapes that coincide with a sample would be several times slower than the others.
In a child process (``python -m hpcmon.exporter.jobstats.worker``), at a lower CPU priority,
it never delays a scrape: the exporter receives each finished exposition, already compressed,
through the child's stdout, and serves the last one until the next arrives.

The child dies with the exporter (parent-death signal, or a closed pipe); on SIGTERM it kills
a running lctl first. If the child dies on its own, the collector reports failure (no stale
data served as current) and the child is started again. A child whose read hangs (a stuck
Lustre procfs read never returns; only lctl runs under a timeout) sends nothing: once the
newest sample is older than ``stale_after()`` it is no longer served (the collector fails,
one warning line says so) and the child is killed and started again; a child that does not
die (blocked in an uninterruptible read) is not waited for, and its sample stays unserved.
The child is started with ``-P``, so a folder in the working directory can never shadow the
installed package. A child that cannot start (it dies before its first sample) is said once:
the same failure again is not repeated, and the restarts back off up to a minute; scrapes do
not wait for it meanwhile.
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
from typing import BinaryIO

from hpcmon.exporter.collector import LOG_FORMAT, Periodic
from hpcmon.exporter.exposition import Compressed

log = logging.getLogger("hpcmon.exporter.jobstats")

PR_SET_PDEATHSIG = 1
NICENESS = 10
RESTART_SECONDS = 1.0
MAX_DELAY = 60.0  # seconds between attempts to start a child that cannot start
STUCK_MARGIN = 5.0  # seconds to parse and render a big server's sample, on top of its read


def stale_after(interval: float, timeout: float) -> float:
    """Seconds after which the newest sample is no longer current. The child finishes a sample
    at most ``interval`` after the previous one plus one read (lctl is killed at ``timeout``)
    plus parsing; three intervals so a long interval is not called stuck for one slow sample.
    With interval 0 (sampling on scrape, no child) this is the time one sample may take."""
    return max(3 * interval, interval + timeout + STUCK_MARGIN)


def _without_time(line: str) -> str:
    """A log line without its LOG_FORMAT timestamp, so a repeated failure compares equal."""
    parts = line.split(" ", 2)
    return parts[2] if len(parts) == 3 and parts[0][:2].isdigit() else line


def _say(line: str) -> None:
    """One of the child's lines on our stderr; a closed stderr must not stop the draining of
    the child's pipe (a full pipe would block the child)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


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
        self.stale_after = stale_after(options.jobstats_interval, options.jobstats_timeout)
        self._process: subprocess.Popen[bytes] | None = None
        self._newest: tuple[Compressed, float] | None = None  # and when it came (monotonic)
        self._waiting_since = time.monotonic()  # the last sample, or the running child's start
        self._last_sample = "never"  # wall-clock time of the last sample, for the log
        self._stuck: str | None = None  # why no sample is current, until one arrives
        self._killed: subprocess.Popen[bytes] | None = None  # the stuck child we killed
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._receiver: threading.Thread | None = None
        self._relay: threading.Thread | None = None
        self._lock = threading.Lock()  # the child's first sample vs its stderr lines
        self._ready_once = False  # the running child has sent a sample
        self._held: list[str] = []  # its stderr lines until then
        self._said = ""  # the last "could not start" line, not repeated
        self._failing = False  # the last child died before its first sample

    def start(self) -> None:
        self._stopping.clear()
        self._spawn()
        self._receiver = threading.Thread(
            target=self._receive, name="jobstats-receiver", daemon=True
        )
        self._receiver.start()

    def _spawn(self) -> None:
        # -P: the working directory is not put on sys.path (a source tree there would shadow
        # the installed hpcmon); PYTHONPATH and site-packages (editable installs) still count.
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "hpcmon.exporter.jobstats.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdin is not None  # piped, as are stdout and stderr
        with self._lock:
            self._ready_once = False
            self._held = []
            self._waiting_since = time.monotonic()
        self._relay = threading.Thread(
            target=self._relay_stderr, args=(process,), name="jobstats-stderr", daemon=True
        )
        self._relay.start()
        try:
            pickle.dump((self.options, logging.getLogger().getEffectiveLevel()), process.stdin)
            process.stdin.close()
        except OSError:  # it died at once; _receive sees the end of its stdout
            pass
        self._process = process

    def _relay_stderr(self, process: subprocess.Popen[bytes]) -> None:
        """The child's log lines go to our stderr once it has sent a sample; until then they
        are held: a child that dies before is one line (``_receive``), not its whole output."""
        assert process.stderr is not None  # _spawn pipes it
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock:
                if not self._ready_once:
                    self._held.append(line)
                    continue
            _say(line)
        process.stderr.close()

    def _receive(self) -> None:
        delay = RESTART_SECONDS
        while not self._stopping.is_set():
            process = self._process
            assert process is not None  # start() spawned it before starting this thread
            assert process.stdout is not None  # _spawn pipes it
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
                relay = self._relay
                assert relay is not None  # started by _spawn, with the process
                relay.join(timeout=5)
                self._newest = None
                self._ready.clear()
                process.stdout.close()
                if process is self._killed:  # stuck: said once when it was killed
                    delay = RESTART_SECONDS
                elif self._ready_once:
                    log.error("jobstats sampler process exited (code %s); starting it again", code)
                    delay = RESTART_SECONDS
                else:  # it died before its first sample: it cannot start
                    why = _without_time(self._held[-1]) if self._held else "no output"
                    message = f"jobstats sampler process cannot start (code {code}): {why}"
                    if message != self._said:
                        log.error("%s; retrying, backing off up to %.0f s", message, MAX_DELAY)
                        self._said = message
                    self._failing = True
                    delay = min(delay * 2, MAX_DELAY)
                if self._stopping.wait(delay):
                    return
                self._spawn()
                continue
            with self._lock:
                if not self._ready_once:
                    self._ready_once = True
                    for line in self._held:
                        _say(line)
                    self._held = []
            if self._failing:
                log.warning("jobstats sampler process started")
                self._failing = False
                self._said = ""
            with self._lock:
                self._newest = (snapshot, time.monotonic())
                self._waiting_since = self._newest[1]
                self._last_sample = time.strftime("%H:%M:%S")
                if self._stuck is not None:
                    log.warning("jobstats sampler process: samples arrive again")
                    self._stuck = None
            self._ready.set()

    def latest(self, deadline: float) -> Compressed:
        """The last exposition while it is current; waits (up to ``deadline``,
        time.monotonic) only for the first one. Raises SamplerGone while the child is down,
        or stuck: then it is killed (once) and started again."""
        newest = self._newest
        if newest is not None and time.monotonic() - newest[1] <= self.stale_after:
            return newest[0]
        if self._failing:
            raise SamplerGone("the jobstats sampler process cannot start")
        if self._stuck is not None or time.monotonic() - self._waiting_since > self.stale_after:
            raise SamplerGone(self._stuck_child())  # at once: no wait for what is not coming
        while (newest := self._newest) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._ready.wait(remaining):
                raise SamplerGone("no jobstats sample yet: the sampler process is not running")
        return newest[0]

    def _stuck_child(self) -> str:
        """Says once that no sample came for too long, kills the child that is stuck (never
        waited for: one blocked in the kernel may not die yet) and returns the reason, the
        same for every scrape until a sample arrives."""
        with self._lock:
            age = time.monotonic() - self._waiting_since
            if self._stuck is None:
                self._stuck = (
                    f"no jobstats sample for over {self.stale_after:g} s (the last: "
                    f"{self._last_sample}): a read is stuck"
                )
                log.warning(
                    "%s; restarting the sampler process (%.0f s without a sample)",
                    self._stuck,
                    age,
                )
            process = self._process
            if age > self.stale_after and process is not None and process is not self._killed:
                self._killed = process
                process.kill()
            return self._stuck

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:  # blocked in the kernel: not waited for
                    log.warning("jobstats sampler process %d does not die", process.pid)
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.join(timeout=5)
        if process is not None and not (receiver is not None and receiver.is_alive()):
            assert process.stdout is not None  # _spawn pipes it
            process.stdout.close()  # (a close would wait for the receiver's read)
        if self._relay is not None:
            self._relay.join(timeout=5)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None


if __name__ == "__main__":
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but expositions goes down the pipe
    try:
        child_main(sys.stdin.buffer, stdout)
    except Exception as exc:  # one line for the exporter's log, never a traceback
        print(f"jobstats sampler process: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
