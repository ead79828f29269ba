"""How a post-job run ends and what it says: the time limit, SIGTERM, the exit guard that
lets the write-ahead spooling finish first, and one-line (syslog friendly) logging."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

from hpcmon.post_job.writers import Deadline

PROG = "hpcmon-post-job"
log = logging.getLogger("hpcmon.post_job")


def sending_deadline(limit: float | None) -> Deadline:
    """Stop sending a little before the hard limit, leaving time to spool what is left."""
    if limit is None:
        return Deadline(None)
    return Deadline(max(limit * 0.5, limit - min(5.0, limit * 0.2)))


class ExitGuard:
    """Ends the process at once for SIGTERM or the time limit, except while this run's lines
    are being written ahead into the spool: then right after that (a few milliseconds), since
    a run stopped half-way through spooling would lose the rest. Once spooled, stopping loses
    nothing: every unacknowledged line is in the spool."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a signal handler runs in the main thread
        self._spooling = 0
        self._pending: tuple[str, int] | None = None
        self.note = "nothing of this run is spooled yet"

    def stop(self, message: str, code: int) -> None:
        with self._lock:
            if self._spooling:
                self._pending = (message, code)
                return
        _exit_now(f"{message}; {self.note}", code)

    @contextlib.contextmanager
    def spooling(self) -> Iterator[None]:
        with self._lock:
            self._spooling += 1
        try:
            yield
        finally:
            with self._lock:
                self._spooling -= 1
                pending = self._pending if not self._spooling else None
            if pending is not None:
                _exit_now(f"{pending[0]}; spooling finished first, {self.note}", pending[1])


GUARD = ExitGuard()


def _exit_now(message: str, code: int) -> None:
    """One line, then exit without unwinding (a request in flight is simply abandoned)."""
    try:
        log.error("%s; exiting with status %d", message, code)
        for handler in logging.getLogger().handlers:
            handler.flush()
    except Exception:  # noqa: BLE001 - e.g. a signal arrived while stderr was being written
        os.write(
            2, f"{PROG}[{os.getpid()}]: ERROR {message}; exiting with status {code}\n".encode()
        )
    os._exit(code)


@contextlib.contextmanager
def stop_on_sigterm(exit_code: int) -> Iterator[None]:
    """SIGTERM (``timeout``, ``scancel``, shutdown) stops the run within milliseconds with one
    line and ``exit_code``; the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        GUARD.stop("terminated by SIGTERM", exit_code)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Watchdog:
    """Hard time limit: if the run is still going at the limit, log and exit the process now
    (after the spooling in progress, if any; see ExitGuard).

    Sending already stops early (the Deadline leaves the rest in the spool); this catches
    everything else, such as a source stuck on a huge log, so the hook never outlives its limit.
    """

    def __init__(self, seconds: float | None, exit_code: int = 0) -> None:
        self.seconds, self.exit_code = seconds, exit_code
        self._timer: threading.Timer | None = None

    def _fire(self) -> None:
        GUARD.stop(f"time limit of {self.seconds:g}s reached", self.exit_code)

    def __enter__(self) -> Watchdog:
        if self.seconds is not None:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()


class _OneLineFormatter(logging.Formatter):
    """Syslog keeps one record per line: line breaks inside a message become a visible ``\\n``."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\r", "").replace("\n", "\\n")


def configure_logging(level: str = "info", syslog: bool = False) -> None:
    """One line per event, syslog friendly: ``hpcmon-post-job[pid]: LEVEL message``."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler: logging.Handler
    if syslog and os.path.exists("/dev/log"):
        from logging.handlers import SysLogHandler

        handler = SysLogHandler(address="/dev/log")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(f"{PROG}[{os.getpid()}]: %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper().replace("WARN", "WARNING"), logging.INFO))
    # influxdb-client logs every failed request itself; our own line says the same once.
    logging.getLogger("influxdb_client").setLevel(logging.CRITICAL)
