"""The job's Lustre traffic per target, its nodes' power and its alerts from Prometheus.

Queries the exporter's metrics (docs/reference/metrics.md) over the job's window:
``lustre_job_{read,write}_bytes_per_second`` and ``lustre_job_operations_per_second``
(component="mdt") for the job and for every job on each target (the job's share), GEOPM power
joined to ``hpc_node_job_info`` for the job's nodes, and ``ALERTS`` carrying the job's id.
"""

from __future__ import annotations

import re
import urllib.parse

import numpy as np

from hpcmon.report.http import ReadError, read_json
from hpcmon.report.model import PrometheusData, Series, TargetUse

# The Lustre jobid label is "<id>", or "<id>:<uid>:<host>" / "<id>.<step>" with jobid_var
# patterns; override with --prometheus.job-matcher for procname_uid and other schemes.
DEFAULT_JOB_MATCHER = 'jobid=~"{jobid}([:.@].*)?"'
POWER = "geopm_(cpu|dram|gpu)_power_watts"


class PrometheusReadError(Exception):
    pass


def _step(start: float, end: float) -> float:
    """About 300 points over the window, never below 1 s."""
    return max(1.0, round((end - start) / 300.0, 3))


class PrometheusClient:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict) -> list[dict]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            body = read_json(url, self.timeout, f"Prometheus {self.url}")
        except ReadError as exc:
            raise PrometheusReadError(str(exc)) from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusReadError(f"Prometheus {self.url}: {body.get('error', body)}")
        return body["data"]["result"]

    def range(self, expr: str, start: float, end: float) -> list[Series]:
        result = self._get(
            "/api/v1/query_range",
            {"query": expr, "start": start, "end": end, "step": _step(start, end)},
        )
        try:
            out = []
            for item in result:
                pairs = item.get("values", [])
                times = np.array([float(t) for t, _ in pairs])
                values = np.array([float(v) for _, v in pairs])
                values[~np.isfinite(values)] = 0.0
                out.append(Series(dict(item.get("metric", {})), times, values))
            return out
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PrometheusReadError(f"Prometheus {self.url}: unexpected answer ({exc})") from exc

    def instant(self, expr: str, at: float) -> list[tuple[dict, float]]:
        result = self._get("/api/v1/query", {"query": expr, "time": at})
        try:
            return [(dict(r.get("metric", {})), float(r["value"][1])) for r in result]
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise PrometheusReadError(f"Prometheus {self.url}: unexpected answer ({exc})") from exc


def job_matcher(template: str, job_id: str) -> str:
    escaped = re.escape(job_id).replace("\\", "\\\\").replace('"', '\\"')
    return template.replace("{jobid}", escaped)


def integral(series: Series) -> float:
    """Trapezoidal integral over time (W -> J, B/s -> B)."""
    if len(series.times) < 2:
        return 0.0
    return float(np.trapezoid(series.values, series.times))


def read_prometheus(
    client: PrometheusClient,
    job_id: str,
    start: float,
    end: float,
    matcher_template: str = DEFAULT_JOB_MATCHER,
) -> PrometheusData:
    matcher = job_matcher(matcher_template, job_id)
    span = max(1, int(round(end - start)))
    data = PrometheusData()
    targets: dict[tuple[str, str], TargetUse] = {}

    def target(labels: dict) -> TargetUse:
        key = (labels.get("component", ""), labels.get("target", ""))
        return targets.setdefault(key, TargetUse(*key))

    moved = (
        ("read_bytes", "lustre_job_read_bytes_total", ""),
        ("write_bytes", "lustre_job_write_bytes_total", ""),
        ("metadata_ops", "lustre_job_stats_total", ',component="mdt"'),
    )
    for attribute, metric, extra in moved:
        for labels, value in client.instant(
            f"sum by (component, target) (increase({metric}{{{matcher}{extra}}}[{span}s]))", end
        ):
            setattr(target(labels), attribute, value)
        for labels, value in client.instant(
            f'sum by (component, target) (increase({metric}{{jobid!=""{extra}}}[{span}s]))',
            end,
        ):
            if (labels.get("component", ""), labels.get("target", "")) in targets:
                setattr(target(labels), "all_" + attribute, value)
    rate_exprs = (
        (
            "ost",
            "sum by (component, target) (lustre_job_read_bytes_per_second{%s}"
            " + lustre_job_write_bytes_per_second{%s})",
        ),
        (
            "mdt",
            'sum by (component, target) (lustre_job_operations_per_second{component="mdt",%s})',
        ),
    )
    for component, expr in rate_exprs:
        count = expr.count("%s")
        for series in client.range(expr % ((matcher,) * count), start, end):
            key = (series.labels.get("component", component), series.labels.get("target", ""))
            if key in targets:
                targets[key].job_rate = series
        for series in client.range(expr % (('jobid!=""',) * count), start, end):
            key = (series.labels.get("component", component), series.labels.get("target", ""))
            if key in targets:
                targets[key].all_rate = series
    data.targets = sorted(
        targets.values(), key=lambda t: -(t.read_bytes + t.write_bytes + t.metadata_ops)
    )
    job_nodes = f'max by (instance) (hpc_node_job_info{{jobid="{_label_value(job_id)}"}})'
    power = client.range(
        f'sum(sum by (instance) ({{__name__=~"{POWER}"}}) * on(instance) {job_nodes})',
        start,
        end,
    )
    data.power = power[0] if power else None
    alerts = client.range(f'ALERTS{{alertstate="firing",{matcher}}}', start, end)
    seen = set()
    for series in alerts:
        key = tuple(sorted(series.labels.items()))
        if key not in seen:
            seen.add(key)
            data.alerts.append(dict(series.labels))
    return data


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
