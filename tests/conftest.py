"""Shared fixtures: real servers on loopback, the test data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def influxdb1() -> Iterator[servers.InfluxDB1]:
    with servers.run_influxdb1() as server:
        yield server


@pytest.fixture(scope="session")
def victoria_metrics() -> Iterator[servers.VictoriaMetrics]:
    with servers.run_victoria_metrics() as server:
        yield server


@pytest.fixture
def prometheus_factory():
    """Call with scrape configs; the server is stopped at the end of the test."""
    stack: list = []

    def start(scrape_configs: list[dict], **kwargs) -> servers.Prometheus:
        ctx = servers.run_prometheus(scrape_configs, **kwargs)
        server = ctx.__enter__()
        stack.append(ctx)
        return server

    yield start
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)
