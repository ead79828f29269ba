"""grafanalib for modern Grafana (schemaVersion 39+, Grafana 10 to 13).

grafanalib 0.7.1 writes schemaVersion 12, datasources as plain strings and, for some panels,
options of the Angular era (bargauge `fieldOptions`, heatmap `cards`/`xAxis`). Panels here are
still grafanalib objects; what it gets wrong is set through its own extension points (`extraJson`
and `to_json_data` of subclasses) and legacy keys are pruned from the final JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib import core
from grafanalib._gen import DashboardEncoder
from grafanalib.influxdb import InfluxDBTarget

SCHEMA_VERSION = 39
PROMETHEUS = "prometheus"
INFLUXDB = "influxdb"
# The datasource variable of each backend; panels refer to it, never to a fixed name.
DATASOURCE_VARIABLE = {PROMETHEUS: "datasource", INFLUXDB: "influxdb"}

# Keys of Grafana's Panel model (@grafana/schema 13, raw/dashboard/x); others are legacy.
_PANEL_KEYS = {
    "cacheTimeout", "datasource", "description", "fieldConfig", "gridPos", "hideTimeOverride",
    "id", "interval", "links", "maxDataPoints", "maxPerRow", "options", "pluginVersion",
    "repeat", "repeatDirection", "targets", "timeFrom", "timeShift", "title", "transformations",
    "transparent", "type", "collapsed", "panels",
}  # fmt: skip
_ROW_KEYS = {"collapsed", "gridPos", "id", "panels", "title", "type"}
_DASHBOARD_LEGACY = {"__inputs", "hideControls", "rows", "sharedCrosshair", "style", "gnetId"}
# Variable keys of the Grafana 5 era (tag queries, interval settings on every variable type).
_VARIABLE_LEGACY = {"useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count"}
_TOOLTIP = {"mode": "multi", "sort": "desc"}
_LEGEND = {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []}
_REDUCE_LAST = {"calcs": ["lastNotNull"], "fields": "", "values": False}
# One base step (null = from -Infinity): panels colour by series, not by threshold.
_THRESHOLDS = {"mode": "absolute", "steps": [{"color": "green", "value": None}]}


def datasource(kind: str) -> dict[str, str]:
    return {"type": kind, "uid": "${" + DATASOURCE_VARIABLE[kind] + "}"}


@dataclass(frozen=True)
class Query:
    """A panel query: PromQL for Prometheus panels, InfluxQL for InfluxDB panels."""

    text: str
    legend: str = ""
    instant: bool = False  # Prometheus: one value per series (tables, stats)


def _targets(kind: str, queries: list[Query], table: bool) -> list[Any]:
    targets: list[Any] = []
    for index, query in enumerate(queries):
        ref = chr(ord("A") + index)
        if kind == PROMETHEUS:
            target = core.Target(
                expr=query.text,
                legendFormat=query.legend,
                refId=ref,
                instant=query.instant,
                format="table" if table else "time_series",
                datasource=datasource(kind),
                intervalFactor=1,
            )
        else:
            target = InfluxDBTarget(
                query=query.text,
                alias=query.legend,
                refId=ref,
                format="table" if table else "time_series",
                datasource=datasource(kind),
                rawQuery=True,
            )
        targets.append(target)
    return targets


def _field_defaults(unit: str, custom: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "defaults": {
            "unit": unit,
            "custom": custom,
            "mappings": [],
            "thresholds": _THRESHOLDS,
            **extra,
        },
        "overrides": [],
    }


@dataclass
class PanelSpec:
    """What a panel shows; `build` turns it into a grafanalib panel."""

    kind: str  # PROMETHEUS or INFLUXDB
    title: str
    unit: str
    queries: list[Query]
    description: str = ""
    width: int = 12
    height: int = 8
    links: list[dict[str, Any]] = field(default_factory=list)  # per-field data links
    link_field: str = ""  # the field the links are attached to (tables)


def timeseries(spec: PanelSpec, stacked: bool = False, bars: bool = False) -> core.Panel:
    custom = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 60 if bars else (30 if stacked else 10),
        "stacking": {"mode": "normal" if stacked else "none", "group": "A"},
        "showPoints": "never",
        "spanNulls": False,
        "axisPlacement": "auto",
    }
    panel = core.TimeSeries(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=False),
        unit=spec.unit,
        stacking={"mode": "normal" if stacked else "none", "group": "A"},
        tooltipMode="multi",
        tooltipSort="desc",
        extraJson={
            "fieldConfig": _field_defaults(spec.unit, custom),
            "options": {"legend": _LEGEND, "tooltip": _TOOLTIP},
        },
    )
    return panel


def stat(spec: PanelSpec, calc: str = "lastNotNull") -> core.Panel:
    return core.Stat(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=False),
        format=spec.unit,
        reduceCalc=calc,
        extraJson={
            "fieldConfig": _field_defaults(spec.unit, {}),
            "options": {
                "colorMode": "value",
                "graphMode": "none",
                "justifyMode": "auto",
                "orientation": "auto",
                "percentChangeColorMode": "standard",
                "reduceOptions": {"calcs": [calc], "fields": "", "values": False},
                "showPercentChange": False,
                "textMode": "auto",
                "wideLayout": True,
            },
        },
    )


def table(spec: PanelSpec, sort_by: str = "", transformations: list | None = None) -> core.Panel:
    overrides = []
    if spec.links:
        overrides.append(
            {
                "matcher": {"id": "byName", "options": spec.link_field},
                "properties": [{"id": "links", "value": spec.links}],
            }
        )
    custom = {
        "align": "auto",
        "cellOptions": {"type": "auto"},
        "inspect": False,
        "filterable": False,
    }
    return core.Table(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=True),
        unit=spec.unit,
        transformations=transformations or [],
        extraJson={
            "fieldConfig": {
                "defaults": {
                    "unit": spec.unit,
                    "custom": custom,
                    "mappings": [],
                    "thresholds": _THRESHOLDS,
                },
                "overrides": overrides,
            },
            "options": {
                "showHeader": True,
                "frameIndex": 0,
                "cellHeight": "sm",
                "sortBy": [{"displayName": sort_by, "desc": True}] if sort_by else [],
            },
        },
    )


def bargauge(
    spec: PanelSpec, rows: bool = False, transformations: list | None = None
) -> core.Panel:
    """One bar per series (its last value), or with ``rows`` one bar per row of a table query
    (named by the row's text fields, in the rows' order)."""
    reduce = {"calcs": [], "fields": "", "values": True} if rows else _REDUCE_LAST
    return core.BarGauge(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=rows),
        format=spec.unit,
        transformations=transformations or [],
        extraJson={
            "fieldConfig": _field_defaults(spec.unit, {}),
            "options": {
                "displayMode": "gradient",
                "legend": {**_LEGEND, "showLegend": False},
                "maxVizHeight": 300,
                "minVizHeight": 16,
                "minVizWidth": 8,
                "namePlacement": "auto",
                "orientation": "horizontal",
                "reduceOptions": reduce,
                "showUnfilled": True,
                "sizing": "auto",
                "valueMode": "color",
            },
        },
    )


def piechart(spec: PanelSpec) -> core.Panel:
    return core.PieChartv2(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=False),
        unit=spec.unit,
        extraJson={
            "fieldConfig": _field_defaults(spec.unit, {"hideFrom": _HIDE_FROM}),
            "options": {
                "displayLabels": ["name", "percent"],
                "legend": {**_LEGEND, "placement": "right"},
                "orientation": "auto",
                "pieType": "pie",
                "reduceOptions": _REDUCE_LAST,
                "sort": "desc",
                "tooltip": _TOOLTIP,
            },
        },
    )


_HIDE_FROM = {"legend": False, "tooltip": False, "viz": False}


def state_timeline(spec: PanelSpec, value_text: dict[str, str]) -> core.Panel:
    """Up/down style states: values mapped to text and colour (1 green, 0 red)."""
    mappings = [
        {
            "type": "value",
            "options": {
                value: {"text": text, "color": "green" if value == "1" else "red", "index": i}
                for i, (value, text) in enumerate(value_text.items())
            },
        }
    ]
    return core.StateTimeline(
        title=spec.title,
        description=spec.description,
        dataSource=datasource(spec.kind),
        targets=_targets(spec.kind, spec.queries, table=False),
        extraJson={
            "fieldConfig": {
                "defaults": {
                    "unit": spec.unit,
                    "custom": {"fillOpacity": 70, "lineWidth": 0, "hideFrom": _HIDE_FROM},
                    "mappings": mappings,
                    "color": {"mode": "thresholds"},
                    "thresholds": _THRESHOLDS,
                },
                "overrides": [],
            },
            "options": {
                "alignValue": "left",
                "legend": {**_LEGEND, "showLegend": False},
                "mergeValues": True,
                "rowHeight": 0.9,
                "showValue": "auto",
                "tooltip": _TOOLTIP,
            },
        },
    )


def field_config(panel: core.Panel) -> dict[str, Any]:
    """The panel's ``fieldConfig``, which every builder above sets through ``extraJson``."""
    if panel.extraJson is None:
        raise ValueError(f"panel {panel.title!r} has no extraJson: not built by this module")
    return panel.extraJson["fieldConfig"]


def field_override(name: str, *properties: tuple[str, Any]) -> dict[str, Any]:
    """Field config of the field (a table column) named ``name``: (property id, value)."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": key, "value": value} for key, value in properties],
    }


def dashboard_link(title: str, uid: str, query: str) -> core.DashboardLink:
    """A link to another generated dashboard that keeps the time range."""
    return core.DashboardLink(
        title=title, type="link", uri=f"/d/{uid}/{uid}?{query}", keepTime=True, icon="dashboard"
    )


class Layout:
    """Places panels left to right in rows of 24 columns, each section under a row header."""

    def __init__(self) -> None:
        self.panels: list[core.Panel] = []
        self._x = 0
        self._y = 0
        self._row_height = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            core.RowPanel(title=title, gridPos=core.GridPos(h=1, w=24, x=0, y=self._y))
        )
        self._y += 1

    def add(self, panel: core.Panel, width: int = 12, height: int = 8) -> None:
        if self._x + width > 24:
            self._newline()
        placed = attr.evolve(panel, gridPos=core.GridPos(h=height, w=width, x=self._x, y=self._y))
        self.panels.append(placed)
        self._x += width
        self._row_height = max(self._row_height, height)

    def _newline(self) -> None:
        self._y += self._row_height
        self._x = 0
        self._row_height = 0


def _prune(value: Any) -> Any:
    """Drop null values: Grafana's model has optional keys, never nulls."""
    if isinstance(value, dict):
        step = "color" in value and "value" in value  # a threshold step: null is -Infinity
        return {k: _prune(v) for k, v in value.items() if v is not None or (step and k == "value")}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _modern_panel(panel: dict[str, Any]) -> dict[str, Any]:
    if panel.get("type") == "row":
        return {k: v for k, v in panel.items() if k in _ROW_KEYS}
    panel = {k: v for k, v in panel.items() if k in _PANEL_KEYS - {"collapsed", "panels"}}
    options = panel.get("options")
    if isinstance(options, dict) and panel["type"] == "bargauge":
        for legacy in ("fieldOptions", "showThresholdLabels", "showThresholdMarkers"):
            options.pop(legacy, None)  # the Grafana 6 era bargauge
    for target in panel.get("targets", []):
        for legacy in ("target", "metric", "step", "query" if "expr" in target else ""):
            target.pop(legacy, None)
        if not target.get("alias", True):
            target.pop("alias")
        if not target.get("measurement", True):
            target.pop("measurement")
    if not panel.get("repeat"):
        for key in ("repeat", "repeatDirection", "maxPerRow"):
            panel.pop(key, None)
    panel.pop("maxDataPoints", None)  # grafanalib's 100; Grafana sizes it to the panel
    if not panel.get("transformations"):
        panel.pop("transformations", None)
    return panel


def to_json(dashboard: core.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana 11+ stores it."""
    raw = json.loads(json.dumps(dashboard.auto_panel_ids().to_json_data(), cls=DashboardEncoder))
    model = {k: v for k, v in _prune(raw).items() if k not in _DASHBOARD_LEGACY}
    model["panels"] = [_modern_panel(p) for p in model["panels"]]
    for variable in model["templating"]["list"]:
        for legacy in _VARIABLE_LEGACY:
            variable.pop(legacy, None)
        current = variable.get("current", {})
        current.pop("tags", None)
        if "value" not in current:
            variable.pop("current", None)
    model["timepicker"].pop("time_options", None)
    model["schemaVersion"] = SCHEMA_VERSION
    return model
