"""One post-job run: call the sources, turn their points into lines, ship them without loss.

Shared by the command line and the Slurm epilog mode so both behave the same. Sources are
imported lazily: a source package that is missing or broken costs only its own data, with a
one-line error naming it, and the job's other sources are still written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcmon.points import Point
from hpcmon.timeutil import now_ns
from post_job.model import JobContext, SourceOutput
from post_job.spool import ReplayResult, Spool, replay
from post_job.writers import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_TIMEOUT_SECONDS,
    Deadline,
    InfluxV1Writer,
    InfluxV2Writer,
    ServerWriter,
    deliver,
    read_token,
    url_problem,
    write_line_file,
)

PROG = "hpcmon-post-job"
log = logging.getLogger("hpcmon.post_job")

# source name -> (module, entry function) of postjob-contract.md
SOURCE_ENTRIES: dict[str, tuple[str, str]] = {
    "darshan": ("post_job.darshan", "collect_darshan"),
    "recorder": ("post_job.recorder", "collect_recorder"),
    "viztracer": ("post_job.viztracer", "collect_viztracer"),
    "geopm_report": ("post_job.geopm_report", "collect_geopm_report"),
}


@dataclass
class SourceRequest:
    """One source call: ``entry(*inputs, job, **options)``."""

    name: str
    inputs: tuple[Any, ...]
    options: dict[str, Any] = field(default_factory=dict)


def load_entry(name: str) -> Callable[..., SourceOutput]:
    """The source's entry function; ImportError with a one-line reason when unavailable."""
    module_name, function_name = SOURCE_ENTRIES[name]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a broken package must not stop the others
        raise ImportError(f"{module_name} cannot be imported: {type(exc).__name__}: {exc}") from exc
    entry = getattr(module, function_name, None)
    if not callable(entry):
        raise ImportError(f"{module_name} has no {function_name}()")
    return entry


def run_source(request: SourceRequest, job: JobContext) -> SourceOutput:
    """Call one source, turning every failure into an error line for that source only."""
    try:
        entry = load_entry(request.name)
    except ImportError as exc:
        return SourceOutput(errors=[f"source not available: {exc}"])
    try:
        output = entry(*request.inputs, job, **request.options)
    except Exception as exc:  # noqa: BLE001 - contract says sources never raise; be safe anyway
        log.debug("source %s raised", request.name, exc_info=True)
        return SourceOutput(errors=[f"failed: {type(exc).__name__}: {exc}"])
    if not isinstance(output, SourceOutput):
        return SourceOutput(errors=[f"returned {type(output).__name__}, not SourceOutput"])
    return output


def collect(requests: Sequence[SourceRequest], job: JobContext) -> SourceOutput:
    combined = SourceOutput()
    for request in requests:
        output = run_source(request, job)
        log.info(
            "job=%s source=%s points=%d errors=%d",
            job.job_id,
            request.name,
            len(output.points),
            len(output.errors),
        )
        combined.points.extend(output.points)
        combined.errors.extend(f"{request.name}: {error}" for error in output.errors)
        for warning in output.warnings:
            log.warning("job=%s %s: %s", job.job_id, request.name, warning)
    return combined


def points_to_lines(
    points: Sequence[Point], run_time_ns: int | None = None
) -> tuple[list[str], list[str]]:
    """Line protocol per point plus problems. A point without time gets the run's time so that
    spooled and replayed copies stay identical (sources should always give one)."""
    lines: list[str] = []
    problems: list[str] = []
    untimed: dict[str, int] = {}
    stamp = now_ns() if run_time_ns is None else run_time_ns
    for point in points:
        if point.time_ns is None:
            untimed[point.measurement] = untimed.get(point.measurement, 0) + 1
            point = dataclasses.replace(point, time_ns=stamp)
        try:
            line = point.to_line()
        except Exception as exc:  # noqa: BLE001 - one bad point must not cost the others
            problems.append(f"point {point.measurement!r}: cannot encode: {exc}")
            continue
        if line:
            lines.append(line)
    for measurement, count in sorted(untimed.items()):
        problems.append(
            f"{count} {measurement} point(s) had no timestamp; stamped with the run time"
        )
    return lines, problems


@dataclass
class WriterSettings:
    """Where to write: any mix of a line-protocol file and the two server APIs."""

    output: str | None = None
    v2_url: str | None = None
    v2_org: str | None = None
    v2_bucket: str | None = None
    v2_token: str | None = None
    v1_url: str | None = None
    v1_database: str | None = None
    v1_retention_policy: str | None = None
    v1_username: str | None = None
    v1_password: str | None = None
    spool_dir: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    request_timeout: float = DEFAULT_TIMEOUT_SECONDS

    def has_server(self) -> bool:
        return bool(self.v1_url or self.v2_url)

    def add_secrets(self, token_file: str | None, environ: Mapping[str, str]) -> None:
        """Check the server URLs, then take the secrets from the token file or the environment
        (never from a flag or the config file); ValueError with a one-line reason."""
        for url in (self.v1_url, self.v2_url):
            problem = url_problem(url) if url else None
            if problem:
                raise ValueError(problem)
        if self.v2_url:
            self.v2_token = read_token(token_file, dict(environ))
        if self.v1_url:
            self.v1_username = environ.get("INFLUX_USERNAME") or None
            self.v1_password = environ.get("INFLUX_PASSWORD") or None

    def server_writers(self) -> list[ServerWriter]:
        writers: list[ServerWriter] = []
        if self.v1_url:
            writers.append(
                InfluxV1Writer(
                    self.v1_url,
                    self.v1_database or "",
                    self.v1_retention_policy,
                    self.v1_username,
                    self.v1_password,
                )
            )
        if self.v2_url:
            writers.append(
                InfluxV2Writer(
                    self.v2_url,
                    self.v2_org or "",
                    self.v2_bucket or "",
                    self.v2_token,
                    self.request_timeout,
                )
            )
        return writers


@dataclass
class DestinationReport:
    destination: str
    written: int = 0
    spooled: int = 0
    rejected: int = 0
    lost: int = 0
    replayed_lines: int = 0
    replayed_files: int = 0
    spool_files_left: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"destination={self.destination!r} written={self.written} "
            f"spooled={self.spooled} rejected={self.rejected} lost={self.lost} "
            f"replayed_lines={self.replayed_lines} replayed_files={self.replayed_files} "
            f"spool_files_left={self.spool_files_left}"
        )


def batches(lines: Sequence[str], size: int) -> list[Sequence[str]]:
    size = max(1, size)
    return [lines[start : start + size] for start in range(0, len(lines), size)]


def _replay_into(
    report: DestinationReport,
    spool: Spool,
    writer: ServerWriter,
    deadline: Deadline,
    settings: WriterSettings,
    own: dict[Path, Sequence[str]] | None = None,
) -> ReplayResult:
    try:
        result = replay(spool, writer, deadline, settings.request_timeout, own)
    except OSError as exc:  # spool directory unusable: say so (what is on disk stays there)
        report.problems.append(f"spool {spool.dir}: {exc.strerror or exc}")
        return ReplayResult(unavailable_reason=f"spool unusable: {exc.strerror or exc}")
    report.replayed_lines += result.lines_sent
    report.replayed_files += result.files_sent
    report.written += result.own_lines_sent
    report.rejected += result.lines_rejected + result.own_lines_rejected
    report.spool_files_left = result.files_left
    report.problems.extend(result.corrupt)
    rejected = result.lines_rejected + result.own_lines_rejected
    if rejected:
        report.problems.append(
            f"{rejected} line(s) rejected by the server, kept in {spool.rejected_dir}"
        )
    if result.skipped_locked:
        log.info(
            "spool %s: another hpcmon-post-job is sending it; this run's lines wait there",
            spool.dir,
        )
    return result


def _write_ahead(
    spool: Spool, lines: Sequence[str], batch_size: int
) -> tuple[dict[Path, Sequence[str]], int, str | None]:
    """Spool the run's lines (one durable file per batch) before anything is sent.

    Returns the files written, how many lines they hold, and why spooling stopped (disk full,
    ...) or None. A file is complete or absent: a failed write leaves no file taken for valid
    and never touches the files already there."""
    written: dict[Path, Sequence[str]] = {}
    count = 0
    with GUARD.spooling():
        for batch in batches(lines, batch_size):
            try:
                path = spool.add(batch)
            except OSError as exc:
                return written, count, exc.strerror or str(exc)
            if path is not None:
                written[path] = batch
                count += len(batch)
    return written, count, None


def ship_to_server(
    lines: Sequence[str], writer: ServerWriter, settings: WriterSettings, deadline: Deadline
) -> DestinationReport:
    """With a spool: write every line ahead into it, then send the spool oldest first,
    deleting each file once acknowledged (a kill at any instant loses nothing). Without one:
    send in batches; what the server does not acknowledge is lost and counted."""
    if not settings.spool_dir:
        GUARD.note = "lines the server had not acknowledged are lost (no --spool-dir)"
        return _send_direct(lines, writer, settings, deadline, DestinationReport(writer.describe()))
    report = DestinationReport(writer.describe())
    spool = Spool(settings.spool_dir, writer.kind)
    own, spooled, spool_error = _write_ahead(spool, lines, settings.batch_size)
    GUARD.note = f"unacknowledged lines are kept in {spool.dir} for the next run or 'flush'"
    result = _replay_into(report, spool, writer, deadline, settings, own)
    report.spooled = spooled - result.own_lines_sent - result.own_lines_rejected
    unspooled = lines[spooled:]
    if spool_error is not None:
        GUARD.note = "lines that could not be spooled are lost if not acknowledged"
        direct = _send_direct(unspooled, writer, settings, deadline, DestinationReport(""))
        report.written += direct.written
        report.rejected += direct.rejected
        report.lost += direct.lost
        report.problems.append(
            f"spool {spool.dir}: cannot write ({spool_error}); {len(unspooled)} line(s) sent "
            f"without a spool: {direct.written} written, {direct.rejected} rejected, "
            f"{direct.lost} lost; the spool already there is intact"
        )
    down = result.unavailable_reason
    if down is not None and report.spooled:
        log.warning(
            "%s unavailable (%s); %d line(s) of this run wait in %s",
            writer.describe(),
            down,
            report.spooled,
            spool.dir,
        )
    return report


def _send_direct(
    lines: Sequence[str],
    writer: ServerWriter,
    settings: WriterSettings,
    deadline: Deadline,
    report: DestinationReport,
) -> DestinationReport:
    """Send without a spool: whatever the server does not acknowledge is lost and counted."""
    down: str | None = None
    for batch in batches(lines, settings.batch_size):
        if down is None:
            outcome = deliver(writer, batch, deadline, settings.request_timeout)
            report.written += outcome.written
            down = outcome.unavailable_reason
            rejected, unsent = outcome.rejected, outcome.pending
        else:
            rejected, unsent = [], list(batch)
        if rejected:
            report.rejected += len(rejected)
            report.problems.append(
                f"{len(rejected)} line(s) rejected by the server; first: {rejected[0][1]}"
            )
        report.lost += len(unsent)
    if report.lost and report.destination:
        report.problems.append(
            f"{report.lost} line(s) not written ({down}) and not spooled (no --spool-dir)"
        )
    return report


def ship(
    lines: Sequence[str], settings: WriterSettings, deadline: Deadline
) -> list[DestinationReport]:
    """Write the lines to every configured destination (stdout when none is configured)."""
    reports: list[DestinationReport] = []
    if settings.output or not settings.has_server():
        report = DestinationReport(settings.output or "stdout")
        try:
            write_line_file(lines, settings.output)
            report.written = len(lines)
        except OSError as exc:
            report.lost = len(lines)
            report.problems.append(f"{settings.output}: cannot write: {exc.strerror or exc}")
        reports.append(report)
    for writer in _open_writers(settings, reports):
        try:
            reports.append(ship_to_server(lines, writer, settings, deadline))
        finally:
            writer.close()
    return reports


def flush(settings: WriterSettings, deadline: Deadline) -> list[DestinationReport]:
    """Replay every server's spool (``hpcmon-post-job flush``)."""
    assert settings.spool_dir, "flush needs a spool directory"
    reports: list[DestinationReport] = []
    for writer in _open_writers(settings, reports):
        report = DestinationReport(writer.describe())
        try:
            spool = Spool(settings.spool_dir, writer.kind)
            result = _replay_into(report, spool, writer, deadline, settings)
        finally:
            writer.close()
        if result.unavailable_reason:
            report.problems.append(
                f"{report.spool_files_left} spool file(s) left: {result.unavailable_reason}"
            )
        reports.append(report)
    return reports


def _open_writers(settings: WriterSettings, reports: list[DestinationReport]) -> list[ServerWriter]:
    try:
        return settings.server_writers()
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed URL
        reports.append(DestinationReport("server", problems=[f"cannot set up writer: {exc}"]))
        return []


@dataclass
class RunReport:
    points: int = 0
    lines: int = 0
    source_errors: list[str] = field(default_factory=list)
    destinations: list[DestinationReport] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = list(self.source_errors)
        for destination in self.destinations:
            found.extend(destination.problems)
        return found


def run_job(
    job: JobContext, requests: Sequence[SourceRequest], settings: WriterSettings, deadline: Deadline
) -> RunReport:
    GUARD.note = "nothing of this run is spooled yet"
    output = collect(requests, job)
    lines, encode_problems = points_to_lines(output.points)
    report = RunReport(
        points=len(output.points), lines=len(lines), source_errors=output.errors + encode_problems
    )
    for error in report.source_errors:
        log.error("job=%s %s", job.job_id, error)
    report.destinations = ship(lines, settings, deadline)
    for destination in report.destinations:
        log.info("job=%s %s", job.job_id, destination.summary())
        for problem in destination.problems:
            log.error("job=%s %s", job.job_id, problem)
    return report


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
