"""``geopmsession -r`` reports: YAML (one or more documents) or CSV, into ``SessionReport`` s."""

from __future__ import annotations

import csv
from pathlib import Path

from hpcmon.post_job.geopm_report.model import SessionReport, SignalStats
from hpcmon.post_job.geopm_report.values import (
    key_value_or_report,
    parse_iso_time,
    parse_value,
    unquote,
)
from hpcmon.post_job.problems import Problems

SESSION_STATS = ("count", "first", "last", "min", "max", "mean", "std")
SESSION_SUMMARY_KEYS = (
    "sample-time-total",
    "sample-count",
    "sample-period-mean",
    "sample-period-std",
)


def _new_session(path: Path, form: str) -> SessionReport:
    return SessionReport(path=path, form=form, host="")


def _finish_session(session: SessionReport, problems: Problems, where: str) -> bool:
    """Fill the time; say what is missing. False when the document is unusable (no host)."""
    if not session.host:
        problems.add(f"{where}: no 'host'; document skipped")
        return False
    if session.sample_time_first is not None:
        session.start_time_ns = parse_iso_time(session.sample_time_first)
        if session.start_time_ns is None:
            problems.add(f"{where}: unreadable sample-time-first (or not within 1677-2262)")
    if not session.signals:
        problems.add(f"{where}: no metrics (truncated report?)")
    for number, signal in enumerate(session.signals, start=1):  # names are the file's
        missing = [stat for stat in SESSION_STATS if stat not in signal.stats]
        if missing:
            problems.add(f"{where}: signal {number} lacks {', '.join(missing)} (truncated report?)")
    return True


def parse_session_yaml(lines: list[str], path: Path, problems: Problems) -> list[SessionReport]:
    """``geopmsession -r`` YAML: per document ``host``, ``sample-*`` keys and ``metrics``
    (signal -> count/first/last/min/max/mean/std); ``---`` separates periods (``-s``)."""
    sessions: list[SessionReport] = []
    session = _new_session(path, "geopmsession-yaml")
    start_line = 1
    in_metrics = False
    signal: SignalStats | None = None
    signal_indent: int | None = None

    def close(lineno: int) -> None:
        nonlocal session, start_line
        if session.host or session.signals or session.summary:
            if _finish_session(session, problems, f"document at line {start_line}"):
                sessions.append(session)
        session = _new_session(path, "geopmsession-yaml")
        start_line = lineno

    for lineno, raw in enumerate(lines, 1):
        content = raw.strip()
        if not content or content[0] == "#":
            continue
        if content in ("---", "..."):
            close(lineno + 1)
            in_metrics, signal = False, None
            continue
        pair = key_value_or_report(content, problems, lineno)
        if pair is None:
            continue
        key, value = pair
        indent = len(raw) - len(raw.lstrip())
        if indent == 0:
            in_metrics, signal = key == "metrics" and not value, None
            if key == "host":
                if session.host:  # a second document without '---'
                    close(lineno)
                session.host = unquote(value)
                if not session.host:
                    problems.add(
                        "'host:' without a name (report cut inside a host section?)", lineno
                    )
            elif key == "sample-time-first":
                session.sample_time_first = unquote(value)
            elif not in_metrics:
                number = parse_value(value)
                if isinstance(number, float):
                    session.summary[key] = number
            continue
        if not in_metrics:
            problems.add("unexpected indented line", lineno)
            continue
        if signal_indent is None:
            signal_indent = indent
        if indent <= signal_indent:
            signal = SignalStats(signal=unquote(key))
            session.signals.append(signal)
            continue
        if signal is None:
            problems.add("statistic before any signal name", lineno)
            continue
        number = parse_value(value)
        if isinstance(number, float):
            signal.stats[key] = number
        else:
            problems.add("a statistic is not a number", lineno)
    close(len(lines) + 1)
    return sessions


def parse_session_csv(text: str, path: Path, problems: Problems) -> list[SessionReport]:
    """``geopmsession -r -f csv``: one header row, one row per host and period; signal columns
    are ``<signal>-<statistic>`` (``CPU_POWER-package-0-mean``)."""
    rows = csv.reader(text.replace("\x00", "").splitlines())
    try:
        header = next(rows, [])
    except csv.Error as exc:
        problems.add(f"malformed CSV header: {exc}")
        return []
    if "host" not in header:
        problems.add("CSV header has no 'host' column")
        return []
    columns: list[tuple[str, str | None]] = []  # (signal or summary key, statistic)
    for name in header:
        signal, _, stat = name.rpartition("-")
        if name in ("host", "sample-time-first") or name in SESSION_SUMMARY_KEYS:
            columns.append((name, None))
        elif signal and stat in SESSION_STATS:
            columns.append((signal, stat))
        else:
            columns.append((name, ""))  # unknown column: ignored
    sessions: list[SessionReport] = []
    try:
        for lineno, row in enumerate(rows, 2):
            session = _session_from_row(row, header, columns, path, problems, lineno)
            if session is not None:
                sessions.append(session)
    except csv.Error as exc:
        problems.add(f"malformed CSV after {len(sessions)} row(s): {exc}")
    if not sessions and not problems:
        problems.add("no data rows after the CSV header (truncated report?)")
    return sessions


def _session_from_row(
    row: list[str],
    header: list[str],
    columns: list[tuple[str, str | None]],
    path: Path,
    problems: Problems,
    lineno: int,
) -> SessionReport | None:
    """One CSV row as a session document; None (and a message) when it cannot be one."""
    if not row:
        return None
    if len(row) != len(header):
        problems.add(
            f"row has {len(row)} columns, header has {len(header)} "
            "(truncated report?); row skipped",
            lineno,
        )
        return None
    session = _new_session(path, "geopmsession-csv")
    by_signal: dict[str, SignalStats] = {}
    for (name, stat), cell in zip(columns, row, strict=True):
        if stat == "":
            continue
        if name == "host":
            session.host = cell
        elif name == "sample-time-first":
            session.sample_time_first = cell
        else:
            number = parse_value(cell)
            if not isinstance(number, float):
                column = f"{name}-{stat}" if stat else name
                problems.add(f"column {column} is not a number", lineno)
            elif stat is None:
                session.summary[name] = number
            else:
                if name not in by_signal:
                    by_signal[name] = SignalStats(signal=name)
                    session.signals.append(by_signal[name])
                by_signal[name].stats[stat] = number
    return session if _finish_session(session, problems, f"row {lineno}") else None
