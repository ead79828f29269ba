# Hand-written stub of grafanalib 0.7.1's API (Apache-2.0) for the type checker: the InfluxDB
# query target of grafanalib.influxdb, with its fields as keyword arguments.
from typing import Any

TIME_SERIES_TARGET_FORMAT: str

class InfluxDBTarget:
    alias: str
    format: str
    datasource: str | dict[str, Any]
    measurement: str
    query: str
    rawQuery: bool
    refId: str
    def __init__(
        self,
        alias: str = "",
        format: str = "time_series",
        datasource: str | dict[str, Any] = "",
        measurement: str = "",
        query: str = "",
        rawQuery: bool = True,
        refId: str = "",
    ) -> None: ...
    def to_json_data(self) -> dict[str, Any]: ...

def __getattr__(name: str) -> Any: ...
