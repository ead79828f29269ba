"""The job against the earlier runs of the same application (the hook's ``app_run`` points).

Small InfluxQL reads, each on tags the index answers directly or within a job's time window
(post_job/layout.py: ``jobid`` is a field, a job is found through ``job_index``): the job's
own ``app_run`` point (its app, user and start; read with the job's data, within its window)
and the newest ``--history.runs`` earlier points of that app (and user, with scope ``user``:
one series). A run's I/O score is its ``app_run`` point's ``io_score`` (post_job/app.py);
for a Darshan run written before the hook kept it there, it is read from ``job_diagnosis``
within the run's window from ``job_index`` (two more requests). A figure is flagged when this
run is at least ``REGRESSION_RATIO`` times, or at most 1/``REGRESSION_RATIO`` of, the earlier
runs' median, with at least ``MIN_EARLIER_RUNS`` earlier values; a median of 0 flags any
non-zero value.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from hpcmon.common.fields import finite_field
from hpcmon.post_job.app import DIAGNOSIS, DIAGNOSIS_JOB
from hpcmon.post_job.layout import INDEX, NS_PER_SECOND
from hpcmon.report.influx import (
    APP_RUN,
    InfluxReadError,
    InfluxSettings,
    JobIndex,
    find_job,
    index_of,
    index_query,
    job_where,
    query_rows,
    quote_identifier,
    quote_literal,
    source,
    time_bounds,
)

SCOPES = ("user", "all")
DEFAULT_RUNS = 10
MAX_RUNS = 1000
REGRESSION_RATIO = 2.0
MIN_EARLIER_RUNS = 2
JOULES_PER_KWH = 3.6e6
# figure -> how it is read from an app_run row (score comes from job_diagnosis)
FIGURES = (
    "runtime_seconds",
    "bytes_read",
    "bytes_written",
    "operations",
    "metadata_time_share",
    "io_score",
    "energy_kwh",
)


@dataclass
class AppRun:
    job_id: str
    start: float  # epoch seconds (earliest Darshan log start, else the GEOPM report's)
    figures: dict[str, float | None] = field(default_factory=dict)
    score_elsewhere: bool = False  # a Darshan run whose app_run has no io_score (older hook)


@dataclass
class AppHistory:
    app: str
    user: str | None
    scope: str
    current: AppRun
    runs: list[AppRun]  # oldest first


def run_from_row(row: dict) -> AppRun:
    reads, writes = finite_field(row, "reads"), finite_field(row, "writes")
    energy = finite_field(row, "energy_joules")
    figures = {
        "runtime_seconds": finite_field(row, "runtime"),
        "bytes_read": finite_field(row, "bytes_read"),
        "bytes_written": finite_field(row, "bytes_written"),
        "operations": None if reads is None and writes is None else (reads or 0) + (writes or 0),
        "metadata_time_share": finite_field(row, "metadata_time_share"),
        "io_score": finite_field(row, "io_score"),
        "energy_kwh": None if energy is None else energy / JOULES_PER_KWH,
    }
    start = finite_field(row, "start_time")
    if start is None:
        start = (finite_field(row, "time") or 0.0) / 1e9
    elsewhere = "io_score" not in row and "logs" in row
    return AppRun(str(row.get("jobid", "")), start, figures, elsewhere)


def _where(**tags: str | None) -> str:
    return " AND ".join(
        f"{quote_identifier(k)} = {quote_literal(v)}" for k, v in tags.items() if v is not None
    )


def _from(settings: InfluxSettings, measurement: str) -> str:
    return source(measurement, settings.retention_policy if settings.v1_url else None)


def _stamp(row: dict) -> int:
    time = row.get("time")
    return time if type(time) is int else -1


def read_history(
    settings: InfluxSettings,
    job_id: str,
    cluster: str | None,
    runs: int = DEFAULT_RUNS,
    scope: str = "user",
    *,
    own: list[dict] | None = None,
) -> tuple[AppHistory | None, str | None]:
    """(the history, None) or (None, why there is none). InfluxReadError when unreadable.
    ``own``: the job's ``app_run`` rows when already read (with its data); else they are read
    within the job's window."""
    if own is None:
        own = _own_runs(settings, job_id, cluster)
    own = [row for row in own if row.get("app") and type(row.get("time")) is int]
    if not own:
        return (
            None,
            f"no {APP_RUN} point with an app tag for job {job_id}"
            " (written by a hook older than the app tag, or no Darshan/GEOPM data)",
        )
    row = max(own, key=_stamp)
    app, user = str(row["app"]), row.get("user")
    current = run_from_row(row)
    where = _where(app=app, cluster=cluster)
    if scope == "user":
        where += f" AND {_where(user=user or '')}"  # '' = points without a user tag
    # the app's (and user's) own series, newest first (jobid is a field there); runs that
    # started in an earlier second: a stamp's nanoseconds are the job's slot on the layout's
    # lattice, not its time, and runs of one second (array tasks) ran side by side
    second = int(row["time"]) // NS_PER_SECOND * NS_PER_SECOND
    where += f" AND jobid != {quote_literal(job_id)} AND time < {second}"
    earlier = query_rows(
        settings,
        f"SELECT * FROM {_from(settings, APP_RUN)} WHERE {where} ORDER BY time DESC LIMIT {runs}",
    ).get(APP_RUN, [])
    history = AppHistory(app, user, scope, current, [run_from_row(r) for r in reversed(earlier)])
    _add_scores(
        settings, cluster, [r for r in (history.current, *history.runs) if r.score_elsewhere]
    )
    return history, None


def _own_runs(settings: InfluxSettings, job_id: str, cluster: str | None) -> list[dict]:
    index = find_job(settings, job_id, cluster)
    if index is None:
        return []
    query = (
        f"SELECT * FROM {_from(settings, APP_RUN)} "
        f"WHERE {job_where(job_id, cluster, index.tags)} AND {time_bounds(index.window)}"
    )
    return query_rows(settings, query).get(APP_RUN, [])


def run_windows(
    settings: InfluxSettings, cluster: str | None, jobs: list[str]
) -> dict[str, JobIndex]:
    """job id -> its index (window, series), from the ``job_index`` points of those jobs:
    one statement a job, each in its bucket (one request). A single statement with the
    buckets and ids ORed is not narrowed to those buckets by InfluxDB 1.6: it reads every
    index series (bench_store.py: 115 ms for 10 jobs at 100,000 jobs)."""
    if not jobs:
        return {}
    policy = settings.retention_policy if settings.v1_url else None
    statements = ";".join(index_query(job, cluster, policy) for job in jobs)
    rows = query_rows(settings, statements)
    by_job: dict[str, list[dict]] = {}
    for index in rows.get(INDEX, []):
        by_job.setdefault(str(index.get("jobid")), []).append(index)
    windows: dict[str, JobIndex] = {}
    for job, found in by_job.items():
        index = index_of(found)
        if index is not None:
            windows[job] = index
    return windows


def _add_scores(settings: InfluxSettings, cluster: str | None, runs: list[AppRun]) -> None:
    """The I/O score of each run from job_diagnosis (left null where there is none): the
    job's own point (insight=job; the others score one insight each) within its window."""
    if not runs:
        return
    windows = run_windows(settings, cluster, sorted({r.job_id for r in runs if r.job_id}))
    statements = [
        f'SELECT "score", "jobid" FROM {_from(settings, DIAGNOSIS)} '
        f"WHERE {_where(insight=DIAGNOSIS_JOB)} AND {job_where(job, cluster, index.tags)} "
        f"AND {time_bounds(index.window)}"
        for job, index in sorted(windows.items())
    ]
    rows = query_rows(settings, ";".join(statements)).get(DIAGNOSIS, []) if statements else []
    newest: dict[str, dict] = {}
    for row in rows:
        job = str(row.get("jobid"))
        if "score" in row and (job not in newest or _stamp(row) >= _stamp(newest[job])):
            newest[job] = row
    scores = {job: finite_field(row, "score") for job, row in newest.items()}
    for run in runs:
        run.figures["io_score"] = scores.get(run.job_id)


def regressions(history: AppHistory) -> list[dict]:
    """Each figure of this run against the earlier runs' median (see the module's rule)."""
    out = []
    for name in FIGURES:
        current = history.current.figures.get(name)
        earlier = [v for r in history.runs if (v := r.figures.get(name)) is not None]
        median = statistics.median(earlier) if earlier else None
        ratio = None
        if current is not None and median is not None:
            ratio = current / median if median > 0 else (1.0 if current == 0 else None)
            ratio = ratio if ratio is not None and math.isfinite(ratio) else None
        flagged = (
            len(earlier) >= MIN_EARLIER_RUNS
            and current is not None
            and median is not None
            and (ratio is None or ratio >= REGRESSION_RATIO or ratio <= 1 / REGRESSION_RATIO)
        )
        out.append(
            {
                "figure": name,
                "current": current,
                "median": median,
                "ratio": ratio,
                "earlier_runs": len(earlier),
                "flagged": bool(flagged),
            }
        )
    return out


def _run_json(run: AppRun) -> dict:
    return {"job_id": run.job_id, "start": run.start, **run.figures}


def history_json(history: AppHistory | None) -> dict | None:
    if history is None:
        return None
    return {
        "app": history.app,
        "user": history.user,
        "scope": history.scope,
        "current": _run_json(history.current),
        "runs": [_run_json(r) for r in history.runs],
        "regressions": regressions(history),
    }


__all__ = ["AppHistory", "AppRun", "InfluxReadError", "history_json", "read_history"]
