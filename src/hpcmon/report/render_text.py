"""``--format text``: the report for a terminal, section by section."""

from __future__ import annotations

from hpcmon.report.render_history import history_text
from hpcmon.report.slurm import NO_IO_LOGS, io_logs_found, slurm_rows
from hpcmon.report.units import SUMMARY_ROWS, human_bytes, number, percent

_MARK = {"high": "HIGH", "warn": "WARN", "info": "INFO"}


def render_text(report: dict) -> str:
    lines = [
        f"hpcmon report: job {report['job_id']}"
        + (f" on {report['cluster']}" if report["cluster"] else "")
    ]
    if report["slurm"] is not None:  # Slurm's view first: who, where, how it ended
        lines += ["", "== Slurm =="]
        lines += [f"  {label:<28} {text}" for label, text in slurm_rows(report)]
        if not io_logs_found(report):
            lines.append(f"  {NO_IO_LOGS}")
    if report["missing"]:
        lines.append("")
        lines.append("Could not see:")
        lines += [f"  - {m}" for m in report["missing"]]
    lines += ["", "== Summary =="]
    summary = report["summary"]
    for label, key, fmt in SUMMARY_ROWS:
        lines.append(f"  {label:<28} {fmt(summary[key])}")
    lines += ["", "== File system impact =="]
    targets = report["file_system"]["targets"]
    if not targets:
        lines.append("  (no Lustre data)")
    for t in targets:
        if t["component"] == "mdt":
            moved = f"{number(t['metadata_ops'])} metadata ops"
            peak = f"peak {number(t['peak_rate'], 'ops/s')}"
        else:
            moved = f"read {human_bytes(t['read_bytes'])}, written {human_bytes(t['write_bytes'])}"
            peak = f"peak {human_bytes(t['peak_rate'])}/s"
        lines.append(f"  {t['target']:<22} {moved}, {peak}, share {percent(t['share'])}")
    for alert in report["file_system"]["alerts"]:
        lines.append(f"  alert: {alert.get('alertname', '?')} {alert.get('target', '')}".rstrip())
    lines += ["", "== Top files =="]
    for f in report["top_files"] or []:
        moved = human_bytes(f["bytes_read"] + f["bytes_written"])
        lines.append(f"  {moved:>10}  {f['module']:<7} rank {f['rank']:>4}  {f['file']}")
    if not report["top_files"]:
        lines.append("  (no Darshan records)")
    if report["recorder_files"]:
        lines += ["", "== Recorder: top files by accesses =="]
        for f in report["recorder_files"]:
            lines.append(
                f"  {number(f['accesses']):>10} accesses  {number(f['ranks'])} ranks"
                f"  {number(f['time_seconds'], 's')}  {f['file']}"
            )
    lines += ["", "== Top functions =="]
    for f in report["top_functions"] or []:
        lines.append(
            f"  {number(f['total_seconds'], 's'):>10}  {f['source']:<9} {number(f['calls'])}"
            f" calls  {f['function']}"
        )
    if not report["top_functions"]:
        lines.append("  (no Recorder or VizTracer data)")
    lines += ["", "== Diagnosis =="]
    for i in report["insights"]:
        code = f" [Drishti {i['drishti_code']}]" if i["drishti_code"] else ""
        lines.append(f"  {_MARK[i['level']]} {i['id']}{code}: {i['title']}")
        evidence = ", ".join(f"{k}={_short(v)}" for k, v in i["evidence"].items())
        lines.append(f"       evidence: {evidence}")
        if i["files"]:
            lines.append(f"       files: {', '.join(i['files'][:3])}")
        lines.append(f"       -> {i['recommendation']}")
    if not report["insights"]:
        lines.append("  no rule raised")
    if report["not_evaluated"]:
        lines.append(
            "  not evaluated: "
            + "; ".join(f"{n['id']} ({n['reason']})" for n in report["not_evaluated"])
        )
    lines += history_text(report.get("history"))
    lines += ["", "== Drill-down =="]
    lines.append(f"  {report['grafana_url'] or '(no --grafana.url given)'}")
    return "\n".join(lines) + "\n"


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
