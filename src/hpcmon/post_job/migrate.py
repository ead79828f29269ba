"""``hpcmon-post-job migrate``: an InfluxDB 1.x database written before issue 31 to the
layout of layout.py, in place, job by job, resumable.

The old layout kept ``jobid``, ``log``, ``trace``, ``file``, ``rank`` (and a VizTracer
``function``) as tags and the points' own times. For each job that still has such series, the
migration reads all its old points back (``WHERE "jobid"::tag = '<id>'``: once a measurement
also holds the new ``jobid`` field, a bare ``"jobid"`` means the field), rebuilds the hook's
points (field types from ``SHOW FIELD KEYS``: InfluxDB's JSON writes a float 2.0 as ``2``),
applies ``migrated_points`` (the hook's ``stored_points``, and the job's ``io_score`` in its
``app_run`` point as the hook now keeps it), writes them with the hook's writer (batches,
bisection, the same errors) and, only once InfluxDB acknowledged every line, drops the job's
old series with ``DROP SERIES`` over the measurements it had (``"jobid"::tag`` again: a bare
``"jobid"`` is refused once the field exists), one statement for ``--jobs-per-drop`` such
jobs (a DROP SERIES costs InfluxDB about as much for one job as for 50: 4 jobs/s one by one,
11 in fifties). The new series have no ``jobid`` tag, so they stay; ``job_index`` is never
named.

Stopped at any instant (kill, time limit, outage), nothing is lost: a job's old series go
only after its new points are in, and a rerun migrates again whatever still has old series
(the same old points give the same stamps, so writing them again changes nothing).

``DROP SERIES`` acts on every retention policy of the database (InfluxQL has no way to name
one), so a job is migrated in every retention policy that holds its old points, each into its
own; with ``--influx.retention-policy``, a job that also has old points in another one is left
as it is and named (dropping would delete those).

A job id's points are stamped per cluster tag (two clusters sharing a database each have
their job 42: each gets its own ``job_index`` point); ``--cluster NAME`` migrates only that
cluster's jobs and drops only their series.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from hpcmon.common.influxql import quote_identifier, quote_literal
from hpcmon.post_job.app import with_io_score
from hpcmon.post_job.delivery import WriterSettings, batches
from hpcmon.post_job.layout import INDEX, stored_points
from hpcmon.post_job.lines import points_to_lines
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point
from hpcmon.post_job.writers import (
    _NO_REDIRECTS,
    Deadline,
    InfluxV1Writer,
    UnavailableError,
    _short,
    deliver,
)

log = logging.getLogger("hpcmon.post_job")

# Every measurement the post-job hook writes (the sources' points modules, app.py, the
# diagnosis, slurm_points.py), except job_index, which the migration never reads nor drops.
MEASUREMENTS = (
    "darshan_job",
    "darshan_module",
    "darshan_heatmap",
    "darshan_heatmap_bin",
    "darshan_record",
    "darshan_rank",
    "recorder_trace",
    "recorder_function",
    "recorder_rank",
    "recorder_file",
    "recorder_rank_function",
    "viztracer_summary",
    "viztracer_function",
    "geopm_report",
    "geopm_region",
    "geopm_totals",
    "geopm_session",
    "geopm_session_signal",
    "app_run",
    "job_diagnosis",
    "slurm_job",
)
CHUNK_SIZE = 10_000  # rows per chunk of a job's SELECT
PROGRESS_EVERY = 100  # jobs per progress line
JOBS_PER_DROP = 50  # jobs whose old series one DROP SERIES removes
_CAST = {"float": float, "integer": int, "string": str, "boolean": bool}


class MigrationError(Exception):
    """InfluxDB answered a query with an error (not an outage): one line."""


class InfluxV1Query:
    """InfluxDB 1.x ``POST /query`` (epoch ns, chunked when asked), basic auth like the writer."""

    def __init__(self, settings: WriterSettings, deadline: Deadline) -> None:
        self.base = (settings.v1_url or "").rstrip("/") + "/query"
        self.database = settings.v1_database or ""
        self.timeout = settings.request_timeout
        self.deadline = deadline
        self.headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if settings.v1_username:
            secret = f"{settings.v1_username}:{settings.v1_password or ''}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()

    def results(self, statement: str, chunked: bool = False) -> Iterator[dict]:
        """Each JSON object InfluxDB answers (one per chunk); UnavailableError for outages
        and refusals of us (auth, 5xx), MigrationError for an error the statement got."""
        params = {"q": statement, "db": self.database, "epoch": "ns"}
        if chunked:
            params.update(chunked="true", chunk_size=str(CHUNK_SIZE))
        request = urllib.request.Request(
            self.base, data=urllib.parse.urlencode(params).encode(), headers=self.headers
        )
        if self.deadline.expired():
            raise UnavailableError("time limit reached")
        try:
            with _NO_REDIRECTS.open(
                request, timeout=self.deadline.timeout(self.timeout)
            ) as response:
                for raw in response:
                    if raw.strip():
                        answer = json.loads(raw)
                        _raise_for_errors(answer)
                        yield answer
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read()
            except (OSError, http.client.HTTPException):
                body = b""
            said = _error_of(body) or _short(body)
            if exc.code == 400:
                raise MigrationError(f"HTTP 400: {said}") from exc
            raise UnavailableError(f"HTTP {exc.code} from {self.base}: {said}") from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {_short(str(exc))}"
            raise UnavailableError(f"cannot reach {self.base}: {reason}") from exc
        except ValueError as exc:
            raise UnavailableError(f"{self.base} did not answer JSON: not InfluxDB 1.x") from exc

    def series(self, statement: str, chunked: bool = False) -> Iterator[dict]:
        for answer in self.results(statement, chunked):
            for result in answer.get("results") or []:
                yield from result.get("series") or []


def _error_of(body: bytes) -> str | None:
    try:
        said = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return said if isinstance(said, str) else None


def _raise_for_errors(answer: dict) -> None:
    if not isinstance(answer, dict):
        raise ValueError("not an object")
    if isinstance(answer.get("error"), str):
        raise MigrationError(answer["error"])
    for result in answer.get("results") or []:
        if isinstance(result.get("error"), str):
            raise MigrationError(result["error"])


@dataclass
class MigrationReport:
    jobs: int = 0  # jobs with old-layout series when the run began
    migrated: int = 0
    points_read: int = 0
    points_written: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job, reason)
    stopped: str | None = None  # why the run stopped before the last job (outage, time limit)
    seconds: float = 0.0

    @property
    def left(self) -> int:
        return self.jobs - self.migrated - len(self.failed)

    def summary(self) -> str:
        rate = self.migrated / self.seconds if self.seconds > 0 else 0.0
        return (
            f"migrate: jobs={self.jobs} migrated={self.migrated} failed={len(self.failed)} "
            f"left={self.left} points_read={self.points_read} "
            f"points_written={self.points_written} seconds={self.seconds:.1f} "
            f"jobs_per_second={rate:.1f}"
        )


class Migration:
    def __init__(self, settings: WriterSettings, cluster: str | None, deadline: Deadline) -> None:
        self.settings = settings
        self.cluster = cluster
        self.deadline = deadline
        self.query = InfluxV1Query(settings, deadline)
        self.policy = settings.v1_retention_policy
        self.policies: list[str] = []
        self.types: dict[str, dict[str, dict[str, set[str]]]] = {}  # rp -> m -> key -> types
        self.unknown: set[tuple[str, str, str]] = set()

    # ------------------------------------------------------------------ listing
    def jobs(self) -> list[str]:
        """Every job id that still has old-layout series (of ``--cluster`` when given)."""
        self.policies = self._policies()
        # the WHERE: without it, InfluxDB 1.6.7's TSI index still lists values of dropped
        # series (as long as the measurement has other series with the key; after a restart too)
        statement = (
            f"SHOW TAG VALUES FROM {_sources(None, MEASUREMENTS)} WITH KEY = "
            f"{quote_identifier('jobid')} WHERE {quote_identifier('jobid')}::tag =~ /./"
        )
        if self.cluster:
            statement += f" AND {quote_identifier('cluster')}::tag = {quote_literal(self.cluster)}"
        ids = {row[1] for s in self.query.series(statement) for row in s.get("values") or []}
        return sorted(ids, key=_id_order)

    def _policies(self) -> list[str]:
        rows = [
            row
            for s in self.query.series("SHOW RETENTION POLICIES")
            for row in s.get("values") or []
        ]
        names = [row[0] for row in rows]
        if self.policy and self.policy not in names:
            raise MigrationError(
                f"retention policy {self.policy!r} not found in database "
                f"{self.query.database} (it has: {', '.join(names) or 'none'})"
            )
        return names

    # ------------------------------------------------------------------ one job
    def migrate(self, job_id: str) -> tuple[int, int, set[str]]:
        """Write the job's points in the new layout: points read, lines written and the
        measurements to drop its old series from (``drop``, once InfluxDB acknowledged every
        line). MigrationError: this job failed; UnavailableError: the server went away or
        the time is up, stop."""
        mine = [self.policy] if self.policy else self.policies
        for other in (p for p in self.policies if p not in mine):
            if self._read(job_id, other, limit=True):
                raise MigrationError(
                    f"it also has old-layout points in retention policy {other!r}, which "
                    "DROP SERIES would delete too (it acts on every retention policy): "
                    "migrate without --influx.retention-policy"
                )
        read = written = 0
        measurements: set[str] = set()
        times = [time.monotonic()]
        for policy in mine:
            points = self._read(job_id, policy)
            times.append(time.monotonic())
            read += len(points)
            measurements.update(p.measurement for p in points)
            by_cluster: dict[str, list[Point]] = {}
            for point in points:
                by_cluster.setdefault(point.tags.get("cluster", ""), []).append(point)
            for cluster, members in sorted(by_cluster.items()):
                written += self._write(JobContext(job_id, cluster or None), policy, members)
            times.append(time.monotonic())
        steps = " ".join(f"{b - a:.3f}" for a, b in zip(times, times[1:], strict=False))
        log.debug("migrate: job %s points=%d written=%d seconds(read write)=%s",
                  job_id, read, written, steps)  # fmt: skip
        # no points left (expired, deleted): its empty series go too, or it stays listed
        return read, written, measurements or set(MEASUREMENTS)

    def _condition(self, job_ids: Sequence[str]) -> str:
        condition = " OR ".join(
            f"{quote_identifier('jobid')}::tag = {quote_literal(job_id)}" for job_id in job_ids
        )
        if len(job_ids) > 1:
            condition = f"({condition})"
        if self.cluster:
            condition += f" AND {quote_identifier('cluster')}::tag = {quote_literal(self.cluster)}"
        return condition

    def _read(self, job_id: str, policy: str, limit: bool = False) -> list[Point]:
        statement = (
            f"SELECT * FROM {_sources(policy, MEASUREMENTS)} WHERE {self._condition([job_id])} "
            "GROUP BY *" + (" LIMIT 1" if limit else "")
        )
        points: list[Point] = []
        for series in self.query.series(statement, chunked=not limit):
            name = series.get("name", "")
            tags = {k: v for k, v in (series.get("tags") or {}).items() if v not in (None, "")}
            columns = series.get("columns") or []  # of every measurement of the query
            for row in series.get("values") or []:
                fields: dict[str, FieldValue] = {}
                for column, value in zip(columns[1:], row[1:], strict=False):
                    if value is not None:
                        fields[column] = _typed(value, self._types(policy, name, column))
                if fields:
                    points.append(Point(name, dict(tags), fields, int(row[0])))
            if limit and points:
                break
        return points

    def _types(self, policy: str, measurement: str, column: str) -> set[str] | None:
        """The stored types of a field: ``SHOW FIELD KEYS`` once, and again (every measurement
        at once) for a field it did not know, written since (by another writer)."""
        known = self.types.get(policy, {}).get(measurement, {})
        if column in known or (policy, measurement, column) in self.unknown:
            return known.get(column)
        every: dict[str, dict[str, set[str]]] = {}
        statement = f"SHOW FIELD KEYS FROM {_sources(policy, MEASUREMENTS)}"
        for series in self.query.series(statement):
            mine = every.setdefault(series.get("name", ""), {})
            for field_key, field_type in series.get("values") or []:
                mine.setdefault(field_key, set()).add(field_type)
        self.types[policy] = every
        found = every.get(measurement, {}).get(column)
        if found is None:
            self.unknown.add((policy, measurement, column))
        return found

    def _write(self, job: JobContext, policy: str, points: list[Point]) -> int:
        stored = migrated_points(points, job)
        lines, problems = points_to_lines(stored)
        if problems:
            raise MigrationError(f"cannot encode its points: {problems[0]}")
        settings = self.settings
        writer = InfluxV1Writer(
            settings.v1_url or "",
            settings.v1_database or "",
            policy,
            settings.v1_username,
            settings.v1_password,
        )
        for batch in batches(lines, settings.batch_size):
            result = deliver(writer, batch, self.deadline, settings.request_timeout)
            if result.unavailable_reason is not None:
                raise UnavailableError(result.unavailable_reason)
            if result.rejected:
                raise MigrationError(
                    f"{len(result.rejected)} line(s) rejected, first: {result.rejected[0][1]}"
                )
        return len(lines)

    def drop(self, job_ids: Sequence[str], measurements: set[str]) -> None:
        """The old series of these jobs, whose new points InfluxDB acknowledged, in one
        statement (one DROP SERIES costs about as much for 50 jobs as for one)."""
        started = time.monotonic()
        statement = (
            f"DROP SERIES FROM {_sources(None, sorted(measurements))} "
            f"WHERE {self._condition(job_ids)}"
        )
        for _ in self.query.results(statement):
            pass
        log.debug("migrate: dropped %d job(s) in %.3fs", len(job_ids), time.monotonic() - started)


def migrated_points(points: list[Point], job: JobContext) -> list[Point]:
    """One job's points as an older hook wrote them, as this hook writes them: the stored
    layout (layout.py) and the job's ``io_score`` in its ``app_run`` point (app.py)."""
    return stored_points(with_io_score(points), job)


def _sources(policy: str | None, measurements: Sequence[str]) -> str:
    prefix = f"{quote_identifier(policy)}." if policy else ""
    return ", ".join(prefix + quote_identifier(m) for m in measurements if m != INDEX)


def _typed(value: FieldValue, types: set[str] | None) -> FieldValue:
    """A JSON value (a field's: a scalar) as the field it was written as: InfluxDB's JSON
    gives a float field's 2.0 as ``2``; a field with several types (one per shard) keeps its
    JSON type."""
    if isinstance(value, bool | str) or not types:
        return value
    if len(types) == 1:
        cast = _CAST.get(next(iter(types)))
        if cast is not None and cast is not bool and cast is not str:
            return cast(value)
    return value


def _id_order(job_id: str) -> tuple[int, int, str]:
    if job_id.isascii() and job_id.isdigit():
        return (0, int(job_id), "")
    return (1, 0, job_id)


def run_migration(
    settings: WriterSettings,
    cluster: str | None,
    deadline: Deadline,
    progress_every: int = PROGRESS_EVERY,
    jobs_per_drop: int = JOBS_PER_DROP,
) -> MigrationReport:
    """Migrate every job with old-layout series; progress on the log."""
    started = time.monotonic()
    report = MigrationReport()
    migration = Migration(settings, cluster, deadline)
    try:
        jobs = migration.jobs()
    except (MigrationError, UnavailableError) as exc:
        report.stopped = str(exc)
        report.seconds = time.monotonic() - started
        return report
    report.jobs = len(jobs)
    pending = _Pending()
    for done, job in enumerate(jobs, 1):
        if deadline.expired():
            report.stopped = "time limit reached"
            break
        try:
            read, written, measurements = migration.migrate(job)
        except MigrationError as exc:
            report.failed.append((job, str(exc)))
        except UnavailableError as exc:
            late = deadline.expired() and "time limit" not in str(exc)
            report.stopped = f"{'time limit reached: ' if late else ''}job {job}: {exc}"
            break
        else:
            pending.add(job, read, written, measurements)
        if len(pending.jobs) >= max(1, jobs_per_drop):
            if not pending.drop(migration, report):
                break
        if done % max(1, progress_every) == 0 and done < len(jobs):
            elapsed = time.monotonic() - started
            log.info(
                "migrate: %d/%d jobs (%d failed), %.1f jobs/s",
                done,
                len(jobs),
                len(report.failed),
                done / elapsed if elapsed > 0 else 0.0,
            )
    if pending.jobs:  # also after a stop: they are written (a failed drop only costs a rerun)
        migration.query.deadline = Deadline(settings.request_timeout)
        pending.drop(migration, report)
    report.seconds = time.monotonic() - started
    return report


@dataclass
class _Pending:
    """Jobs whose new points are in, waiting for the DROP SERIES of their old series."""

    jobs: list[str] = field(default_factory=list)
    read: int = 0
    written: int = 0
    measurements: set[str] = field(default_factory=set)

    def add(self, job: str, read: int, written: int, measurements: set[str]) -> None:
        self.jobs.append(job)
        self.read += read
        self.written += written
        self.measurements |= measurements

    def drop(self, migration: Migration, report: MigrationReport) -> bool:
        """Drop; False when the server went away (the run stops; a rerun migrates them)."""
        try:
            migration.drop(self.jobs, self.measurements)
        except MigrationError as exc:
            report.failed.extend((job, f"DROP SERIES failed: {exc}") for job in self.jobs)
        except UnavailableError as exc:
            report.stopped = report.stopped or f"DROP SERIES: {exc}"
            return False
        else:
            report.migrated += len(self.jobs)
            report.points_read += self.read
            report.points_written += self.written
        finally:
            self.jobs, self.read, self.written, self.measurements = [], 0, 0, set()
        return True
