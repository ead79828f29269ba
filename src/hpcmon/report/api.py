"""Build one job's report from its sources, and write it (the epilog's entry point).

``collect`` reads the sources (each may be missing: the report lists what it could not see),
``build`` turns the typed records into the documented JSON structure (SCHEMA_VERSION), and
``write_report`` does both and renders to a file within a deadline.
"""

from __future__ import annotations

import os
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hpcmon.common.fields import every_known
from hpcmon.dashboards.uids import JOB_UID  # the job dashboard's stable uid (plain constants)
from hpcmon.report.darshan_log import darshan_from_logs
from hpcmon.report.history import DEFAULT_RUNS, history_json, read_history
from hpcmon.report.influx import APP_RUN, InfluxReadError, InfluxSettings, read_job_rows
from hpcmon.report.insights import RULES, diagnose
from hpcmon.report.model import JobData
from hpcmon.report.prometheus import (
    DEFAULT_JOB_MATCHER,
    PrometheusClient,
    PrometheusReadError,
    integral,
    read_prometheus,
)
from hpcmon.report.records import (
    darshan_from_rows,
    functions_from_rows,
    geopm_from_rows,
    slurm_from_rows,
    traced_files_from_rows,
)
from hpcmon.report.slurm import slurm_json

SCHEMA_VERSION = 1
JOULES_PER_KWH = 3.6e6


@dataclass
class Sources:
    influx: InfluxSettings | None = None
    prometheus_url: str | None = None
    job_matcher: str = DEFAULT_JOB_MATCHER
    darshan_logs: tuple[Path, ...] = ()
    window: tuple[float, float] | None = None  # overrides the window the job's data give
    grafana_url: str | None = None
    grafana_dashboard: str = JOB_UID
    timeout: float = 30.0
    history_runs: int = DEFAULT_RUNS  # 0: no history section
    history_scope: str = "user"  # or "all": every user's runs of the app


def collect(job_id: str, cluster: str | None, sources: Sources) -> JobData:
    job = JobData(job_id, cluster or "")
    rows = None
    if sources.influx is not None and sources.influx.configured:
        try:
            rows = read_job_rows(sources.influx, job_id, cluster)
        except InfluxReadError as exc:
            job.missing.append(f"post-job points: {exc}")
            job.unreadable.append("InfluxDB")
    else:
        job.missing.append("post-job points: no InfluxDB given")
    if rows is not None:
        job.slurm = slurm_from_rows(rows)
        job.darshan = darshan_from_rows(rows)
        job.functions = functions_from_rows(rows)
        job.traced_files = traced_files_from_rows(rows)
        job.geopm = geopm_from_rows(rows)
        if job.slurm is None:
            job.missing.append(
                f"Slurm: no slurm_job point for job {job_id} (written by an older hook, "
                "or not run from Slurm's epilog)"
            )
        if job.darshan is None:
            job.missing.append(f"Darshan: no darshan_job point for job {job_id}")
        if not job.functions:
            job.missing.append("Recorder/VizTracer: no function points")
        if job.geopm is None:
            job.missing.append("GEOPM: no report points")
        if sources.history_runs > 0 and sources.influx is not None:
            _collect_history(job, cluster, sources.influx, sources, rows.get(APP_RUN, []))
    if sources.darshan_logs:
        from_logs, problems = darshan_from_logs(list(sources.darshan_logs), job_id, cluster)
        job.missing.extend(f"Darshan log: {p}" for p in problems)
        if from_logs is None and problems:
            job.unreadable.append("Darshan logs")
        if from_logs is not None:
            if job.darshan is not None and not from_logs.heatmaps:
                from_logs.heatmaps = job.darshan.heatmaps
            job.darshan = from_logs
    job.window = sources.window or _window(job)
    if sources.prometheus_url:
        if job.window is None:
            job.missing.append(
                "Prometheus: no job window (no Darshan, GEOPM or Slurm times; give --start/--end)"
            )
        else:
            client = PrometheusClient(sources.prometheus_url, sources.timeout)
            try:
                job.prometheus = read_prometheus(
                    client, job_id, job.window[0], job.window[1], sources.job_matcher
                )
            except PrometheusReadError as exc:
                job.missing.append(f"Lustre and power: {exc}")
                job.unreadable.append("Prometheus")
            else:
                if not job.prometheus.targets:
                    job.missing.append("Lustre: no jobstats series for the job in its window")
                if job.prometheus.power is None:
                    job.missing.append("power: no GEOPM power series for the job's nodes")
    else:
        job.missing.append("Lustre and power: no Prometheus given")
    return job


def has_data(job: JobData) -> bool:
    """Whether any source had something on the job (an empty Prometheus answer is nothing;
    Slurm's view alone is a report: the job ran, and left no I/O logs)."""
    prom = job.prometheus
    found_in_prometheus = prom is not None and bool(prom.targets or prom.power is not None)
    return bool(job.slurm or job.darshan or job.functions or job.geopm or found_in_prometheus)


def searched(job: JobData, sources: Sources) -> str:
    """Where the job was looked for, for the one line saying it was not found."""
    places = []
    if sources.influx is not None and sources.influx.configured:
        places.append(sources.influx.describe())
    if sources.prometheus_url and job.prometheus is not None:
        places.append(f"Prometheus {sources.prometheus_url}")
    if sources.darshan_logs:
        places.append(f"{len(sources.darshan_logs)} Darshan log(s)")
    if not places:
        return "no source (give --influx.v1-url, --influx.url, --prometheus.url or --darshan)"
    return " and ".join(places)


def _collect_history(
    job: JobData, cluster: str | None, influx: InfluxSettings, sources: Sources, own: list[dict]
) -> None:
    """``own``: the job's ``app_run`` rows, read with its data."""
    try:
        job.history, why = read_history(
            influx, job.job_id, cluster, sources.history_runs, sources.history_scope, own=own
        )
    except InfluxReadError as exc:
        job.missing.append(f"history: {exc}")
        return
    if why:
        job.missing.append(f"history: {why}")


def _window(job: JobData) -> tuple[float, float] | None:
    """The job's window for Prometheus: Slurm's start and end when the job has a Slurm record
    (the whole job: every step, not only the application Darshan or GEOPM followed, and the
    node's clock, not the one a log was stamped with), else Darshan's, else GEOPM's."""
    s = job.slurm
    if s is not None and s.start is not None and s.end is not None and s.end >= s.start:
        return s.start, max(s.end, s.start + 1.0)
    d = job.darshan
    if d is not None and d.start is not None and d.end is not None:
        return float(d.start), float(max(d.end, d.start + max(d.runtime, 1.0)))
    g = job.geopm
    if g is not None and g.start is not None and g.runtime > 0:
        return g.start, g.start + g.runtime
    return None


def _f(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def summary(job: JobData) -> dict:
    d = job.darshan
    out: dict = {
        "runtime_seconds": None,
        "ranks": None,
        "bytes_read": None,
        "bytes_written": None,
        "reads": None,
        "writes": None,
        "mean_read_size_bytes": None,
        "mean_write_size_bytes": None,
        "metadata_time_share": None,
        "energy_kwh": None,
        "energy_source": None,
        "joules_per_byte": None,
        "power_peak_watts": None,
        "power_mean_watts": None,
    }
    moved = 0.0
    if d is not None:
        reads, writes = d.total("reads"), d.total("writes")
        bytes_read, bytes_written = d.total("bytes_read"), d.total("bytes_written")
        moved = bytes_read + bytes_written
        out.update(
            runtime_seconds=_f(d.runtime),
            ranks=d.nprocs,
            bytes_read=_f(bytes_read),
            bytes_written=_f(bytes_written),
            reads=_f(reads),
            writes=_f(writes),
            mean_read_size_bytes=_f(bytes_read / reads) if reads else None,
            mean_write_size_bytes=_f(bytes_written / writes) if writes else None,
        )
        posix = d.modules.get("POSIX")
        times = [
            posix.counter(f"posix_f_{kind}_time") if posix else None
            for kind in ("meta", "read", "write")
        ]
        known = every_known(times)
        if known is not None:
            meta, io = known[0], sum(known)
            out["metadata_time_share"] = _f(meta / io) if io > 0 else None
    energy = None
    power = job.prometheus.power if job.prometheus else None
    if power is not None and len(power.values):
        out["power_peak_watts"] = _f(power.values.max())
        out["power_mean_watts"] = _f(power.values.mean())
        if len(power.values) > 1:
            energy, out["energy_source"] = integral(power), "prometheus power"
    if job.geopm is not None and job.geopm.energy_joules > 0:
        energy, out["energy_source"] = job.geopm.energy_joules, "geopm report"
    if energy is not None:
        out["energy_kwh"] = _f(energy / JOULES_PER_KWH)
        out["joules_per_byte"] = _f(energy / moved) if moved else None
    return out


def top_files(job: JobData, n: int = 10) -> list[dict]:
    d = job.darshan
    if d is None:
        return []
    out = []
    # MPI-IO/HDF5 records repeat the POSIX ones for the same file: list the lowest layers
    modules = [m for m in ("POSIX", "STDIO") if m in d.files] or list(d.files)
    for module in modules:
        table = d.files[module]
        moved = np.nan_to_num(table.col("bytes_read") + table.col("bytes_written"))
        for i in np.argsort(-moved, kind="stable")[:n]:
            if moved[i] <= 0:
                continue
            out.append(
                {
                    "module": module,
                    "file": table.files[i] or table.record_ids[i],
                    "rank": int(np.nan_to_num(table.col("rank")[i], nan=-1)),
                    "bytes_read": float(np.nan_to_num(table.col("bytes_read")[i])),
                    "bytes_written": float(np.nan_to_num(table.col("bytes_written")[i])),
                }
            )
    out.sort(key=lambda r: -(r["bytes_read"] + r["bytes_written"]))
    return out[:n]


def bytes_per_rank(job: JobData) -> dict[int, float]:
    """Bytes moved by each rank on its own (not shared) files, in the job totals' modules."""
    if job.darshan is None:
        return {}
    return {rank: read + written for rank, (read, written, _) in sorted(job.darshan.ranks.items())}


def grafana_link(job: JobData, sources: Sources) -> str | None:
    if not sources.grafana_url or job.window is None:
        return None
    query = urllib.parse.urlencode(
        {
            "var-jobid": job.job_id,
            "var-cluster": job.cluster,
            "from": int(job.window[0] * 1000),
            "to": int(job.window[1] * 1000),
        }
    )
    return f"{sources.grafana_url.rstrip('/')}/d/{sources.grafana_dashboard}?{query}"


def build(job: JobData, sources: Sources | None = None) -> dict:
    """The report as the documented JSON structure (docs/report.md, "JSON")."""
    sources = sources or Sources()
    raised, skipped = diagnose(job)
    prom = job.prometheus
    targets = []
    if prom is not None:
        for t in prom.targets:
            peak = t.job_rate.peak if t.job_rate is not None else 0.0
            targets.append(
                {
                    "component": t.component,
                    "target": t.target,
                    "read_bytes": _f(t.read_bytes),
                    "write_bytes": _f(t.write_bytes),
                    "metadata_ops": _f(t.metadata_ops),
                    "peak_rate": _f(peak),
                    "share": _f(t.share),
                }
            )
    d = job.darshan
    return {
        "schema_version": SCHEMA_VERSION,
        "job_id": job.job_id,
        "cluster": job.cluster,
        "slurm": slurm_json(job.slurm),
        "window": {"start": job.window[0], "end": job.window[1]} if job.window else None,
        "sources": {
            "darshan": d.source if d else None,
            "darshan_logs": d.logs if d else 0,
            "prometheus": prom is not None,
            "geopm": job.geopm is not None,
            "functions": bool(job.functions),
        },
        "missing": list(job.missing),
        "summary": summary(job),
        "file_system": {
            "targets": targets,
            "alerts": [dict(a) for a in prom.alerts] if prom else [],
        },
        "top_files": top_files(job),
        "top_functions": [
            {
                "source": f.source,
                "function": f.name,
                "calls": _f(f.calls),
                "total_seconds": _f(f.total_time),
                "self_seconds": _f(f.self_time),
            }
            for f in job.functions[:10]
        ],
        "recorder_files": [
            {
                "file": f.name,
                "accesses": _f(f.accesses),
                "ranks": _f(f.ranks),
                "time_seconds": _f(f.time),
            }
            for f in job.traced_files[:10]
        ],
        "insights": [
            {
                "id": i.id,
                "level": i.level,
                "title": i.title,
                "evidence": {
                    k: (_f(v) if isinstance(v, float) else v) for k, v in i.evidence.items()
                },
                "recommendation": i.recommendation,
                "drishti_code": i.drishti,
                "files": i.files,
            }
            for i in raised
        ],
        "not_evaluated": [asdict(s) for s in skipped],
        "rules": len(RULES),
        "grafana_url": grafana_link(job, sources),
        "history": history_json(job.history),
    }


def render(job: JobData, report: dict, fmt: str) -> str:
    if fmt == "json":
        from hpcmon.report.render_json import render_json

        return render_json(report)
    if fmt == "html":
        from hpcmon.report.render_html import render_html

        return render_html(job, report)
    from hpcmon.report.render_text import render_text

    return render_text(report)


def write_report(
    job_id: str,
    cluster: str | None,
    influx: InfluxSettings | None,
    prometheus_url: str | None,
    out_path: str | Path,
    deadline: float | None = None,
    fmt: str | None = None,
    darshan_logs: tuple[Path, ...] = (),
    write: Callable[[Path, str], None] | None = None,
) -> Path:
    """For the post-job epilog: read, diagnose, render, write ``out_path`` atomically
    (``write``: how, e.g. relative to a directory the epilog opened safely).

    ``deadline`` is an absolute ``time.monotonic()`` value; every server read gets at most the
    time left (at least 1 s). The format follows the suffix (.html, .json, else text) unless
    ``fmt`` is given. Raises TimeoutError when the deadline has passed before writing.
    """
    timeout = 30.0
    if deadline is not None:
        timeout = max(1.0, min(timeout, deadline - time.monotonic()))
    if influx is not None:
        influx.timeout = timeout
    sources = Sources(influx, prometheus_url, darshan_logs=darshan_logs, timeout=timeout)
    job = collect(job_id, cluster, sources)
    out_path = Path(out_path)
    fmt = fmt or {".html": "html", ".json": "json"}.get(out_path.suffix, "text")
    text = render(job, build(job, sources), fmt)
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"report for job {job_id} not written: time limit reached")
    (write or write_atomically)(out_path, text)
    return out_path


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
