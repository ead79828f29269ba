"""lines -> spool -> writers: write each run's lines ahead into the spool, send the spool
oldest first, delete only what the server acknowledged; or write a line-protocol file.

Every destination gets a ``DestinationReport`` (written, spooled, rejected, lost, problems).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcmon.entry import missing_package
from hpcmon.post_job.lifetime import GUARD
from hpcmon.post_job.spool import ReplayResult, Spool, replay
from hpcmon.post_job.writers import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_TIMEOUT_SECONDS,
    Deadline,
    InfluxV1Writer,
    InfluxV2Writer,
    RejectedError,
    ServerWriter,
    deliver,
    read_secret,
    read_token,
    url_problem,
    write_line_file,
)

log = logging.getLogger("hpcmon.post_job")


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
            self.v1_username = read_secret("INFLUX_USERNAME", environ)
            self.v1_password = read_secret("INFLUX_PASSWORD", environ)

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


class _NotingRefusals:
    """The writer, keeping the server's first reason for refusing lines, so the run's one
    line says why they were rejected (e.g. older than the retention policy keeps)."""

    def __init__(self, writer: ServerWriter) -> None:
        self.writer, self.kind = writer, writer.kind
        self.refusal: str | None = None

    def describe(self) -> str:
        return self.writer.describe()

    def send(self, lines: Sequence[str], timeout: float) -> None:
        try:
            self.writer.send(lines, timeout)
        except RejectedError as exc:
            self.refusal = self.refusal or str(exc)
            raise

    def close(self) -> None:
        self.writer.close()


def _replay_into(
    report: DestinationReport,
    spool: Spool,
    writer: ServerWriter,
    deadline: Deadline,
    settings: WriterSettings,
    own: dict[Path, Sequence[str]] | None = None,
) -> ReplayResult:
    noting = _NotingRefusals(writer)
    try:
        result = replay(spool, noting, deadline, settings.request_timeout, own)
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
            f"{rejected} line(s) rejected by the server, kept in {spool.rejected_dir}; "
            f"first: {noting.refusal}"
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
    if down is not None and result.capacity:
        # not an outage that passes by itself: someone must raise the limit, so a problem line
        report.problems.append(
            f"{writer.describe()}: {down}; {report.spooled} line(s) of this run wait in "
            f"{spool.dir}: run 'hpcmon-post-job flush' once the limit is raised"
        )
    elif down is not None and report.spooled:
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
            _requeue_capacity_refusals(spool, report)
            result = _replay_into(report, spool, writer, deadline, settings)
        finally:
            writer.close()
        if result.unavailable_reason:
            report.problems.append(
                f"{report.spool_files_left} spool file(s) left: {result.unavailable_reason}"
            )
        reports.append(report)
    return reports


def _requeue_capacity_refusals(spool: Spool, report: DestinationReport) -> None:
    """Lines an earlier release filed as rejected for a series limit go back into the queue."""
    try:
        queued = spool.requeue_capacity_refusals()
    except OSError as exc:
        report.problems.append(f"spool {spool.rejected_dir}: {exc.strerror or exc}")
        return
    if queued:
        log.info(
            "flush: %d line(s) filed as rejected for the store's series limit are queued again",
            queued,
        )


def _open_writers(settings: WriterSettings, reports: list[DestinationReport]) -> list[ServerWriter]:
    try:
        return settings.server_writers()
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed URL
        if missing_package(exc):
            raise  # the writer's library (post-job extra) is not installed: hpcmon.entry says so
        reports.append(DestinationReport("server", problems=[f"cannot set up writer: {exc}"]))
        return []
