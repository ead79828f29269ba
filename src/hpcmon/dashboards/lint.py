"""Checks on generated dashboards, after Grafana's dashboard-linter, plus link and layout checks.

Each check returns readable problems; an empty list is a clean dashboard. Used by the tests and
by `hpcmon-dashboards lint DIR`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import promql_parser

from .grafana import DATASOURCE_VARIABLE

MODERN_PANEL_TYPES = {
    "timeseries", "stat", "table", "bargauge", "heatmap", "state-timeline", "piechart", "text",
    "row",
}  # fmt: skip
_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\$(\w+)")
# What Grafana puts in place of its built-in variables, for parsing only.
_BUILTIN_DURATIONS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
}
_RATE_RANGE = re.compile(r"\b(?:rate|irate|increase)\((?:[^()\[\]]|\([^()]*\))*\[([^\]]+)\]")
_LINK_UID = re.compile(r"/d/([\w-]+)")
_TIME_RANGE = re.compile(r"\$\{__url_time_range\}|from=[^&]+&to=")


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def substitute_variables(expr: str, values: dict[str, str] | None = None) -> str:
    """The query as Grafana would send it: built-in durations and variables replaced (the
    others match anything: `.*`, Grafana's All)."""
    values = values or {}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name.isdigit():  # label_replace's "$1": no variable's name, Grafana leaves it
            return match.group(0)
        if name in _BUILTIN_DURATIONS:
            return values.get(name, _BUILTIN_DURATIONS[name])
        return values.get(name, ".*")

    return _GRAFANA_VARIABLE.sub(substitute, expr)


def prometheus_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every Prometheus panel target and query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if (target.get("datasource") or {}).get("type") == "prometheus":
                yield f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query" and variable["datasource"]["type"] == "prometheus":
            yield f"variable {variable['name']}", variable["query"]


def influxql_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if (target.get("datasource") or {}).get("type") == "influxdb":
                yield f"panel {panel.get('title')!r} {target.get('refId')}", target["query"]
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query" and variable["datasource"]["type"] == "influxdb":
            yield f"variable {variable['name']}", variable["query"]


def influxql_fields(query: str) -> list[tuple[str, str]]:
    """(measurement, identifier) of every quoted name an InfluxQL SELECT reads (fields and
    tags; aliases excluded), the measurement being the innermost FROM."""
    measurements = re.findall(r'FROM "(\w+)"', query)
    if not measurements:  # SHOW TAG VALUES ...
        return []
    measurement = measurements[-1]
    names: set[str] = set()
    for selected in re.findall(r"SELECT (.*?) FROM", query, re.S):
        names |= set(re.findall(r'"(\w+)"', re.sub(r'AS "[^"]*"', "", selected)))
    return [(measurement, name) for name in sorted(names)]


def label_values_selector(query: str) -> tuple[str, str] | None:
    """`label_values(selector, label)` -> (selector, label); Grafana's own function."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip(), re.S)
    return (match.group(1), match.group(2)) if match else None


def check_promql(dashboard: dict[str, Any]) -> list[str]:
    problems = []
    for where, query in prometheus_queries(dashboard):
        expr = query
        selector = label_values_selector(query)
        if selector:
            expr = selector[0]
        try:
            promql_parser.parse(substitute_variables(expr))
        except ValueError as exc:
            problems.append(f"{where}: PromQL does not parse: {exc}")
            continue
        if not where.startswith("variable"):
            for window in _RATE_RANGE.findall(query):
                if window.split(":")[0] not in ("$__rate_interval", "$__range"):
                    problems.append(f"{where}: rate window {window!r} is not $__rate_interval")
    return problems


def check_datasources(dashboard: dict[str, Any]) -> list[str]:
    problems = []
    variables = {
        v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"
    }
    for panel in panels(dashboard):
        if panel["type"] in ("row", "text"):
            continue
        refs = [panel.get("datasource")] + [t.get("datasource") for t in panel.get("targets", [])]
        for ref in refs:
            if not isinstance(ref, dict) or set(ref) != {"type", "uid"}:
                problems.append(
                    f"panel {panel['title']!r}: datasource {ref!r} is not {{type, uid}}"
                )
                continue
            variable = DATASOURCE_VARIABLE.get(ref["type"])
            if ref["uid"] != f"${{{variable}}}" or variables.get(variable) != ref["type"]:
                problems.append(
                    f"panel {panel['title']!r}: {ref['type']} datasource without its variable"
                )
    return problems


def check_panels(dashboard: dict[str, Any]) -> list[str]:
    problems = []
    if dashboard.get("schemaVersion", 0) < 39:
        problems.append(f"schemaVersion {dashboard.get('schemaVersion')} < 39")
    seen_ids: set[int] = set()
    occupied: dict[tuple[int, int], str | None] = {}
    for panel in panels(dashboard):
        title = panel.get("title")
        if panel["type"] not in MODERN_PANEL_TYPES:
            problems.append(f"panel {title!r}: type {panel['type']!r} is not a modern panel")
        if panel["id"] in seen_ids:
            problems.append(f"panel {title!r}: duplicate id {panel['id']}")
        seen_ids.add(panel["id"])
        pos = panel["gridPos"]
        if pos["x"] + pos["w"] > 24:
            problems.append(f"panel {title!r}: wider than the grid")
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                if (x, y) in occupied:
                    problems.append(f"panel {title!r} overlaps {occupied[(x, y)]!r}")
                    break
                occupied[(x, y)] = title
            else:
                continue
            break
        if panel["type"] != "row" and not panel.get("fieldConfig", {}).get("defaults", {}).get(
            "unit"
        ):
            problems.append(f"panel {title!r}: no unit")
        refs = [t.get("refId") for t in panel.get("targets", [])]
        if len(refs) != len(set(refs)) or None in refs:
            problems.append(f"panel {title!r}: refIds not unique: {refs}")
    return problems


def _links(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(where, url, keeps the time range) of dashboard links and panel data links."""
    for link in dashboard.get("links", []):
        yield "dashboard link", link.get("url", ""), bool(link.get("keepTime"))
    for panel in panels(dashboard):
        field_config = panel.get("fieldConfig", {})
        link_lists = [field_config.get("defaults", {}).get("links", []), panel.get("links", [])]
        for override in field_config.get("overrides", []):
            for prop in override.get("properties", []):
                if prop.get("id") == "links":
                    link_lists.append(prop["value"])
        for links in link_lists:
            for link in links:
                yield f"panel {panel.get('title')!r}", link.get("url", ""), False


def check_links(dashboard: dict[str, Any], known_uids: set[str]) -> list[str]:
    problems = []
    for where, url, keep_time in _links(dashboard):
        target = _LINK_UID.search(url)
        if not target or target.group(1) not in known_uids:
            problems.append(f"{where}: {url!r} does not link to a generated dashboard")
        if "var-jobid=" not in url:
            problems.append(f"{where}: {url!r} does not carry var-jobid")
        if not keep_time and not _TIME_RANGE.search(url):
            problems.append(f"{where}: {url!r} does not carry the time range")
    return problems


def lint(dashboard: dict[str, Any], known_uids: set[str]) -> list[str]:
    return (
        check_panels(dashboard)
        + check_datasources(dashboard)
        + check_promql(dashboard)
        + check_links(dashboard, known_uids)
    )
