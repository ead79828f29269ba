"""Read a job's post-job points back from InfluxDB with InfluxQL.

InfluxDB 1.x: ``/query`` with database and retention policy, basic auth from
INFLUX_USERNAME/INFLUX_PASSWORD. InfluxDB 2.x/3.x: the same InfluxQL through their 1.x
compatibility ``/query`` endpoint (bucket as database, ``Authorization: Token``; 2.x needs the
bucket's DBRP mapping, which it creates for new buckets), so one query path serves both APIs.
The result is plain rows: ``{measurement: [{"time": ns, tag: value, field: value, ...}]}``.

A job is found through its ``job_index`` points (post_job/layout.py), the one series a job
adds: their ``first`` and ``last`` stamps bound the job's points. The job's data is then read
with ``jobid`` (a field) and that time window, which touches only the job's bounded series
for that time; without a time bound the same filter would scan every series over all time.
A job without index points has no data here.
"""

from __future__ import annotations

import base64
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hpcmon.common.influxql import quote_identifier, quote_literal
from hpcmon.post_job.layout import INDEX, index_bucket
from hpcmon.report.http import ReadError, read_json

MEASUREMENTS = (
    "slurm_job",
    "darshan_job",
    "darshan_module",
    "darshan_record",
    "darshan_heatmap",
    "darshan_heatmap_bin",
    "darshan_rank",
    "recorder_function",
    "recorder_file",
    "viztracer_function",
    "viztracer_summary",
    "geopm_totals",
)

APP_RUN = "app_run"  # read with the job's data: the history's own run (report/history.py)
Rows = dict[str, list[dict]]
Window = tuple[int, int]  # the first and last stamp (ns) of a job's points


class InfluxReadError(Exception):
    """The server could not be read (down, auth, unknown database, bad answer)."""


@dataclass
class InfluxSettings:
    """Where the hook wrote: v1 (url + database [+ rp]) or v2 (url + org + bucket + token)."""

    v1_url: str | None = None
    database: str | None = None
    retention_policy: str | None = None
    v2_url: str | None = None
    org: str | None = None
    bucket: str | None = None
    token_file: str | None = None
    timeout: float = 30.0

    @property
    def configured(self) -> bool:
        return bool(self.v1_url or self.v2_url)

    def describe(self) -> str:
        if self.v1_url:
            return f"InfluxDB {self.v1_url} database {self.database}"
        return f"InfluxDB {self.v2_url} bucket {self.bucket}"


def job_where(job_id: str, cluster: str | None, tags: dict[str, str] | None = None) -> str:
    """``jobid`` (a field), ``cluster``, and the job's ``tags`` from its index (user and app:
    '' selects the series without that tag), which narrow the scan to the job's own series
    of user and app instead of every series in the window's shards."""
    where = f"{quote_identifier('jobid')} = {quote_literal(job_id)}"
    if cluster:
        where += f" AND {quote_identifier('cluster')} = {quote_literal(cluster)}"
    for key, value in sorted((tags or {}).items()):
        where += f" AND {quote_identifier(key)} = {quote_literal(value)}"
    return where


def source(measurement: str, rp: str | None) -> str:
    """``measurement`` in retention policy ``rp`` (the database's default when None)."""
    name = quote_identifier(measurement)
    return f"{quote_identifier(rp)}.{name}" if rp else name


def index_query(job_id: str, cluster: str | None, rp: str | None) -> str:
    """The job's ``job_index`` points, in the job's bucket (a tag: one series of the index's
    thousand a cluster and shard)."""
    bucket = f"{quote_identifier('bucket')} = {quote_literal(index_bucket(job_id))}"
    return f"SELECT * FROM {source(INDEX, rp)} WHERE {bucket} AND {job_where(job_id, cluster)}"


def job_queries(
    job_id: str,
    cluster: str | None,
    rp: str | None,
    window: Window,
    measurements: frozenset[str] | None = None,
    tags: dict[str, str] | None = None,
) -> str:
    """One statement per measurement (those of ``measurements`` alone when given): the
    job's points within its window and series."""
    where = f"{job_where(job_id, cluster, tags)} AND {time_bounds(window)}"
    wanted = [m for m in (*MEASUREMENTS, APP_RUN) if measurements is None or m in measurements]
    return ";".join(f"SELECT * FROM {source(m, rp)} WHERE {where}" for m in wanted)


def time_bounds(window: Window) -> str:
    return f"time >= {int(window[0])} AND time <= {int(window[1])}"


@dataclass(frozen=True)
class JobIndex:
    """What a job's ``job_index`` points say: where its points lie, in which measurements."""

    window: Window
    measurements: frozenset[str] | None  # None: not said by every index point (read all)
    tags: dict[str, str] | None = None  # user and app of the job's points ('' = none)


def index_of(index_rows: list[dict]) -> JobIndex | None:
    """[min first, max last] of a job's index points (one per hook run) and the union of
    their measurements; None without any (rows whose stamps are no integers are damaged,
    and left out)."""
    firsts = [t for r in index_rows if (t := _stamp(r.get("first"))) is not None]
    lasts = [t for r in index_rows if (t := _stamp(r.get("last"))) is not None]
    if not firsts or not lasts or min(firsts) > max(lasts):
        return None
    named = [text for r in index_rows if isinstance(text := r.get("measurements"), str)]
    measurements = None
    if len(named) == len(index_rows):  # every index point said them
        measurements = frozenset(m for text in named for m in text.split(",") if m)
    tags = {}
    for key in ("user", "app"):
        values = {r.get(key) for r in index_rows}
        if len(values) != 1 or not isinstance(next(iter(values)), str | None):
            return JobIndex((min(firsts), max(lasts)), measurements)  # they disagree: all
        tags[key] = next(iter(values)) or ""
    return JobIndex((min(firsts), max(lasts)), measurements, tags)


def _stamp(value) -> int | None:
    """An index stamp (int ns; a float only when whole), else None."""
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


def _policy(settings: InfluxSettings) -> str | None:
    return settings.retention_policy if settings.v1_url else None


def _request(settings: InfluxSettings, query: str) -> urllib.request.Request:
    if settings.v1_url:
        params = {"db": settings.database or "", "q": query, "epoch": "ns"}
        if settings.retention_policy:
            params["rp"] = settings.retention_policy
        request = urllib.request.Request(
            settings.v1_url.rstrip("/") + "/query",
            data=urllib.parse.urlencode(params).encode(),
            method="POST",
        )
        user, password = os.environ.get("INFLUX_USERNAME"), os.environ.get("INFLUX_PASSWORD")
        if user:
            pair = f"{user}:{password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        return request
    params = {"db": settings.bucket or "", "q": query, "epoch": "ns"}
    if settings.org:
        params["org"] = settings.org
    request = urllib.request.Request(
        (settings.v2_url or "").rstrip("/") + "/query",
        data=urllib.parse.urlencode(params).encode(),
        method="POST",
    )
    token = _token(settings)
    if token:
        request.add_header("Authorization", "Token " + token)
    return request


def _token(settings: InfluxSettings) -> str | None:
    if settings.token_file:
        try:
            return Path(settings.token_file).read_text().strip()
        except OSError as exc:
            raise InfluxReadError(
                f"{settings.token_file}: cannot read token: {exc.strerror or exc}"
            ) from exc
    return os.environ.get("INFLUX_TOKEN")


def find_job(settings: InfluxSettings, job_id: str, cluster: str | None = None) -> JobIndex | None:
    """The job's ``job_index`` points; None: no such job."""
    rows = query_rows(settings, index_query(job_id, cluster, _policy(settings)))
    return index_of(rows.get(INDEX, []))


def read_job_rows(
    settings: InfluxSettings,
    job_id: str,
    cluster: str | None = None,
    index: JobIndex | None = None,
) -> Rows:
    """Every post-job point of the job, by measurement (empty lists when none, as for a job
    without index points), plus its ``app_run`` points. ``index``: the job's, when known
    (``find_job``); else it is read first."""
    if index is None:
        index = find_job(settings, job_id, cluster)
    if index is None:
        return {m: [] for m in MEASUREMENTS}
    query = job_queries(
        job_id, cluster, _policy(settings), index.window, index.measurements, index.tags
    )
    if not query:  # the job's points are in measurements the report does not read
        return {m: [] for m in MEASUREMENTS}
    return query_rows(settings, query)


def query_rows(settings: InfluxSettings, query: str) -> Rows:
    """The rows of one InfluxQL request (statements separated by ';'), by measurement."""
    request = _request(settings, query)
    try:
        body = read_json(request, settings.timeout, settings.describe())
    except ReadError as exc:
        raise InfluxReadError(str(exc)) from exc
    return parse_results(body, settings)


def parse_results(body: dict, settings: InfluxSettings) -> Rows:
    try:
        return _parse_results(body, settings)
    except (AttributeError, TypeError, ValueError) as exc:
        raise InfluxReadError(f"{settings.describe()}: unexpected answer ({exc})") from exc


def _parse_results(body: dict, settings: InfluxSettings) -> Rows:
    rows: Rows = {m: [] for m in MEASUREMENTS}
    for result in body.get("results", []):
        if "error" in result:
            raise InfluxReadError(f"{settings.describe()}: {result['error']}")
        for series in result.get("series", []):
            name = str(series.get("name", ""))
            columns = series.get("columns", [])
            target = rows.setdefault(name, [])
            tags = series.get("tags") or {}  # GROUP BY tags
            for values in series.get("values", []):
                row = {c: v for c, v in zip(columns, values, strict=False) if v is not None}
                target.append({**tags, **row})
    return rows
