"""Application identity of a job: the ``app`` and ``user`` tags on every point, and one
``app_run`` point per job with the figures its later runs are compared on (hpcmon-report's
history, the job dashboard's application row).

``app`` is ``--app`` / the epilog's ``app:`` when given, else the base name of the Darshan
executable (Darshan's ``exe`` field: the first word of the command line, path removed). A job
whose logs come from several executables is named after the one that moved the most bytes.
Both tags are the same on every point of a job, and every point already carries ``jobid``, so
they add no InfluxDB series; the index holds one more tag value per application and per user.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from hpcmon.common.config import ConfigError
from hpcmon.common.fields import finite_field
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point
from hpcmon.post_job.slurm import SlurmJob

log = logging.getLogger("hpcmon.post_job")

APP_RUN = "app_run"
# The job's diagnosis (post_job/darshan/diagnosis.py, which takes these names from here: that
# package needs the post-job extra, and this module is imported by every role's flush)
DIAGNOSIS = "job_diagnosis"
DIAGNOSIS_JOB = "job"  # the ``insight`` tag of its per-job point; never a rule id
MAX_APP_LENGTH = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters that end or escape an InfluxQL string or regex, or start a Grafana variable: the
# dashboards put $app into '...' (a Slurm job name is the user's own text).
UNSAFE = "'\"`\\/$"
_UNSAFE = re.compile("[" + re.escape(UNSAFE) + "]")
_ENERGY_FIELDS = ("package_energy_joules", "dram_energy_joules", "gpu_energy_joules")


def app_name_problem(name: str) -> str | None:
    """Why a name cannot be an ``app`` tag (None when it can)."""
    if not name.strip():
        return "the application name is empty"
    if len(name) > MAX_APP_LENGTH:
        return f"the application name is longer than {MAX_APP_LENGTH} characters"
    if _CONTROL.search(name):
        return "the application name holds a control character"
    if _UNSAFE.search(name):
        return "the application name holds one of ' \" ` \\ / $ (they break dashboard queries)"
    return None


def safe_app_name(name: str) -> str:
    """An executable's base name with control and unsafe characters replaced by ``_``: the
    executable is not the user's choice of name, so it is kept, made harmless."""
    return _UNSAFE.sub("_", _CONTROL.sub("_", name))


def app_from_command_line(command_line: str) -> str:
    """``/opt/app/bin//mpi-io-test -f x`` -> ``mpi-io-test``."""
    first = command_line.strip().split(" ", 1)[0] if command_line.strip() else ""
    return first.rstrip("/").rsplit("/", 1)[-1]


def darshan_app(points: Iterable[Point]) -> str | None:
    """The executable of the job's Darshan logs (the one that moved the most bytes)."""
    moved: dict[str, float] = defaultdict(float)
    for point in points:
        if point.measurement != "darshan_job":
            continue
        exe = point.fields.get("exe")
        name = safe_app_name(app_from_command_line(exe)) if isinstance(exe, str) else ""
        if name and not app_name_problem(name):
            moved[name] += sum(
                finite_field(point.fields, f) or 0.0
                for f in ("total_bytes_read", "total_bytes_written")
            )
    if not moved:
        return None
    return min(moved, key=lambda name: (-moved[name], name))


def run_point(points: Sequence[Point], tags: dict[str, str]) -> Point | None:
    """The job's ``app_run`` point: Darshan totals summed over its logs, the POSIX metadata
    share of I/O time over the records the hook kept, GEOPM application energy; stamped at
    the earliest log start (else the GEOPM report's). None when neither source gave a time."""
    jobs = [p for p in points if p.measurement == "darshan_job" and p.time_ns is not None]
    energy = [
        p
        for p in points
        if p.measurement == "geopm_totals"
        and p.tags.get("scope") == "application"
        and p.time_ns is not None
    ]
    stamped = jobs or energy
    if not stamped:
        return None
    fields: dict[str, int | float | str] = {"job_id": tags["jobid"]}  # last() of a tag: none
    if jobs:
        fields["logs"] = len(jobs)
        runtimes = [finite_field(p.fields, "runtime") for p in jobs]
        fields["runtime"] = max((r for r in runtimes if r is not None), default=0.0)
        for total, name in (
            ("total_bytes_read", "bytes_read"),
            ("total_bytes_written", "bytes_written"),
            ("total_reads", "reads"),
            ("total_writes", "writes"),
        ):
            values = [finite_field(p.fields, total) for p in jobs]
            if any(v is not None for v in values):
                fields[name] = sum(v for v in values if v is not None)
        share = _metadata_share(points)
        if share is not None:
            fields["metadata_time_share"] = share
    if energy:
        fields["energy_joules"] = sum(
            finite_field(p.fields, f) or 0.0 for p in energy for f in _ENERGY_FIELDS
        )
        if not jobs:
            runtimes = [finite_field(p.fields, "runtime_seconds") for p in energy]
            fields["runtime"] = max((r for r in runtimes if r is not None), default=0.0)
    score = io_score(points)
    if score is not None:
        fields["io_score"] = score
    start = min(p.time_ns for p in stamped if p.time_ns is not None)
    fields["start_time"] = start / 1e9
    return Point(APP_RUN, dict(tags), fields, start)


def io_score(points: Iterable[Point]) -> float | None:
    """The job's I/O score from its diagnosis point (``insight=job``), kept in ``app_run`` too
    so the history reads a run's figures from one row instead of finding each run's
    diagnosis through the job index (report/history.py)."""
    for point in points:
        if point.measurement == DIAGNOSIS and point.tags.get("insight") == DIAGNOSIS_JOB:
            return finite_field(point.fields, "score")
    return None


def with_io_score(points: list[Point]) -> list[Point]:
    """``points`` (one job's), their ``app_run`` points given the job's ``io_score`` where they
    lack it: the migration of points an older hook wrote (post_job/migrate.py)."""
    score = io_score(points)
    if score is not None:
        for point in points:
            if point.measurement == APP_RUN and "io_score" not in point.fields:
                point.fields["io_score"] = score
    return points


def _metadata_share(points: Iterable[Point]) -> float | None:
    """POSIX metadata time / (metadata + read + write time), all records of all the job's logs
    (the module totals of the job's record): the report's summary ``metadata_time_share``."""
    times = {"meta": 0.0, "read": 0.0, "write": 0.0}
    for point in points:
        if point.measurement != "darshan_module" or point.tags.get("module") != "POSIX":
            continue
        for kind in times:
            times[kind] += finite_field(point.fields, f"posix_f_{kind}_time") or 0.0
    total = sum(times.values())
    return times["meta"] / total if total > 0 else None


def identify(points: list[Point], job: JobContext) -> list[Point]:
    """The job's points with ``app`` (when known) and ``user`` (when known) tags, plus the
    ``app_run`` point when there is an app."""
    app = job.app or darshan_app(points)
    extra = {key: value for key, value in (("app", app), ("user", job.user)) if value}
    if not extra:
        return points
    for point in points:
        point.tags.update(extra)
    if app is None or job.node:
        return points  # app_run sums the job: its first node's run alone writes it
    run = run_point(points, {**job.base_tags(), **extra})
    return points + [run] if run is not None else points


JOB_NAME = "{job_name}"


def check_app_template(text: str, where: str) -> str:
    """The epilog's ``app:``: a name, where ``{job_name}`` stands for SLURM_JOB_NAME."""
    rest = text.replace(JOB_NAME, "")
    if "{" in rest or "}" in rest:
        raise ConfigError(f"{where}: the only placeholder is {JOB_NAME}")
    problem = app_name_problem(text.replace(JOB_NAME, "x"))  # the job name is checked per job
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return text


def epilog_app(template: str | None, job: SlurmJob) -> str | None:
    """The app name for an epilog run: None (the Darshan executable) when not configured, or
    when the Slurm job name it needs is missing or unusable (one warning line)."""
    if template is None:
        return None
    if JOB_NAME in template and not job.job_name:
        log.warning("job=%s app: SLURM_JOB_NAME is not set; app from Darshan", job.job_id)
        return None
    name = template.replace(JOB_NAME, job.job_name or "")
    problem = app_name_problem(name)
    if problem:
        log.warning("job=%s app: %s; app from Darshan", job.job_id, problem)
        return None
    return name
