"""Runtime reports (``geopm_report(7)``): the YAML era (2.x/3.x, also 1.1's YAML reports)
and the 1.x text era (``##### geopm 1.0.0 #####``), line by line, into a ``Report``."""

from __future__ import annotations

import re
from pathlib import Path

from hpcmon.post_job.geopm_report.model import SCOPE_BY_SECTION, HostReport, Region, Report, Value
from hpcmon.post_job.geopm_report.values import (
    append_line,
    key_value_or_report,
    normalise_hash,
    parse_start_time,
    parse_value,
    split_key_value,
    unquote,
    value_with_unit,
)
from hpcmon.post_job.problems import Problems

_TEXT_REGION = re.compile(r"Region (.*) \(([^()]*)\):")


def parse_yaml_era(lines: list[str], path: Path, problems: Problems) -> Report:
    """geopm_report(7) as YAML: header keys, ``Hosts:``, one block per host with ``Regions``
    (a list of mappings) and the three totals; agents may add keys at each level."""
    return _YamlEraReader(Report(path=path, era="yaml"), problems).read(lines)


class _RuntimeReader:
    """A runtime report read line by line; each era's reader knows where it is in it."""

    def __init__(self, report: Report, problems: Problems) -> None:
        self.report = report
        self.problems = problems

    def line(self, raw: str, lineno: int) -> None:
        raise NotImplementedError

    def read(self, lines: list[str]) -> Report:
        for lineno, raw in enumerate(lines, 1):
            self.line(raw, lineno)
        _check_runtime_report(self.report, self.problems)
        return self.report


class _YamlEraReader(_RuntimeReader):
    """Where the YAML-era reader is in the report: header, a host, a section, a region."""

    def __init__(self, report: Report, problems: Problems) -> None:
        super().__init__(report, problems)
        self.in_hosts = False
        self.last_header_key: str | None = None
        self.host: HostReport | None = None
        self.host_indent: int | None = None
        self.section_indent: int | None = None
        self.section: str | None = None  # "regions", a scope, "extra" or None
        self.target: dict[str, Value] | None = None  # where value lines go
        self.region: Region | None = None
        self.extra_key = ""

    def line(self, raw: str, lineno: int) -> None:
        content = raw.strip()
        if not content or content[0] == "#":
            return
        indent = len(raw) - len(raw.lstrip())
        if indent == 0:
            self._top_level(content, lineno)
        elif not self.in_hosts:
            self._nested_header(content, lineno)
        else:
            self._in_hosts(content, indent, lineno)

    def _top_level(self, content: str, lineno: int) -> None:
        """A header key, ``Hosts:``, or a trailer key after the hosts."""
        if content in ("---", "..."):
            return
        pair = split_key_value(content)
        if pair is None:
            self.problems.add("expected 'key: value' at the top level", lineno)
            return
        key, value = pair
        if key == "Hosts" and not value:
            self.in_hosts, self.host, self.section, self.target = True, None, None, None
            return
        self.in_hosts = False  # a trailer key after the hosts (e.g. "Figure of Merit")
        self.report.header[key] = unquote(value)
        self.last_header_key = key

    def _nested_header(self, content: str, lineno: int) -> None:
        if self.last_header_key is None:
            self.problems.add("indented line before any header key", lineno)
        else:  # a nested header value, e.g. Policy: / Initial Controls: ...
            append_line(self.report.header, self.last_header_key, content)

    def _in_hosts(self, content: str, indent: int, lineno: int) -> None:
        if self.host_indent is None:
            self.host_indent = indent
        if indent <= self.host_indent:
            self._host_name(content, lineno)
            return
        if self.host is None:
            self.problems.add("line outside any host", lineno)
            return
        if self.section_indent is None:
            self.section_indent = indent
        if content[0] == "-" and (len(content) == 1 or content[1] == " "):
            rest = self._region_start(content, self.host, lineno)
            if rest:
                self._value(rest, self.host, lineno)
        elif indent <= self.section_indent:
            self._section(content, self.host, lineno)
        else:
            self._value(content, self.host, lineno)

    def _host_name(self, content: str, lineno: int) -> None:
        if not content.endswith(":") or content.startswith("-"):
            self.problems.add("expected a host name ('name:') under Hosts", lineno)
            self.host, self.section, self.target = None, None, None
            return
        self.host = HostReport(name=unquote(content[:-1].strip()))
        self.report.hosts.append(self.host)
        self.section, self.target, self.region = None, None, None

    def _region_start(self, content: str, host: HostReport, lineno: int) -> str:
        """A ``-`` item of Regions starts a region; the rest of the line (maybe a value)."""
        if self.section != "regions":
            self.problems.add("list item outside 'Regions'", lineno)
            self.target = None
            return ""
        self.region = Region(name="", hash="")
        host.regions.append(self.region)
        self.target = self.region.values
        return content[1:].strip()

    def _section(self, content: str, host: HostReport, lineno: int) -> None:
        """``Regions:``, one of the totals, or an agent's extension of the host."""
        pair = split_key_value(content)
        if pair is None:
            self.problems.add(
                "expected a section ('Regions:', 'Application Totals:', ...) in a host",
                lineno,
            )
            self.section, self.target = None, None
            return
        key, value = pair
        self.region = None
        if key == "Regions" and not value:
            self.section, self.target = "regions", None
        elif key in SCOPE_BY_SECTION and not value:
            self.section = SCOPE_BY_SECTION[key]
            self.target = host.totals.setdefault(self.section, {})
        else:  # agent extension of the host, e.g. "Frequency map" (inline or nested)
            self.section, self.target, self.extra_key = "extra", None, key
            host.extras[key] = value

    def _value(self, content: str, host: HostReport, lineno: int) -> None:
        pair = key_value_or_report(content, self.problems, lineno)
        if pair is None:
            return
        key, value = pair
        if self.target is not None:
            region = self.region
            if region is not None and self.target is region.values:
                if key == "region":
                    region.name = unquote(value)
                    return
                if key == "hash":
                    region.hash = normalise_hash(value)
                    return
            self.target[key] = parse_value(value)
        elif self.section == "extra":
            append_line(host.extras, self.extra_key, content)
        elif self.section == "regions":
            self.problems.add("value before the first '-' of Regions", lineno)
        else:
            self.problems.add("value outside any section in a host", lineno)


def _check_runtime_report(report: Report, problems: Problems) -> None:
    """Name what is missing (truncated files lose their tail) and drop unusable regions."""
    if report.version is None:
        problems.add("no 'GEOPM Version' in the header")
    start = report.header.get("Start Time")
    if start is not None:
        report.start_time_ns = parse_start_time(start)
        if report.start_time_ns is None:
            problems.add("unreadable Start Time (or not within 1677-2262, what InfluxDB stores)")
    if not report.hosts:
        problems.add("no host sections (missing 'Hosts:'; truncated report?)")
    for number, host in enumerate(report.hosts, start=1):  # by position: names are the file's
        named = [region for region in host.regions if region.name]
        if len(named) != len(host.regions):
            problems.add(
                f"host {number} of {len(report.hosts)}: {len(host.regions) - len(named)} region(s) "
                "without a name skipped"
            )
            host.regions = named
        if "application" not in host.totals:
            problems.add(
                f"host {number} of {len(report.hosts)}: no Application Totals (truncated report?)"
            )


def parse_text_era(lines: list[str], path: Path, problems: Problems) -> Report:
    """The pre-YAML report: ``##### geopm <version> #####``, header lines, then per host
    ``Host: name``, ``Region <name> (<hash>):`` blocks, ``Epoch Totals:`` and ``Application
    Totals:``; values are indented ``key: value`` lines. 1.x lists the unmarked region as
    ``Region unmarked-region``; it is read as the Unmarked Totals, like GEOPM's converter does."""
    return _TextEraReader(Report(path=path, era="text-1.x"), problems).read(lines)


class _TextEraReader(_RuntimeReader):
    """Where the 1.x reader is in the report: the header, a host, a region or totals block."""

    def __init__(self, report: Report, problems: Problems) -> None:
        super().__init__(report, problems)
        self.host: HostReport | None = None
        self.target: dict[str, Value] | None = None  # where indented value lines go
        self.extra_key: str | None = None
        self.seen_banner = False

    def line(self, raw: str, lineno: int) -> None:
        content = raw.strip()
        if not content:
            return
        if not self.seen_banner and content.startswith("#####"):
            self.seen_banner = True
            version = content.strip("#").strip()
            self.report.header["GEOPM Version"] = (
                version.split(None, 1)[1] if " " in version else version
            )
        elif raw[0] not in " \t":
            self._unindented(content, lineno)
        else:
            self._value(content, lineno)

    def _unindented(self, content: str, lineno: int) -> None:
        """``Host:``, a region or totals block, or a header (or host extension) key."""
        self.target, self.extra_key = None, None
        if content.startswith("Host:"):
            self.host = HostReport(name=content[5:].strip())
            self.report.hosts.append(self.host)
            return
        match = _TEXT_REGION.fullmatch(content)
        if match is not None or content.endswith(" Totals:"):
            self._block(content, match, lineno)
            return
        pair = key_value_or_report(content, self.problems, lineno)
        if pair is None:
            return
        key, value = pair
        if self.host is None:
            self.report.header[key] = value
        else:  # agent extension of the host, e.g. "Final online freq map:"
            self.host.extras[key] = value
            self.extra_key = key

    def _block(self, content: str, match: re.Match[str] | None, lineno: int) -> None:
        host = self.host
        if host is None:
            self.problems.add("a line before any 'Host:' line", lineno)
            return
        if match is None:
            if content[:-1] not in SCOPE_BY_SECTION:
                self.problems.add("unknown totals section", lineno)
                return
            self.target = host.totals.setdefault(SCOPE_BY_SECTION[content[:-1]], {})
        elif match.group(1) == "unmarked-region":
            self.target = host.totals.setdefault("unmarked", {})
        else:
            region = Region(name=match.group(1), hash=normalise_hash(match.group(2)))
            host.regions.append(region)
            self.target = region.values

    def _value(self, content: str, lineno: int) -> None:
        pair = key_value_or_report(content, self.problems, lineno)
        if pair is None:
            return
        key, value = pair
        if self.target is not None:
            key, number = value_with_unit(key, value)
            self.target[key] = number
        elif self.extra_key is not None and self.host is not None:
            append_line(self.host.extras, self.extra_key, content)
        elif self.host is None:
            self.problems.add("indented line before any 'Host:'", lineno)
        else:
            self.problems.add("value outside any region or totals in a host", lineno)
