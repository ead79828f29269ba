# Hand-written stub of grafanalib 0.7.1's API (Apache-2.0) for the type checker: the attrs
# classes of grafanalib.core that hpcmon uses, with their fields as keyword arguments.
import builtins
from typing import Any, Literal, Self, TypeAlias

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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
    ) -> None: ...
    def panel_json(self, overrides: dict[str, Any] | None) -> dict[str, Any]: ...

class RowPanel(Panel):
    panels: list[Panel]
    collapsed: bool
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        panels: list[Panel] = ...,
        collapsed: bool = False,
    ) -> None: ...
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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        axisPlacement: str = "auto",
        axisLabel: str = "",
        barAlignment: int = 0,
        colorMode: str = "palette-classic",
        drawStyle: str = "line",
        fillOpacity: int = 0,
        gradientMode: str = "none",
        legendDisplayMode: str = "list",
        legendPlacement: str = "bottom",
        legendCalcs: list[str] = ...,
        lineInterpolation: str = "linear",
        lineWidth: int = 1,
        mappings: list[Any] = ...,
        overrides: list[Any] = ...,
        pointSize: int = 5,
        scaleDistributionType: str = "linear",
        scaleDistributionLog: int = 2,
        spanNulls: bool = False,
        showPoints: str = "auto",
        stacking: dict[str, Any] = ...,
        tooltipMode: str = "single",
        tooltipSort: str = "none",
        unit: str = "",
        thresholdsStyleMode: str = "off",
        valueMin: int | None = None,
        valueMax: int | None = None,
        valueDecimals: int | None = None,
        axisSoftMin: int | None = None,
        axisSoftMax: int | None = None,
    ) -> None: ...
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
    # Stat redefines `thresholds` with the default "" (a list of steps is what Grafana reads).
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        alignment: str = "auto",
        color: dict[str, Any] | None = None,
        colorMode: str = "value",
        decimals: int | None = None,
        format: str = "none",
        graphMode: str = "area",
        mappings: list[Any] = ...,
        noValue: str = "none",
        orientation: str = "auto",
        overrides: list[Any] = ...,
        reduceCalc: str = "mean",
        fields: str = "",
        textMode: str = "auto",
        thresholds: list[Any] | str = "",
    ) -> None: ...
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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        align: str = "auto",
        colorMode: str = "thresholds",
        columns: list[Any] = ...,
        displayMode: str = "auto",
        fontSize: str = "100%",
        filterable: bool = False,
        mappings: list[Any] = ...,
        overrides: list[Any] = ...,
        showHeader: bool = True,
        unit: str = "",
        sortBy: list[Any] = ...,
    ) -> None: ...
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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        allValues: bool = False,
        calc: str = "mean",
        dataLinks: list[Any] = ...,
        decimals: int | None = None,
        displayMode: Literal["lcd", "basic", "gradient"] = "lcd",
        format: str = "none",
        label: str | None = None,
        limit: int | None = None,
        max: float = 100,
        min: float = 0,
        orientation: Literal["horizontal", "vertical", "auto"] = "horizontal",
        rangeMaps: list[Any] = ...,
        thresholdLabels: bool = False,
        thresholdMarkers: bool = True,
        thresholds: list[Any] = ...,
        valueMaps: list[Any] = ...,
    ) -> None: ...
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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        custom: dict[str, Any] = ...,
        colorMode: str = "palette-classic",
        legendDisplayMode: str = "list",
        legendPlacement: str = "bottom",
        legendValues: list[str] = ...,
        mappings: list[Any] = ...,
        overrides: list[Any] = ...,
        pieType: str = "pie",
        reduceOptionsCalcs: list[str] = ...,
        reduceOptionsFields: str = "",
        reduceOptionsValues: bool = False,
        tooltipMode: str = "single",
        unit: str = "",
    ) -> None: ...
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
    def __init__(
        self,
        *,
        dataSource: _DataSource | None = None,
        targets: list[Any] = ...,
        title: str = "",
        cacheTimeout: str | None = None,
        description: str | None = None,
        editable: bool = True,
        error: bool = False,
        height: Any = None,
        gridPos: GridPos | None = None,
        hideTimeOverride: bool = False,
        id: int | None = None,
        interval: str | None = None,
        links: list[Any] = ...,
        maxDataPoints: int | None = 100,
        minSpan: int | None = None,
        repeat: Repeat = ...,
        span: int | None = None,
        thresholds: list[Any] = ...,
        thresholdType: str = "absolute",
        timeFrom: str | None = None,
        timeShift: str | None = None,
        transparent: bool = False,
        transformations: list[dict[str, Any]] = ...,
        extraJson: dict[str, Any] | None = None,
        alignValue: str = "left",
        colorMode: str = "thresholds",
        fillOpacity: int = 70,
        legendDisplayMode: str = "list",
        legendPlacement: str = "bottom",
        lineWidth: int = 0,
        mappings: list[Any] = ...,
        overrides: list[Any] = ...,
        mergeValues: bool = True,
        rowHeight: float = 0.9,
        showValue: str = "auto",
        tooltipMode: str = "single",
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

def __getattr__(name: str) -> Any: ...
