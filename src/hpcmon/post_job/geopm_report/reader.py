"""Read GEOPM reports of every era into typed records, line by line.

Formats (see ``geopm_report(7)``): the YAML era (2.x/3.x; also 1.1's YAML reports), the 1.x
text era (``##### geopm 1.0.0 #####``) and ``geopmsession -r`` reports (YAML, possibly several
documents, or CSV). The runtime reports have a fixed, regular layout, so a line-based reader is
both faster than a YAML loader (a 1,000-host report in well under a second) and closer to the
data: PyYAML reads ``2e+09`` as a string and ``hash: 0x2602d1d1`` as an int, the reverse of
what the report means. Bad input never raises: problems are collected as messages naming the
file (and line), and everything that could be read is kept.

reader.py (this entry: which format) -> runtime.py (runtime reports of both eras) or
session.py (geopmsession) -> the records of model.py; values.py reads the scalars.
"""

from __future__ import annotations

from pathlib import Path

from hpcmon.post_job.files import read_input
from hpcmon.post_job.geopm_report.model import ParseResult
from hpcmon.post_job.geopm_report.runtime import parse_text_era, parse_yaml_era
from hpcmon.post_job.geopm_report.session import parse_session_csv, parse_session_yaml
from hpcmon.post_job.problems import Problems, SourceError


def parse_report_file(path: str | Path, problems: Problems | None = None) -> ParseResult:
    """Every report (or session document) in one file, plus the problems met (also collected
    into ``problems`` when given: the caller's collector for this file); never raises."""
    path = Path(path)
    problems = Problems(path) if problems is None else problems
    try:
        data, _ = read_input(path, problems)
    except SourceError as exc:
        problems.append(str(exc))
        return ParseResult(errors=problems.lines())
    return parse_report_text(data.decode("utf-8", errors="replace"), path, problems)


def parse_report_text(text: str, path: str | Path, problems: Problems | None = None) -> ParseResult:
    """Like :func:`parse_report_file` for text already read (``path`` names it in errors)."""
    path = Path(path)
    problems = Problems(path) if problems is None else problems
    result = ParseResult()
    try:
        kind = detect_kind(text)
        if kind is None:
            if not text.strip():
                problems.add("empty report")
            else:
                problems.add(
                    "not a GEOPM report: unknown first line (expected "
                    "'GEOPM Version:', '##### geopm ...', or geopmsession 'host')"
                )
        elif kind == "yaml":
            result.reports.append(parse_yaml_era(text.splitlines(), path, problems))
        elif kind == "text-1.x":
            result.reports.append(parse_text_era(text.splitlines(), path, problems))
        elif kind == "geopmsession-yaml":
            result.reports.extend(parse_session_yaml(text.splitlines(), path, problems))
        else:
            result.reports.extend(parse_session_csv(text, path, problems))
    except Exception as exc:  # noqa: BLE001 - a parser bug must not cost the job's other data
        problems.add(
            f"internal error while parsing ({type(exc).__name__}); data before this point kept"
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
