"""``--format html``: one self-contained page (inline CSS and SVG, no script, no network)."""

from __future__ import annotations

import html

from hpcmon.report import charts
from hpcmon.report.api import bytes_per_rank
from hpcmon.report.model import JobData
from hpcmon.report.render_history import history_html
from hpcmon.report.slurm import NO_IO_LOGS, io_logs_found, slurm_rows
from hpcmon.report.units import SUMMARY_ROWS, human_bytes, number, percent

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #eee}
td.n{text-align:right}.missing{background:#fff6e0;padding:.5em 1em;border-left:4px solid #e0a000}
.insight{border-left:5px solid #888;padding:.3em .8em;margin:.6em 0;background:#fafafa}
.high{border-color:#c62828}.warn{border-color:#ef8f00}.info{border-color:#1565c0}
.level{font-weight:bold;text-transform:uppercase;font-size:.8em}
svg{max-width:100%;height:auto}tr.current{font-weight:bold}code{font-size:.9em}
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _figure(title: str, svg: str | None) -> str:
    if svg is None:
        return f"<h3>{_e(title)}</h3><p>(no data)</p>"
    return f"<h3>{_e(title)}</h3><figure>{svg}</figure>"


def render_html(job: JobData, report: dict) -> str:
    title = f"hpcmon report: job {report['job_id']}"
    if report["cluster"]:
        title += f" on {report['cluster']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if report["slurm"] is not None:  # Slurm's view first: who, where, how it ended
        rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in slurm_rows(report))
        parts += ["<h2>Slurm</h2>", f"<table>{rows}</table>"]
        if not io_logs_found(report):
            parts.append(f"<p>{_e(NO_IO_LOGS)}</p>")
    if report["missing"]:
        items = "".join(f"<li>{_e(m)}</li>" for m in report["missing"])
        parts.append(f'<div class="missing"><b>Could not see</b><ul>{items}</ul></div>')
    rows = "".join(
        f"<tr><th>{_e(label)}</th><td class='n'>{_e(fmt(report['summary'][key]))}</td></tr>"
        for label, key, fmt in SUMMARY_ROWS
    )
    parts += ["<h2>Summary</h2>", f"<table>{rows}</table>"]
    parts.append("<h2>File system impact</h2>")
    targets = report["file_system"]["targets"]
    if targets:
        body = "".join(
            f"<tr><td>{_e(t['target'])}</td><td>{_e(t['component'])}</td>"
            f"<td class='n'>{_e(human_bytes(t['read_bytes']))}</td>"
            f"<td class='n'>{_e(human_bytes(t['write_bytes']))}</td>"
            f"<td class='n'>{_e(number(t['metadata_ops']))}</td>"
            f"<td class='n'>{_e(number(t['peak_rate']))}</td>"
            f"<td class='n'>{_e(percent(t['share']))}</td></tr>"
            for t in targets
        )
        parts.append(
            "<table><tr><th>target</th><th></th><th>read</th><th>written</th>"
            "<th>metadata ops</th><th>peak rate (B/s, ops/s)</th><th>job's share</th></tr>"
            f"{body}</table>"
        )
    else:
        parts.append("<p>(no Lustre data)</p>")
    alerts = report["file_system"]["alerts"]
    if alerts:
        names = ", ".join(_e(a.get("alertname", "?")) for a in alerts)
        parts.append(f"<p>Alerts: {names}</p>")
    parts.append(_figure("Lustre rates per target over the job window", charts.target_rates(job)))
    parts.append(_figure("Power of the job's nodes", charts.power(job)))
    parts.append("<h2>I/O cost, operations and access sizes (Darshan)</h2>")
    if job.darshan is not None:
        parts.append(_figure("I/O cost per module", charts.io_cost(job)))
        parts.append(_figure("Operation counts", charts.operation_counts(job)))
        for module, svg in charts.access_sizes(job):
            parts.append(_figure(f"Access sizes ({module})", svg))
    else:
        parts.append("<p>(no Darshan data)</p>")
    parts.append("<h2>I/O over time and per rank</h2>")
    parts.append(_figure("Darshan heatmap bins (bytes moved)", charts.heatmap_timeline(job)))
    parts.append(_figure("Bytes per rank", charts.bytes_per_rank(bytes_per_rank(job))))
    parts.append("<h2>Top files and functions</h2>")
    files = "".join(
        f"<tr><td class='n'>{_e(human_bytes(f['bytes_read'] + f['bytes_written']))}</td>"
        f"<td>{_e(f['module'])}</td><td class='n'>{f['rank']}</td>"
        f"<td><code>{_e(f['file'])}</code></td></tr>"
        for f in report["top_files"]
    )
    parts.append(
        f"<table><tr><th>moved</th><th>module</th><th>rank</th><th>file</th></tr>{files}</table>"
        if files
        else "<p>(no Darshan records)</p>"
    )
    traced = "".join(
        f"<tr><td class='n'>{_e(number(f['accesses']))}</td><td class='n'>{_e(number(f['ranks']))}"
        f"</td><td class='n'>{_e(number(f['time_seconds'], 's'))}</td>"
        f"<td><code>{_e(f['file'])}</code></td></tr>"
        for f in report["recorder_files"]
    )
    if traced:
        parts.append(
            "<table><tr><th>accesses</th><th>ranks</th><th>time</th><th>file (Recorder)</th>"
            f"</tr>{traced}</table>"
        )
    functions = "".join(
        f"<tr><td class='n'>{_e(number(f['total_seconds'], 's'))}</td><td>{_e(f['source'])}</td>"
        f"<td class='n'>{_e(number(f['calls']))}</td><td><code>{_e(f['function'])}</code></td></tr>"
        for f in report["top_functions"]
    )
    parts.append(
        f"<table><tr><th>time</th><th>source</th><th>calls</th><th>function</th></tr>{functions}</table>"
        if functions
        else "<p>(no Recorder or VizTracer data)</p>"
    )
    parts.append("<h2>Diagnosis</h2>")
    for i in report["insights"]:
        code = f" (Drishti {_e(i['drishti_code'])})" if i["drishti_code"] else ""
        evidence = ", ".join(f"{_e(k)} = {_e(_short(v))}" for k, v in i["evidence"].items())
        files = f"<br>files: <code>{_e(', '.join(i['files'][:3]))}</code>" if i["files"] else ""
        parts.append(
            f'<div class="insight {i["level"]}"><span class="level">{i["level"]}</span> '
            f"<b>{_e(i['title'])}</b> <small>{_e(i['id'])}{code}</small><br>"
            f"evidence: {evidence}{files}<br>&rarr; {_e(i['recommendation'])}</div>"
        )
    if not report["insights"]:
        parts.append("<p>No rule raised.</p>")
    if report["not_evaluated"]:
        items = "".join(
            f"<li>{_e(n['id'])}: {_e(n['reason'])}</li>" for n in report["not_evaluated"]
        )
        parts.append(f"<details><summary>Rules not evaluated</summary><ul>{items}</ul></details>")
    parts += history_html(report.get("history"))
    parts.append("<h2>Drill-down</h2>")
    if report["grafana_url"]:
        link = _e(report["grafana_url"])
        parts.append(f'<p><a href="{link}">Grafana: this job over its run</a></p>')
    else:
        parts.append("<p>(no --grafana.url given)</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
