"""The job's diagnosis as points (measurement ``job_diagnosis``), so operations staff can list
finished jobs by I/O score without running the report and after the logs are gone.

One code path with hpcmon-report: the Darshan points the hook just made for the logs are read
back as the report reads the database's rows (``report.records``) and the report's own rules
(``report.insights``) judge them, so the points say what ``hpcmon-report`` says, from the
database or with ``--darshan LOG``. Neither imports matplotlib: this runs in a
post-job-only install.

Series per job: one with ``insight=job`` (the score) plus one per high/warn insight (at most
one per Darshan rule); no per-file or per-rank tag. Every number is a float (InfluxDB keeps
one type per field name, and the rules' evidence mixes ints and floats).
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcmon.common.timeutil import seconds_to_ns
from hpcmon.post_job.app import DIAGNOSIS, DIAGNOSIS_JOB
from hpcmon.post_job.darshan.model import EARLIEST_START, DarshanLog
from hpcmon.post_job.darshan.points import HEATMAP_BIN_MEASUREMENT
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point
from hpcmon.report.insights import HIGH, WARN, Insight, diagnose
from hpcmon.report.model import JobData
from hpcmon.report.score import insight_score, job_score

MEASUREMENT = DIAGNOSIS
JOB_TAG = DIAGNOSIS_JOB  # the ``insight`` tag of the per-job point; never a rule id
TOP_INSIGHTS = 3  # insights named in the job point's ``top_insights``
_RESERVED = {"level", "score", "title", "drishti"}  # evidence never overrides these fields


def diagnosis_points(
    logs: Sequence[DarshanLog], log_points: Sequence[Point], job: JobContext
) -> list[Point]:
    """The job point and one point per high/warn insight, from the Darshan points of
    ``logs`` (not computed twice); [] without any log."""
    # here, not at the top: report.records reads the record layout of this very package
    from hpcmon.report.records import darshan_from_rows, rows_from_points

    if not logs:
        return []
    # the heatmap bins (one point per bin) are read only by rules that also need Prometheus
    # data, which the hook never has: not read back (they cost most of a small log's rows)
    data = darshan_from_rows(
        rows_from_points(p for p in log_points if p.measurement != HEATMAP_BIN_MEASUREMENT)
    )
    if data is None:
        return []
    insights, _ = diagnose(JobData(job.job_id, job.cluster or "", darshan=data))
    scored = [i for i in insights if i.level in (HIGH, WARN)]
    # most severe first: by score, then the rules' own order (diagnose's order is stable)
    ranked = sorted(scored, key=lambda i: -insight_score(i))
    time_ns = seconds_to_ns(_start(logs))
    tags = job.base_tags()
    fields: dict[str, FieldValue] = {
        "score": job_score(scored),
        "level": ranked[0].level if ranked else "none",
        "high": float(sum(i.level == HIGH for i in scored)),
        "warn": float(sum(i.level == WARN for i in scored)),
        "top_insights": ", ".join(i.id for i in ranked[:TOP_INSIGHTS]),
        "exe": data.exe,
        "nprocs": float(data.nprocs),
        "runtime": float(data.runtime),
        "bytes_read": float(data.total("bytes_read")),
        "bytes_written": float(data.total("bytes_written")),
        "logs": float(data.logs),
    }
    points = [Point(DIAGNOSIS, {**tags, "insight": DIAGNOSIS_JOB}, fields, time_ns)]
    for insight in ranked:
        points.append(Point(DIAGNOSIS, {**tags, "insight": insight.id}, _fields(insight), time_ns))
    return points


def _start(logs: Sequence[DarshanLog]) -> int:
    """The job's first start: a damaged log's start of 0 (or before Darshan existed) must not
    move the job's diagnosis to 1970 when its other logs know better."""
    starts = [int(log.job.start_time) for log in logs]
    plausible = [start for start in starts if start >= EARLIEST_START]
    return min(plausible or starts)


def _fields(insight: Insight) -> dict[str, FieldValue]:
    fields: dict[str, FieldValue] = {
        name: float(value)
        for name, value in insight.evidence.items()
        if isinstance(value, int | float) and name not in _RESERVED
    }
    fields.update(level=insight.level, score=insight_score(insight), title=insight.title)
    if insight.drishti:
        fields["drishti"] = insight.drishti
    return fields
