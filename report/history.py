"""The job against the earlier runs of the same application (the hook's ``app_run`` points).

Three small InfluxQL reads, each on tags the index answers directly: the job's own
``app_run`` point (its app, user and start), the newest ``--history.runs`` earlier points of
that app (and user, with scope ``user``), and the I/O score of those jobs from
``job_diagnosis`` when it exists. A figure is flagged when this run is at least
``REGRESSION_RATIO`` times, or at most 1/``REGRESSION_RATIO`` of, the earlier runs' median,
with at least ``MIN_EARLIER_RUNS`` earlier values; a median of 0 flags any non-zero value.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from hpcmon.common.fields import finite_field
from hpcmon.report.influx import (
    InfluxReadError,
    InfluxSettings,
    Rows,
    query_rows,
    quote_identifier,
    quote_literal,
)

APP_RUN = "app_run"  # written by hpcmon.post_job.app
DIAGNOSIS = "job_diagnosis"  # written by the hook's Darshan source: score per job and insight
DIAGNOSIS_JOB = "job"  # its ``insight`` tag on the per-job point
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
        "io_score": None,
        "energy_kwh": None if energy is None else energy / JOULES_PER_KWH,
    }
    start = finite_field(row, "start_time")
    if start is None:
        start = (finite_field(row, "time") or 0.0) / 1e9
    return AppRun(str(row.get("jobid", "")), start, figures)


def _where(**tags: str | None) -> str:
    return " AND ".join(
        f"{quote_identifier(k)} = {quote_literal(v)}" for k, v in tags.items() if v is not None
    )


def _from(settings: InfluxSettings, measurement: str) -> str:
    rp = settings.retention_policy if settings.v1_url else None
    return f"{quote_identifier(rp)}.{measurement}" if rp else measurement


def read_history(
    settings: InfluxSettings,
    job_id: str,
    cluster: str | None,
    runs: int = DEFAULT_RUNS,
    scope: str = "user",
) -> tuple[AppHistory | None, str | None]:
    """(the history, None) or (None, why there is none). InfluxReadError when unreadable."""
    own = query_rows(
        settings,
        f"SELECT * FROM {_from(settings, APP_RUN)} WHERE {_where(jobid=job_id, cluster=cluster)}",
    ).get(APP_RUN, [])
    own = [row for row in own if row.get("app")]
    if not own:
        return (
            None,
            f"no {APP_RUN} point with an app tag for job {job_id}"
            " (written by a hook older than the app tag, or no Darshan/GEOPM data)",
        )
    row = own[-1]
    app, user = str(row["app"]), row.get("user")
    current = run_from_row(row)
    where = _where(app=app, cluster=cluster)
    if scope == "user":
        where += f" AND {_where(user=user or '')}"  # '' = points without a user tag
    where += f" AND jobid != {quote_literal(job_id)} AND time < {int(row['time'])}"
    earlier = query_rows(
        settings,
        f"SELECT * FROM {_from(settings, APP_RUN)} WHERE {where} ORDER BY time DESC LIMIT {runs}",
    ).get(APP_RUN, [])
    history = AppHistory(app, user, scope, current, [run_from_row(r) for r in reversed(earlier)])
    _add_scores(settings, cluster, [history.current, *history.runs])
    return history, None


def _add_scores(settings: InfluxSettings, cluster: str | None, runs: list[AppRun]) -> None:
    """The I/O score of each run from job_diagnosis (left null where there is none)."""
    jobs = " OR ".join(f"jobid = {quote_literal(r.job_id)}" for r in runs)
    # the job's own point (insight=job); the others score one insight each
    where = f"({jobs}) AND {_where(insight=DIAGNOSIS_JOB, cluster=cluster)}"
    rows: Rows = query_rows(
        settings,
        f"SELECT last(score) AS score FROM {_from(settings, DIAGNOSIS)} "
        f"WHERE {where} GROUP BY jobid",
    )
    scores = {str(r.get("jobid")): finite_field(r, "score") for r in rows.get(DIAGNOSIS, [])}
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
