"""Shared fixtures: real servers on loopback, the test data directory."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import servers

# Property tests: deterministic by default (CI and `make test`: fixed seed, no example database
# written into the repository); HYPOTHESIS_PROFILE=explore searches new examples each run.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,  # tests never assert timings: a loaded machine must not fail an example
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=1000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Commands run in-process (the epilog, the exporter's CLI) configure the root logger with
    a handler on the sys.stderr of their test, which pytest closes afterwards; a later test's
    log line would then fail in that handler. Each test gets the root logger back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


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
