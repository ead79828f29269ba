# Hand-written stub of grafanalib 0.7.1's API (Apache-2.0) for the type checker: the attrs
# classes of grafanalib.core that hpcmon uses, with their fields as keyword arguments.
import builtins
from typing import Any, Literal, Self, TypeAlias, TypedDict, Unpack

DASHBOARD_TYPE: TypeAlias = Literal["dashboards", "link"]
DASHBOARD_LINK_ICON: TypeAlias = Literal[
    "bolt", "cloud", "dashboard", "doc", "external link", "info", "question"
]
# A datasource: its name (Grafana 6 era) or a reference {"type": ..., "uid": ...}.
_DataSource: TypeAlias = str | dict[str, Any]

class Repeat:
    direction: str | None
    variable: str | None
    maxPerRow: int | None
    def __init__(
        self,
        direction: str | None = None,
        variable: str | None = None,
        maxPerRow: int | None = None,
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Target:
    expr: str
    format: str
    hide: bool
    legendFormat: str
    interval: str
    intervalFactor: int
    metric: str
    refId: str
    step: int
    target: str
    instant: bool
    datasource: _DataSource | None
    def __init__(
        self,
        expr: str = "",
        format: str = "time_series",
        hide: bool = False,
        legendFormat: str = "",
        interval: str = "",
        intervalFactor: int = 2,
        metric: str = "",
        refId: str = "",
        step: int = 10,
        target: str = "",
        instant: bool = False,
        datasource: _DataSource | None = None,
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class GridPos:
    h: int
    w: int
    x: int
    y: int
    def __init__(self, h: int, w: int, x: int, y: int) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Annotations:
    list: builtins.list[Any]
    def __init__(self, list: builtins.list[Any] = ...) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class DashboardLink:
    asDropdown: bool
    icon: DASHBOARD_LINK_ICON
    includeVars: bool
    keepTime: bool
    tags: list[str]
    targetBlank: bool
    title: str
    tooltip: str
    type: DASHBOARD_TYPE
    uri: str
    def __init__(
        self,
        asDropdown: bool = False,
        icon: DASHBOARD_LINK_ICON = "external link",
        includeVars: bool = False,
        keepTime: bool = True,
        tags: list[str] = ...,
        targetBlank: bool = False,
        title: str = "",
        tooltip: str = "",
        type: DASHBOARD_TYPE = "dashboards",
        uri: str = "",
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Template:
    name: str
    query: str
    default: str | list[str] | None
    dataSource: _DataSource | None
    label: str | None
    allValue: str | None
    includeAll: bool
    multi: bool
    options: list[dict[str, Any]]
    regex: str | None
    useTags: bool
    tagsQuery: str | None
    tagValuesQuery: str | None
    refresh: int
    type: str
    hide: int
    sort: int
    auto: bool
    autoCount: int
    autoMin: str
    def __init__(
        self,
        name: str,
        query: str,
        default: str | list[str] | None = None,
        dataSource: _DataSource | None = None,
        label: str | None = None,
        allValue: str | None = None,
        includeAll: bool = False,
        multi: bool = False,
        options: list[dict[str, Any]] = ...,
        regex: str | None = None,
        useTags: bool = False,
        tagsQuery: str | None = None,
        tagValuesQuery: str | None = None,
        refresh: int = 1,
        type: str = "query",
        hide: int = 0,
        sort: int = 1,
        auto: bool = False,
        autoCount: int = 30,
        autoMin: str = "10s",
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Templating:
    list: builtins.list[Template]
    def __init__(self, list: builtins.list[Template] = ...) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Time:
    start: str
    end: str
    def __init__(self, start: str, end: str) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class TimePicker:
    refreshIntervals: list[str]
    timeOptions: list[str]
    nowDelay: str | None
    hidden: bool
    def __init__(
        self,
        refreshIntervals: list[str],
        timeOptions: list[str],
        nowDelay: str | None = None,
        hidden: bool = False,
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Dashboard:
    title: str
    annotations: Annotations
    description: str
    editable: bool
    gnetId: int | None
    graphTooltip: int
    hideControls: bool
    id: int | None
    inputs: list[Any]
    links: list[Any]
    panels: list[Panel]
    refresh: str
    rows: list[Any]
    schemaVersion: int
    sharedCrosshair: bool
    style: str
    tags: list[str]
    templating: Templating
    time: Time
    timePicker: TimePicker
    timezone: str
    version: int
    uid: str | None
    def __init__(
        self,
        title: str,
        annotations: Annotations = ...,
        description: str = "",
        editable: bool = True,
        gnetId: int | None = None,
        graphTooltip: int = 0,
        hideControls: bool = False,
        id: int | None = None,
        inputs: list[Any] = ...,
        links: list[Any] = ...,
        panels: list[Panel] = ...,
        refresh: str = "10s",
        rows: list[Any] = ...,
        schemaVersion: int = 12,
        sharedCrosshair: bool = False,
        style: str = "dark",
        tags: list[str] = ...,
        templating: Templating = ...,
        time: Time = ...,
        timePicker: TimePicker = ...,
        timezone: str = "utc",
        version: int = 0,
        uid: str | None = None,
    ) -> None: ...
    def auto_panel_ids(self) -> Self: ...
    def to_json_data(self) -> dict[str, Any]: ...

# Each panel's __init__ takes its fields as keywords (PEP 692): Panel's in _PanelArgs, a
# subclass's own in a TypedDict that extends it. No panel field is required (all have defaults).
class _PanelCommonArgs(TypedDict, total=False):
    dataSource: _DataSource | None
    targets: list[Any]
    title: str
    cacheTimeout: str | None
    description: str | None
    editable: bool
    error: bool
    height: Any
    gridPos: GridPos | None
    hideTimeOverride: bool
    id: int | None
    interval: str | None
    links: list[Any]
    maxDataPoints: int | None
    minSpan: int | None
    repeat: Repeat
    span: int | None
    thresholdType: str
    timeFrom: str | None
    timeShift: str | None
    transparent: bool
    transformations: list[dict[str, Any]]
    extraJson: dict[str, Any] | None

# Panel's fields; `thresholds` stands apart because Stat retypes it.
class _PanelArgs(_PanelCommonArgs, total=False):
    thresholds: list[Any]

class _RowPanelArgs(_PanelArgs, total=False):
    panels: list[Panel]
    collapsed: bool

class _TimeSeriesArgs(_PanelArgs, total=False):
    axisPlacement: str
    axisLabel: str
    barAlignment: int
    colorMode: str
    drawStyle: str
    fillOpacity: int
    gradientMode: str
    legendDisplayMode: str
    legendPlacement: str
    legendCalcs: list[str]
    lineInterpolation: str
    lineWidth: int
    mappings: list[Any]
    overrides: list[Any]
    pointSize: int
    scaleDistributionType: str
    scaleDistributionLog: int
    spanNulls: bool
    showPoints: str
    stacking: dict[str, Any]
    tooltipMode: str
    tooltipSort: str
    unit: str
    thresholdsStyleMode: str
    valueMin: int | None
    valueMax: int | None
    valueDecimals: int | None
    axisSoftMin: int | None
    axisSoftMax: int | None

class _StatArgs(_PanelCommonArgs, total=False):
    alignment: str
    color: dict[str, Any] | None
    colorMode: str
    decimals: int | None
    format: str
    graphMode: str
    mappings: list[Any]
    noValue: str
    orientation: str
    overrides: list[Any]
    reduceCalc: str
    fields: str
    textMode: str
    # Stat redefines `thresholds` with the default "" (a list of steps is what Grafana reads).
    thresholds: list[Any] | str

class _TableArgs(_PanelArgs, total=False):
    align: str
    colorMode: str
    columns: list[Any]
    displayMode: str
    fontSize: str
    filterable: bool
    mappings: list[Any]
    overrides: list[Any]
    showHeader: bool
    unit: str
    sortBy: list[Any]

class _BarGaugeArgs(_PanelArgs, total=False):
    allValues: bool
    calc: str
    dataLinks: list[Any]
    decimals: int | None
    displayMode: Literal["lcd", "basic", "gradient"]
    format: str
    label: str | None
    limit: int | None
    max: float
    min: float
    orientation: Literal["horizontal", "vertical", "auto"]
    rangeMaps: list[Any]
    thresholdLabels: bool
    thresholdMarkers: bool
    valueMaps: list[Any]

class _PieChartv2Args(_PanelArgs, total=False):
    custom: dict[str, Any]
    colorMode: str
    legendDisplayMode: str
    legendPlacement: str
    legendValues: list[str]
    mappings: list[Any]
    overrides: list[Any]
    pieType: str
    reduceOptionsCalcs: list[str]
    reduceOptionsFields: str
    reduceOptionsValues: bool
    tooltipMode: str
    unit: str

class _StateTimelineArgs(_PanelArgs, total=False):
    alignValue: str
    colorMode: str
    fillOpacity: int
    legendDisplayMode: str
    legendPlacement: str
    lineWidth: int
    mappings: list[Any]
    overrides: list[Any]
    mergeValues: bool
    rowHeight: float
    showValue: str
    tooltipMode: str

class Panel:
    dataSource: _DataSource | None
    targets: list[Any]
    title: str
    cacheTimeout: str | None
    description: str | None
    editable: bool
    error: bool
    height: Any
    gridPos: GridPos | None
    hideTimeOverride: bool
    id: int | None
    interval: str | None
    links: list[Any]
    maxDataPoints: int | None
    minSpan: int | None
    repeat: Repeat
    span: int | None
    thresholds: list[Any]
    thresholdType: str
    timeFrom: str | None
    timeShift: str | None
    transparent: bool
    transformations: list[dict[str, Any]]
    extraJson: dict[str, Any] | None
    def __init__(self, **kwargs: Unpack[_PanelArgs]) -> None: ...
    def panel_json(self, overrides: dict[str, Any] | None) -> dict[str, Any]: ...

class RowPanel(Panel):
    panels: list[Panel]
    collapsed: bool
    def __init__(self, **kwargs: Unpack[_RowPanelArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class TimeSeries(Panel):
    axisPlacement: str
    axisLabel: str
    barAlignment: int
    colorMode: str
    drawStyle: str
    fillOpacity: int
    gradientMode: str
    legendDisplayMode: str
    legendPlacement: str
    legendCalcs: list[str]
    lineInterpolation: str
    lineWidth: int
    mappings: list[Any]
    overrides: list[Any]
    pointSize: int
    scaleDistributionType: str
    scaleDistributionLog: int
    spanNulls: bool
    showPoints: str
    stacking: dict[str, Any]
    tooltipMode: str
    tooltipSort: str
    unit: str
    thresholdsStyleMode: str
    valueMin: int | None
    valueMax: int | None
    valueDecimals: int | None
    axisSoftMin: int | None
    axisSoftMax: int | None
    def __init__(self, **kwargs: Unpack[_TimeSeriesArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Stat(Panel):
    alignment: str
    color: dict[str, Any] | None
    colorMode: str
    decimals: int | None
    format: str
    graphMode: str
    mappings: list[Any]
    noValue: str
    orientation: str
    overrides: list[Any]
    reduceCalc: str
    fields: str
    textMode: str
    def __init__(self, **kwargs: Unpack[_StatArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class Table(Panel):
    align: str
    colorMode: str
    columns: list[Any]
    displayMode: str
    fontSize: str
    filterable: bool
    mappings: list[Any]
    overrides: list[Any]
    showHeader: bool
    unit: str
    sortBy: list[Any]
    def __init__(self, **kwargs: Unpack[_TableArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class BarGauge(Panel):
    allValues: bool
    calc: str
    dataLinks: list[Any]
    decimals: int | None
    displayMode: Literal["lcd", "basic", "gradient"]
    format: str
    label: str | None
    limit: int | None
    max: float
    min: float
    orientation: Literal["horizontal", "vertical", "auto"]
    rangeMaps: list[Any]
    thresholdLabels: bool
    thresholdMarkers: bool
    valueMaps: list[Any]
    def __init__(self, **kwargs: Unpack[_BarGaugeArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class PieChartv2(Panel):
    custom: dict[str, Any]
    colorMode: str
    legendDisplayMode: str
    legendPlacement: str
    legendValues: list[str]
    mappings: list[Any]
    overrides: list[Any]
    pieType: str
    reduceOptionsCalcs: list[str]
    reduceOptionsFields: str
    reduceOptionsValues: bool
    tooltipMode: str
    unit: str
    def __init__(self, **kwargs: Unpack[_PieChartv2Args]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

class StateTimeline(Panel):
    alignValue: str
    colorMode: str
    fillOpacity: int
    legendDisplayMode: str
    legendPlacement: str
    lineWidth: int
    mappings: list[Any]
    overrides: list[Any]
    mergeValues: bool
    rowHeight: float
    showValue: str
    tooltipMode: str
    def __init__(self, **kwargs: Unpack[_StateTimelineArgs]) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

def __getattr__(name: str) -> Any: ...
