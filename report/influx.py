"""Read a job's post-job points back from InfluxDB with InfluxQL.

InfluxDB 1.x: ``/query`` with database and retention policy, basic auth from
INFLUX_USERNAME/INFLUX_PASSWORD. InfluxDB 2.x/3.x: the same InfluxQL through their 1.x
compatibility ``/query`` endpoint (bucket as database, ``Authorization: Token``; 2.x needs the
bucket's DBRP mapping, which it creates for new buckets), so one query path serves both APIs.
The result is plain rows: ``{measurement: [{"time": ns, tag: value, field: value, ...}]}``.
"""

from __future__ import annotations

import base64
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

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

Rows = dict[str, list[dict]]


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


def quote_literal(value: str) -> str:
    """An InfluxQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_queries(job_id: str, cluster: str | None, rp: str | None) -> str:
    where = f"jobid = {quote_literal(job_id)}"
    if cluster:
        where += f" AND cluster = {quote_literal(cluster)}"
    prefix = f"{quote_identifier(rp)}." if rp else ""
    return ";".join(f"SELECT * FROM {prefix}{m} WHERE {where}" for m in MEASUREMENTS)


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


def read_job_rows(settings: InfluxSettings, job_id: str, cluster: str | None = None) -> Rows:
    """Every post-job point of the job, by measurement (empty lists when none)."""
    query = job_queries(job_id, cluster, settings.retention_policy if settings.v1_url else None)
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
