"""Shared fixtures: real servers on loopback, the test data directory."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from hpcmon.post_job.spool_format import DEFAULT_SPOOL_DIR
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


@pytest.fixture(scope="session", autouse=True)
def _host_spool_left_alone() -> Iterator[None]:
    """Every test that runs the post-job hook gives it a spool of its own: the host's default
    spool directory is never created by the suite."""
    host_spool = Path(DEFAULT_SPOOL_DIR)
    existed = host_spool.exists()
    yield
    assert existed or not host_spool.exists(), f"a test wrote into the host's {host_spool}"


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


# ---------------------------------------------------------------- selection and scheduling
# Fixtures that start a real server: a test using one (directly or through another fixture) is
# an integration test, left out by `make check`.
SERVER_FIXTURES = frozenset({"influxdb1", "victoria_metrics", "prometheus_factory"})

# `make test` runs pytest-xdist (-n 4 --dist loadscope --no-loadscope-reorder): the scheduler
# below gives each worker whole modules (a module's fixtures are set up once, on one worker), and
# the modules that run Slurm one after another on one worker, so one private Slurm at a time runs
# jobs on this host while the other workers run the rest (two would race for the cgroups of their
# like-named nodes). The slowest go first (seconds from `pytest --durations=0`, 2-core machine,
# 2026-11-29): they mostly wait on servers' clocks, which the other workers fill with work.
SLURM_MODULES = frozenset(
    {"test_slurm_epilog.py", "test_slurm_collector.py", "test_slurm_cluster.py", "test_demo.py"}
)
SLOWEST_FIRST = (
    "tests/test_site_scale.py",  # ~215 s, most of it waiting for scrapes and rule evaluations
    "slurm",  # ~170 s
    "tests/test_install.py",
    "tests/dashboards/test_dashboards_prometheus.py",
    "tests/post_job/test_job_diagnosis.py",
    "tests/report/test_report_integration.py",
    "tests/report/test_report_database.py",
    "tests/report/test_report_api.py",
    "tests/exporter/test_series_budget.py",
    "tests/deploy/test_checkov.py",
    "tests/exporter/test_jobstats_stale_sample.py",
    "tests/exporter/test_geopm_integration.py",
    "tests/exporter/test_jobstats_prometheus.py",
    "tests/deploy/test_helm_chart.py",
    "tests/post_job/test_post_job_kill.py",
    "tests/post_job/test_post_job_migrate.py",
)


def schedule_scope(nodeid: str) -> str:
    """The unit of work of a test: its module (path from the repository's root), or "slurm"."""
    module = nodeid.split("::", 1)[0]
    return "slurm" if Path(module).name in SLURM_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling:

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.integration)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {scope: place for place, scope in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(schedule_scope(item.nodeid), len(rank)))
