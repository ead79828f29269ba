"""Sharded collection and alerting on real engines: two vmagent instances in cluster mode scrape
a fleet of real exporters (20 replayed OSTs with distinct target names, plus a compute node, a
broken exporter and a dead target) into VictoriaMetrics, vmalert evaluates the generated rules
there, and a single Prometheus scrapes the same fleet for comparison."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devtools.servers import (
    Prometheus,
    VictoriaMetrics,
    VMAgent,
    VMAlert,
    run_prometheus,
    run_victoria_metrics,
    run_vmagent,
    run_vmalert,
)
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint
from tests.dashboards.test_dashboards_influxql import INPUTS, JOB, ROOT
from tests.fleet import AlertReceiver, fleet_sections, fleet_target, run_exporters
from tests.live_stack import SCRAPE_JOB, Replay, run_live_exporters, scrape_config

pytestmark = pytest.mark.integration

FLEET_SIZE = 20
SPIKE_TARGET = fleet_target(0)
SPIKE_JOB = "43"  # a real job id of the capture; on the spike target it writes and reads
SPIKE_OPS_PER_SECOND = 65_536  # x 1 MiB on each of its operations: a 64 GiB/s spike
SPIKE_START = 50.0  # seconds after the replay starts: the 1-minute baseline exists by then
INTERVAL = 2.0  # scrape and rule interval, seconds
SITE_CONFIG = {
    "jobid_labels": ["uid"],
    "rule_interval": "2s",
    "longterm_interval": "2s",
    "thresholds": {  # the default thresholds; a baseline and `for` a test can wait for
        "target_spike_baseline": "1m",
        "target_spike_baseline_offset": "10s",
        # A fifth of the baseline's 30 evaluations must have recorded it (the default half is
        # promtool-tested): vmalert on a loaded 2-core machine runs a 2 s group every 5-7.5 s.
        "target_spike_min_baseline_coverage": 0.2,
        "target_spike_for": "0s",
        "jobstats_down_for": "0s",  # the broken exporter and the dead target keep these
        "geopm_down_for": "0s",  # two firing all along
    },
}
VALUES = {"__rate_interval": "1m", "__range": "2m", "__interval": "10s", "__interval_ms": "10000"}


@dataclass
class Site:
    vm: VictoriaMetrics
    agents: list[VMAgent]
    vmalert: VMAlert
    prometheus: Prometheus
    receiver: AlertReceiver
    targets: list[str]
    config: dashboards_config.Config
    started: float


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("site")
    config_path = workdir / "dashboards.yaml"
    config_path.write_text(yaml.safe_dump(SITE_CONFIG))
    config = dashboards_config.load(config_path)
    generate.write(config, workdir / "generated")
    rule_files = [str(p) for p in sorted((workdir / "generated" / "rules").glob("*.yaml"))]

    files = [workdir / f"fleet-{i}.txt" for i in range(FLEET_SIZE)]
    spike = Replay(
        {files[0]: fleet_sections(0)},
        {SPIKE_JOB: SPIKE_OPS_PER_SECOND},
        storm_start=SPIKE_START,
        storm_request_bytes=1 << 20,
    )
    steady = Replay({path: fleet_sections(i) for i, path in enumerate(files) if i})
    fleet_args = [
        ["--jobstats.source=file", f"--jobstats.path={path}", "--jobstats.interval=1"]
        for path in files
    ]
    for replay in (spike, steady):
        replay.start()
    try:
        with (
            run_live_exporters(workdir) as live,
            run_exporters(fleet_args, workdir) as fleet,
            run_victoria_metrics() as vm,
            AlertReceiver() as receiver,
        ):
            targets = [e.address for e in fleet] + live.addresses
            scrape = scrape_config(targets)
            cluster = ["-promscrape.cluster.membersCount=2"]
            write = f"{vm.url}/api/v1/write"
            with (
                run_vmagent(scrape, write, [*cluster, "-promscrape.cluster.memberNum=0"]) as a0,
                run_vmagent(scrape, write, [*cluster, "-promscrape.cluster.memberNum=1"]) as a1,
                run_vmalert(rule_files, vm.url, receiver.url) as vmalert,
                run_prometheus(scrape, scrape_interval="2s", rule_files=rule_files) as prom,
            ):
                yield Site(vm, [a0, a1], vmalert, prom, receiver, targets, config, time.time())
    finally:
        for replay in (spike, steady):
            replay.halt.set()
            replay.join()


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _scraped_by(agent: VMAgent) -> set[str]:
    return {t["labels"]["instance"] for t in agent.targets()}


def test_every_target_scraped_exactly_once(site: Site) -> None:
    shares = [_scraped_by(agent) for agent in site.agents]
    assert shares[0] and shares[1], shares
    assert shares[0].isdisjoint(shares[1])
    assert shares[0] | shares[1] == set(site.targets)
    assert len(site.targets) >= FLEET_SIZE + 3

    # In the store, each target's `up` has one sample per scrape interval, not two.
    def stored() -> set[str]:
        site.vm.flush()
        return {s["metric"]["instance"] for s in site.vm.query(f'up{{job="{SCRAPE_JOB}"}}')}

    deadline = time.monotonic() + 60
    while stored() != set(site.targets) and time.monotonic() < deadline:
        time.sleep(1)
    assert stored() == set(site.targets), set(site.targets) ^ stored()
    time.sleep(21)
    site.vm.flush()
    counts = site.vm.query(f'count_over_time(up{{job="{SCRAPE_JOB}"}}[20s])')
    assert {c["metric"]["instance"] for c in counts} == set(site.targets)
    for count in counts:
        assert 8 <= float(count["value"][1]) <= 11, count


def test_injected_spike_fires_on_victoria_metrics(site: Site) -> None:
    """The spike on one fleet target fires LustreTargetIOSpike in vmalert (recorded in the store
    as ALERTS, sent to the receiver with its drill-down link) for that target only, and the
    same rules fire it on the single Prometheus. It fires while the 5-minute rate is 4x the
    average of the minute before: checked over the store's history, not at one instant."""
    fired = 'max_over_time(ALERTS{alertname="LustreTargetIOSpike", alertstate="firing"}[10m])'
    stored = _wait(lambda: site.vm.flush() or site.vm.query(fired), 180, "ALERTS in the store")
    assert {s["metric"]["target"] for s in stored} == {SPIKE_TARGET}
    sent = _wait(
        lambda: [
            a for a in site.receiver.received if a["labels"]["alertname"] == "LustreTargetIOSpike"
        ],
        30,
        "the notification",
    )
    assert {a["labels"]["target"] for a in sent} == {SPIKE_TARGET}
    link = sent[0]["annotations"]["dashboard"]
    assert "/d/hpcmon-overview/" in link and f"var-target={SPIKE_TARGET}" in link
    prom = site.prometheus.wait_for(fired, timeout=60)
    assert {s["metric"]["target"] for s in prom} == {SPIKE_TARGET}


def _dashboard_queries(config) -> list[tuple[str, str, str]]:
    return [
        (uid, where, query)
        for uid, board in generate.dashboards(config).items()
        for where, query in lint.prometheus_queries(board)
    ]


def _run(server, query: str, values: dict[str, str], at: float) -> list[dict]:
    selector = lint.label_values_selector(query)
    if selector:
        query = f"count by ({selector[1]}) ({selector[0]})"
    return server.query(lint.substitute_variables(query, values), at=at)


# The replay grows counters in whole units: over a 1-minute window a slow counter can show one
# step more on one scraper than on the other, 1/60 per second; two steps are allowed.
COUNTER_STEP_TOLERANCE = 2 / 60


def _close(a: float, b: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=COUNTER_STEP_TOLERANCE)


@pytest.mark.timeout(600)  # waits out 150 s of history, then asks both engines every query
def test_dashboard_queries_same_on_victoria_metrics_as_prometheus(site: Site) -> None:
    """Every dashboard PromQL returns data from VictoriaMetrics (fed by the vmagent cluster,
    ALERTS written back by vmalert) and the same series as from the single Prometheus, with
    values within 10% (the two scrapers sample growing counters at different moments)."""
    # Series older than the longest window (1 min rates, 2 min ranges): Prometheus does not
    # extrapolate a rate() back past a series' first sample, VictoriaMetrics does not need to.
    time.sleep(max(0.0, site.started + 150 - time.time()))
    site.vm.flush()
    at = time.time() - 5
    empty, different = [], []
    for uid, where, query in _dashboard_queries(site.config):
        values = dict(VALUES)
        if uid == "hpcmon-job":
            values["jobid"] = SPIKE_JOB
        from_vm = _run(site.vm, query, values, at)
        if not from_vm:
            empty.append(f"{uid} {where}")
            continue
        if any(word in query for word in ("ALERTS", "topk", "scrape_duration", "hpcmon:")):
            continue  # alert and rule engines, near-ties in top-N, scrape times differ by nature
        # A scrape that one of the two missed or made late (a loaded machine) shifts one
        # instant's rate by up to a tenth more: a real difference of the engines shows at every
        # instant, so a query that differs is compared again 7 and 14 s earlier: it must agree
        # at one of the three instants.
        differences = _differences(site, query, values, at, from_vm)
        for step in (1, 2):
            if differences:
                differences = _differences(site, query, values, at - 7 * step) and differences
        if differences:
            different.append(f"{uid} {where}: {differences}")
    assert not empty and not different, "\n".join(
        ["no data from VictoriaMetrics:", *empty, "different:", *different]
    )


def _differences(
    site: Site, query: str, values: dict[str, str], at: float, from_vm: list | None = None
) -> list[str]:
    """How one query's answers at one instant differ between VictoriaMetrics (``from_vm``
    when already asked) and Prometheus."""

    def by_labels(result):
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}

    vm_values = by_labels(from_vm if from_vm is not None else _run(site.vm, query, values, at))
    prom_values = by_labels(_run(site.prometheus, query, values, at))
    if set(vm_values) != set(prom_values):
        return [f"series {set(vm_values) ^ set(prom_values)}"]
    # Subqueries (energy): VictoriaMetrics counts both ends of `[2m:10s]`, 13 steps to
    # Prometheus' 12 (docs/site-scale.md).
    tolerance = 0.2 if ":$__interval]" in query else 0.1
    return [
        f"{labels}: {value} vs {prom_values[labels]}"
        for labels, value in vm_values.items()
        if not _close(value, prom_values[labels], tolerance)
    ]


def _gaps(vm: VictoriaMetrics, start: float, end: float) -> dict[str, float]:
    """Largest gap between consecutive `up` samples of each target in [start, end]."""
    gaps = {}
    for series in vm.export(f'up{{job="{SCRAPE_JOB}"}}'):
        times = [t / 1000 for t in series["timestamps"] if start <= t / 1000 <= end]
        times.sort()
        gaps[series["metric"]["instance"]] = max(
            (b - a for a, b in zip(times, times[1:], strict=False)), default=math.inf
        )
    return gaps


def test_no_sample_lost_while_victoria_metrics_restarts(site: Site) -> None:
    before = time.time()
    time.sleep(4)
    site.vm.stop()
    time.sleep(10)  # vmagent keeps scraping into its on-disk queue
    site.vm.start_again()
    restarted = time.time()
    time.sleep(12)  # the queues drain
    site.vm.flush()
    gaps = _gaps(site.vm, before, restarted + 6)
    assert set(gaps) == set(site.targets)
    assert max(gaps.values()) <= 2 * INTERVAL + 1, gaps


def test_restarted_vmagent_takes_its_share_back(site: Site) -> None:
    agent, other = site.agents[1], site.agents[0]
    share, other_share = _scraped_by(agent), _scraped_by(other)
    agent.stop()
    time.sleep(6)
    assert _scraped_by(other) == other_share  # no takeover: sharding is by hash, not by health
    agent.start_again()
    restarted = time.time()
    _wait(lambda: _scraped_by(agent) == share, 30, "its targets back")
    time.sleep(3 * INTERVAL)
    site.vm.flush()
    fresh = {
        series["metric"]["instance"]
        for series in site.vm.export(f'up{{job="{SCRAPE_JOB}"}}')
        if max(series["timestamps"]) / 1000 > restarted
    }
    assert share <= fresh


def _hook(url: str, database: str, spool: Path) -> None:
    command = [
        sys.executable, "-m", "hpcmon.post_job", "--job-id", JOB, "--cluster", "demo", *INPUTS,
        "--influx.v1-url", url, "--influx.database", database, "--spool-dir", str(spool),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


def test_post_job_points_queryable_in_victoria_metrics(site: Site, influxdb1, tmp_path) -> None:
    """The hook writes the same job to VictoriaMetrics' InfluxDB line-protocol endpoint and to
    InfluxDB 1.6.7; every numeric field the job drill-down reads (InfluxDB says which are
    numeric) is in VictoriaMetrics as `<measurement>_<field>{tags}`. String fields (file names,
    executable, NA reasons) are not stored there: see docs/site-scale.md."""
    _hook(site.vm.url, "hpcmon", tmp_path / "spool-vm")
    influxdb1.create_database("hpcmon_site")
    _hook(influxdb1.url, "hpcmon_site", tmp_path / "spool-influx")
    site.vm.flush()
    board = generate.dashboards(site.config)["hpcmon-job"]
    checked, missing = 0, []
    for where, query in lint.influxql_queries(board):
        for measurement, field in lint.influxql_fields(query):
            keys = influxdb1.series(f'SHOW FIELD KEYS FROM "{measurement}"', db="hpcmon_site")
            types = dict(keys[0]["values"]) if keys else {}
            if types.get(field) not in ("float", "integer", "boolean"):
                continue  # a tag, an alias or a string field
            checked += 1
            # the only job written there; its id is a string field, which VM does not keep
            if not site.vm.export(f'{measurement}_{field}{{cluster="demo", db="hpcmon"}}'):
                missing.append(f"{where}: {measurement}_{field}")
    assert checked >= 30
    assert not missing, "\n".join(missing)
