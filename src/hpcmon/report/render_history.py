"""The report's history section (earlier runs of the job's application) as text and HTML:
one table, earlier runs oldest first then this run, and a small chart of the figures."""

from __future__ import annotations

import html
from datetime import UTC, datetime

from hpcmon.report import charts
from hpcmon.report.units import human_bytes, number, percent

# figure -> (column title, formatter)
COLUMNS = {
    "runtime_seconds": ("runtime", lambda v: number(v, "s")),
    "bytes_read": ("read", human_bytes),
    "bytes_written": ("written", human_bytes),
    "operations": ("operations", number),
    "metadata_time_share": ("metadata", percent),
    "io_score": ("I/O score", number),
    "energy_kwh": ("energy", lambda v: number(v, "kWh")),
}
_SPARK = "▁▂▃▄▅▆▇█"


def _date(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M")


def _title(history: dict) -> str:
    who = "all users" if history["scope"] == "all" else f"user {history['user'] or '(unknown)'}"
    return f"History: {history['app']} ({who}, {len(history['runs'])} earlier runs)"


def _flag_text(item: dict) -> str:
    ratio = "from 0" if item["ratio"] is None else f"{item['ratio']:.3g}x"
    return f"{COLUMNS[item['figure']][0]} {ratio} the median of {item['earlier_runs']} earlier runs"


def sparkline(values: list[float | None]) -> str:
    """One character per run (a space where the figure is unknown)."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = high - low
    return "".join(
        " " if v is None else _SPARK[0 if span == 0 else round((v - low) / span * 7)]
        for v in values
    )


def history_text(history: dict | None) -> list[str]:
    if history is None:
        return []
    rows = [*history["runs"], history["current"]]
    lines = ["", f"== {_title(history)} =="]
    head = f"  {'job':<12} {'start (UTC)':<16}" + "".join(
        f" {title:>11}" for title, _ in COLUMNS.values()
    )
    lines.append(head)
    for row in rows:
        mark = " <- this run" if row is rows[-1] else ""
        cells = "".join(f" {fmt(row[name]):>11}" for name, (_, fmt) in COLUMNS.items())
        lines.append(f"  {row['job_id']:<12} {_date(row['start']):<16}{cells}{mark}")
    if not history["runs"]:
        lines.append("  (no earlier run)")
    trend = [
        f"{title} {line}"
        for name, (title, _) in COLUMNS.items()
        if (line := sparkline([r[name] for r in rows])) and len(rows) > 1
    ]
    if trend:
        lines.append("  over the runs: " + "  ".join(trend))
    flagged = [item for item in history["regressions"] if item["flagged"]]
    for item in flagged:
        lines.append(f"  CHANGED: {_flag_text(item)}")
    if history["runs"] and not flagged:
        lines.append("  no figure at 2x or 0.5x the earlier runs' median")
    return lines


def history_html(history: dict | None) -> list[str]:
    if history is None:
        return []

    def e(value) -> str:
        return html.escape(str(value), quote=True)

    rows = [*history["runs"], history["current"]]
    parts = [f"<h2>{e(_title(history))}</h2>"]
    head = "".join(f"<th>{e(title)}</th>" for title, _ in COLUMNS.values())
    current = ' class="current"'
    body = "".join(
        f"<tr{current if row is rows[-1] else ''}>"
        f"<td>{e(row['job_id'])}</td><td>{e(_date(row['start']))}</td>"
        + "".join(f"<td class='n'>{e(fmt(row[name]))}</td>" for name, (_, fmt) in COLUMNS.items())
        + "</tr>"
        for row in rows
    )
    parts.append(f"<table><tr><th>job</th><th>start (UTC)</th>{head}</tr>{body}</table>")
    if not history["runs"]:
        parts.append("<p>(no earlier run: the last row is this run)</p>")
    flagged = [item for item in history["regressions"] if item["flagged"]]
    if flagged:
        items = "".join(f"<li>{e(_flag_text(item))}</li>" for item in flagged)
        parts.append(
            f'<div class="missing"><b>Changed against earlier runs</b><ul>{items}</ul></div>'
        )
    svg = charts.history(rows, {name: title for name, (title, _) in COLUMNS.items()})
    if svg is not None:
        parts.append(
            "<h3>Each figure over the runs, relative to the earlier runs' median</h3>"
            f"<figure>{svg}</figure>"
        )
    return parts
