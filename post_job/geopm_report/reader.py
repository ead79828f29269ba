"""Read GEOPM reports of every era into typed records, line by line.

Formats (see ``geopm_report(7)``): the YAML era (2.x/3.x; also 1.1's YAML reports), the 1.x
text era (``##### geopm 1.0.0 #####``) and ``geopmsession -r`` reports (YAML, possibly several
documents, or CSV). The runtime reports have a fixed, regular layout, so a line-based reader is
both faster than a YAML loader (a 1,000-host report in well under a second) and closer to the
data: PyYAML reads ``2e+09`` as a string and ``hash: 0x2602d1d1`` as an int, the reverse of
what the report means. Bad input never raises: problems are collected as messages naming the
file (and line), and everything that could be read is kept.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from pathlib import Path

from hpcmon.timeutil import NS_PER_SECOND
from post_job.files import read_input
from post_job.geopm_report.model import (
    SCOPE_BY_SECTION,
    HostReport,
    ParseResult,
    Region,
    Report,
    SessionReport,
    SignalStats,
    Value,
)
from post_job.problems import Problems, SourceError

SESSION_STATS = ("count", "first", "last", "min", "max", "mean", "std")
SESSION_SUMMARY_KEYS = (
    "sample-time-total",
    "sample-count",
    "sample-period-mean",
    "sample-period-std",
)

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_ISO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_TEXT_REGION = re.compile(r"Region (.*) \(([^()]*)\):")
_NUMBER_WITH_UNIT = re.compile(r"([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s+([A-Za-z/%]+)")
_NUMBER_START = frozenset("0123456789-+.nNiI")


# ---------------------------------------------------------------------------- small helpers


def unquote(text: str) -> str:
    """A YAML scalar as text: outer double or single quotes removed, ``\\"`` undone."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        inner = text[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\") if text[0] == '"' else inner
    return text


def parse_value(text: str) -> Value:
    """A report value: a float when it is a number (``2e+09``, ``NAN`` too), else the text."""
    if text and text[0] in _NUMBER_START:
        try:
            return float(text)
        except ValueError:
            pass
    return unquote(text)


def normalise_hash(text: str) -> str:
    """A region hash as lower-case hex with at least 8 digits (``0x00000000536c798f`` of 1.x
    and ``0x536c798f`` of 2.x name the same region); text that is no number stays as is."""
    raw = unquote(text.strip())
    try:
        number = int(raw, 16) if raw[:2].lower() == "0x" else int(raw)
    except ValueError:
        return raw
    return f"0x{number:08x}" if number >= 0 else raw


def split_key_value(content: str) -> tuple[str, str] | None:
    """``key: value`` (or ``key:``) -> (key, value); None when the line has neither form."""
    key, sep, value = content.partition(": ")
    if sep:
        return key.rstrip(), value.strip()
    if content.endswith(":"):
        return content[:-1].rstrip(), ""
    return None


def append_line(mapping: dict[str, str], key: str, line: str) -> None:
    """Keep a nested block (a multi-line Policy, a frequency map) as text, one line per entry."""
    previous = mapping[key]
    mapping[key] = f"{previous}\n{line}" if previous else line


def parse_start_time(text: str) -> int | None:
    """``Thu May 30 14:38:17 2019`` (the controller's local time, no zone given) as epoch ns,
    read as UTC so the result does not depend on the machine doing the ingest."""
    parts = text.split()
    if len(parts) != 5:
        return None
    _, month_name, day, clock, year = parts
    month = _MONTHS.get(month_name[:3].title())
    hms = clock.split(":")
    if month is None or len(hms) != 3:
        return None
    try:
        moment = dt.datetime(
            int(year), month, int(day), int(hms[0]), int(hms[1]), int(hms[2]), tzinfo=dt.UTC
        )
    except ValueError:
        return None
    return int(moment.timestamp()) * NS_PER_SECOND


def parse_iso_time(text: str) -> int | None:
    """``2024-08-14T17:50:00.895968647-0700`` as exact epoch ns (no zone given = UTC)."""
    match = _ISO_TIME.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=dt.UTC
        )
    except ValueError:
        return None
    offset_seconds = 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset_seconds = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        if zone[0] == "-":
            offset_seconds = -offset_seconds
    fraction_ns = int((fraction or "0")[:9].ljust(9, "0"))
    return (int(moment.timestamp()) - offset_seconds) * NS_PER_SECOND + fraction_ns


def _key_value_or_report(content: str, problems: Problems, lineno: int) -> tuple[str, str] | None:
    pair = split_key_value(content)
    if pair is None:
        problems.add(f"expected 'key: value', got {content[:60]!r}", lineno)
    return pair


def _value_with_unit(key: str, text: str) -> tuple[str, Value]:
    """1.x writes some units after the value (``geopmctl memory HWM: 144472 kB``); move the
    unit into the key as the YAML era does (``geopmctl memory HWM (kB)``)."""
    value = parse_value(text)
    if isinstance(value, str):
        match = _NUMBER_WITH_UNIT.fullmatch(text)
        if match is not None:
            try:
                return f"{key} ({match.group(2)})", float(match.group(1))
            except ValueError:
                pass
    return key, value


# ---------------------------------------------------------------------------- entry points


def parse_report_file(path: str | Path) -> ParseResult:
    """Every report (or session document) in one file, plus the problems met; never raises."""
    path = Path(path)
    gzip_problems: list[str] = []
    try:
        data, _ = read_input(path, gzip_problems)
    except SourceError as exc:
        return ParseResult(errors=[str(exc)])
    result = parse_report_text(data.decode("utf-8", errors="replace"), path)
    result.errors[:0] = gzip_problems
    return result


def parse_report_text(text: str, path: str | Path) -> ParseResult:
    """Like :func:`parse_report_file` for text already read (``path`` names it in errors)."""
    path = Path(path)
    problems = Problems(path)
    result = ParseResult()
    try:
        kind = detect_kind(text)
        if kind is None:
            first = next((line.strip() for line in text.splitlines() if line.strip()), "")
            if not first:
                problems.add("empty report")
            else:
                problems.add(
                    f"not a GEOPM report: first line {first[:60]!r} (expected "
                    "'GEOPM Version:', '##### geopm ...', or geopmsession 'host')"
                )
        elif kind == "yaml":
            result.reports.append(_parse_yaml_era(text.splitlines(), path, problems))
        elif kind == "text-1.x":
            result.reports.append(_parse_text_era(text.splitlines(), path, problems))
        elif kind == "geopmsession-yaml":
            result.reports.extend(_parse_session_yaml(text.splitlines(), path, problems))
        else:
            result.reports.extend(_parse_session_csv(text, path, problems))
    except Exception as exc:  # noqa: BLE001 - a parser bug must not cost the job's other data
        problems.add(
            f"internal error while parsing ({type(exc).__name__}: {exc}); "
            "data before this point kept"
        )
    result.errors = problems.lines()
    return result


def detect_kind(text: str) -> str | None:
    """Which format a report is, from its first meaningful line; None when it is none."""
    for line in text.splitlines():
        content = line.strip()
        if not content or content in ("---", "..."):
            continue
        if content.startswith("#####") and "geopm" in content.lower():
            return "text-1.x"
        if content.startswith("#"):
            continue
        if content.startswith("GEOPM Version:"):
            return "yaml"
        if content.startswith("host:"):
            return "geopmsession-yaml"
        if content.startswith(('"host"', "host,")):
            return "geopmsession-csv"
        return None
    return None


# ---------------------------------------------------------------------------- YAML era


def _parse_yaml_era(lines: list[str], path: Path, problems: Problems) -> Report:
    """geopm_report(7) as YAML: header keys, ``Hosts:``, one block per host with ``Regions``
    (a list of mappings) and the three totals; agents may add keys at each level."""
    report = Report(path=path, era="yaml")
    header = report.header
    in_hosts = False
    last_header_key: str | None = None
    host: HostReport | None = None
    host_indent: int | None = None
    section_indent: int | None = None
    section: str | None = None  # "regions", a scope, "extra" or None
    target: dict[str, Value] | None = None  # where value lines go
    region: Region | None = None
    extra_key = ""

    for lineno, raw in enumerate(lines, 1):
        content = raw.strip()
        if not content or content[0] == "#":
            continue
        indent = len(raw) - len(raw.lstrip())
        if indent == 0:
            if content in ("---", "..."):
                continue
            pair = split_key_value(content)
            if pair is None:
                problems.add(
                    f"expected 'key: value' at the top level, got {content[:60]!r}", lineno
                )
                continue
            key, value = pair
            if key == "Hosts" and not value:
                in_hosts, host, section, target = True, None, None, None
                continue
            in_hosts = False  # a trailer key after the hosts (e.g. "Figure of Merit")
            header[key] = unquote(value)
            last_header_key = key
            continue
        if not in_hosts:
            if last_header_key is None:
                problems.add(f"indented line before any header key: {content[:60]!r}", lineno)
            else:  # a nested header value, e.g. Policy: / Initial Controls: ...
                append_line(header, last_header_key, content)
            continue

        if host_indent is None:
            host_indent = indent
        if indent <= host_indent:
            if not content.endswith(":") or content.startswith("-"):
                problems.add(
                    f"expected a host name ('name:') under Hosts, got {content[:60]!r}", lineno
                )
                host, section, target = None, None, None
                continue
            host = HostReport(name=unquote(content[:-1].strip()))
            report.hosts.append(host)
            section, target, region = None, None, None
            continue
        if host is None:
            problems.add(f"line outside any host: {content[:60]!r}", lineno)
            continue
        if section_indent is None:
            section_indent = indent

        if content[0] == "-" and (len(content) == 1 or content[1] == " "):
            if section != "regions":
                problems.add("list item outside 'Regions'", lineno)
                target = None
                continue
            region = Region(name="", hash="")
            host.regions.append(region)
            target = region.values
            content = content[1:].strip()
            if not content:
                continue
        elif indent <= section_indent:
            pair = split_key_value(content)
            if pair is None:
                problems.add(
                    f"expected a section ('Regions:', 'Application Totals:', ...) "
                    f"in host {host.name!r}, got {content[:60]!r}",
                    lineno,
                )
                section, target = None, None
                continue
            key, value = pair
            region = None
            if key == "Regions" and not value:
                section, target = "regions", None
            elif key in SCOPE_BY_SECTION and not value:
                section = SCOPE_BY_SECTION[key]
                target = host.totals.setdefault(section, {})
            else:  # agent extension of the host, e.g. "Frequency map" (inline or nested)
                section, target, extra_key = "extra", None, key
                host.extras[key] = value
            continue

        pair = _key_value_or_report(content, problems, lineno)
        if pair is None:
            continue
        key, value = pair
        if target is not None:
            if region is not None and target is region.values:
                if key == "region":
                    region.name = unquote(value)
                    continue
                if key == "hash":
                    region.hash = normalise_hash(value)
                    continue
            target[key] = parse_value(value)
        elif section == "extra":
            append_line(host.extras, extra_key, content)
        elif section == "regions":
            problems.add("value before the first '-' of Regions", lineno)
        else:
            problems.add(f"value outside any section in host {host.name!r}", lineno)

    _check_runtime_report(report, problems)
    return report


def _check_runtime_report(report: Report, problems: Problems) -> None:
    """Name what is missing (truncated files lose their tail) and drop unusable regions."""
    if report.version is None:
        problems.add("no 'GEOPM Version' in the header")
    start = report.header.get("Start Time")
    if start is not None:
        report.start_time_ns = parse_start_time(start)
        if report.start_time_ns is None:
            problems.add(f"unreadable Start Time {start[:40]!r}")
    if not report.hosts:
        problems.add("no host sections (missing 'Hosts:'; truncated report?)")
    for host in report.hosts:
        named = [region for region in host.regions if region.name]
        if len(named) != len(host.regions):
            problems.add(
                f"host {host.name!r}: {len(host.regions) - len(named)} region(s) "
                "without a name skipped"
            )
            host.regions = named
        if "application" not in host.totals:
            problems.add(f"host {host.name!r}: no Application Totals (truncated report?)")


# ---------------------------------------------------------------------------- 1.x text era


def _parse_text_era(lines: list[str], path: Path, problems: Problems) -> Report:
    """The pre-YAML report: ``##### geopm <version> #####``, header lines, then per host
    ``Host: name``, ``Region <name> (<hash>):`` blocks, ``Epoch Totals:`` and ``Application
    Totals:``; values are indented ``key: value`` lines. 1.x lists the unmarked region as
    ``Region unmarked-region``; it is read as the Unmarked Totals, like GEOPM's converter does."""
    report = Report(path=path, era="text-1.x")
    header = report.header
    host: HostReport | None = None
    target: dict[str, Value] | None = None
    extra_key: str | None = None
    seen_banner = False

    for lineno, raw in enumerate(lines, 1):
        content = raw.strip()
        if not content:
            continue
        if not seen_banner and content.startswith("#####"):
            seen_banner = True
            version = content.strip("#").strip()
            header["GEOPM Version"] = version.split(None, 1)[1] if " " in version else version
            continue
        if raw[0] not in " \t":
            target, extra_key = None, None
            if content.startswith("Host:"):
                host = HostReport(name=content[5:].strip())
                report.hosts.append(host)
                continue
            match = _TEXT_REGION.fullmatch(content)
            if match is not None or content.endswith(" Totals:"):
                if host is None:
                    problems.add(f"{content[:60]!r} before any 'Host:' line", lineno)
                    continue
                if match is None:
                    if content[:-1] not in SCOPE_BY_SECTION:
                        problems.add(f"unknown totals section {content[:60]!r}", lineno)
                        continue
                    target = host.totals.setdefault(SCOPE_BY_SECTION[content[:-1]], {})
                elif match.group(1) == "unmarked-region":
                    target = host.totals.setdefault("unmarked", {})
                else:
                    region = Region(name=match.group(1), hash=normalise_hash(match.group(2)))
                    host.regions.append(region)
                    target = region.values
                continue
            pair = _key_value_or_report(content, problems, lineno)
            if pair is None:
                continue
            key, value = pair
            if host is None:
                header[key] = value
            else:  # agent extension of the host, e.g. "Final online freq map:"
                host.extras[key] = value
                extra_key = key
            continue
        pair = _key_value_or_report(content, problems, lineno)
        if pair is None:
            continue
        key, value = pair
        if target is not None:
            key, number = _value_with_unit(key, value)
            target[key] = number
        elif extra_key is not None and host is not None:
            append_line(host.extras, extra_key, content)
        elif host is None:
            problems.add(f"indented line before any 'Host:': {content[:60]!r}", lineno)
        else:
            problems.add(f"value outside any region or totals in host {host.name!r}", lineno)

    _check_runtime_report(report, problems)
    return report


# ---------------------------------------------------------------------------- geopmsession


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
            problems.add(
                f"{where}: unreadable sample-time-first {session.sample_time_first[:40]!r}"
            )
    if not session.signals:
        problems.add(f"{where}: no metrics (truncated report?)")
    for signal in session.signals:
        missing = [stat for stat in SESSION_STATS if stat not in signal.stats]
        if missing:
            problems.add(
                f"{where}: signal {signal.signal!r} lacks {', '.join(missing)} (truncated report?)"
            )
    return True


def _parse_session_yaml(lines: list[str], path: Path, problems: Problems) -> list[SessionReport]:
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
        pair = _key_value_or_report(content, problems, lineno)
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
            problems.add(f"unexpected indented line {content[:60]!r}", lineno)
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
            problems.add(f"signal {signal.signal!r}: {key} is not a number: {value[:40]!r}", lineno)
    close(len(lines) + 1)
    return sessions


def _parse_session_csv(text: str, path: Path, problems: Problems) -> list[SessionReport]:
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
                problems.add(f"column {column} is not a number: {cell[:40]!r}", lineno)
            elif stat is None:
                session.summary[name] = number
            else:
                if name not in by_signal:
                    by_signal[name] = SignalStats(signal=name)
                    session.signals.append(by_signal[name])
                by_signal[name].stats[stat] = number
    return session if _finish_session(session, problems, f"row {lineno}") else None
