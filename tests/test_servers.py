"""The server fixtures themselves: each real server starts, answers and stores data."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests import servers

pytestmark = pytest.mark.integration


def test_influxdb1_write_and_query(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("fixture_check")
    body = b"probe,host=a value=42i 1700000000000000000\n"
    req = urllib.request.Request(
        f"{influxdb1.url}/write?db=fixture_check", data=body, method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 204
    series = influxdb1.series("SELECT value FROM probe", db="fixture_check")
    assert series[0]["values"] == [[1700000000000000000, 42]]
    # the documented site configuration (docs/site-scale.md): the TSI index (an index/ per shard)
    assert list((influxdb1.workdir / "data" / "fixture_check").glob("autogen/*/index"))


def test_victoria_metrics_influx_v2_write(victoria_metrics: servers.VictoriaMetrics) -> None:
    body = b"probe,host=a value=7 1700000000000000000\n"
    req = urllib.request.Request(
        f"{victoria_metrics.url}/api/v2/write?org=o&bucket=b", data=body, method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 204
    rows = victoria_metrics.export('{__name__="probe_value"}')
    assert rows[0]["values"] == [7] and rows[0]["timestamps"] == [1700000000000]


def test_prometheus_scrapes_itself(prometheus_factory) -> None:
    prom = prometheus_factory([])
    # Prometheus has no target; its own build info is answerable through PromQL.
    result = prom.query("vector(1)")
    assert result[0]["value"][1] == "1"
    assert time.time() - float(result[0]["value"][0]) < 60
