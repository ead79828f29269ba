"""Every PromQL of the generated dashboards and rules returns data on a real Prometheus 2.42 that
scrapes the real exporter (replayed captures, powercap tree, jobs directory) and evaluates the
generated rules; every metric name they use is one the exporter exports."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import promql_parser
import pytest
import yaml

from devtools.servers import http_get
from hpcmon.common import metric_names
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint, rules
from tests.live_stack import SCRAPE_JOB, SLURM_JOBS, LiveStack, run_live_stack

pytestmark = pytest.mark.integration

# Thresholds at which every alert holds on the live data, firing at once: each alert's
# expression is then proven to return series on real data, not only to parse.
LIVE_CONFIG = {
    "jobid_labels": ["uid"],
    "rule_interval": "1s",
    "longterm_interval": "1s",
    "thresholds": {
        "target_spike_factor": 0,
        "target_spike_min_bytes_per_second": 0,
        "target_spike_for": "0s",
        "target_spike_baseline": "10m",
        "target_spike_baseline_offset": "3s",
        "target_spike_min_baseline_coverage": 0,  # the live site is seconds old
        "job_dominates_share": 0.5,
        "job_dominates_min_bytes_per_second": 0,
        "job_dominates_for": "0s",
        "metadata_storm_for": "0s",  # the storm job does 12,000 ops/s per operation
        "small_writes_ops_per_second": 100,  # ... and 4 KiB writes; rate() over 5 min
        "small_writes_for": "0s",  # of a young series is far below the 12,000/s
        "jobstats_down_for": "0s",
        "collector_failing_for": "0s",
        "geopm_down_for": "0s",
        "postjob_backlog_age_seconds": 0,  # the live node's spool holds a batch
        "postjob_backlog_for": "0s",
    },
}
# Health alerts that need a failure the live site does not have.
# a collector raising, squeue failing: covered by promtool tests
NEEDS_A_FAULT = {"HpcmonCollectorFailing", "SlurmJobListDown"}
PROMETHEUS_OWN = {"up", "ALERTS", "scrape_duration_seconds"}
# Exported only where the hardware has them (no GPU on the test node).
HARDWARE_DEPENDENT = {metric_names.GPU_ENERGY}
VALUES = {"__rate_interval": "15s", "__range": "2m", "__interval": "5s", "__interval_ms": "5000"}


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, dashboards_config.Config]:
    path = tmp_path_factory.mktemp("config") / "live.yaml"
    path.write_text(yaml.safe_dump(LIVE_CONFIG))
    live = dashboards_config.load(path)
    # A site whose Lustre series give Slurm's id in slurm_job (a group of the jobid pattern):
    # the same dashboards, joined with Slurm's job list on that label.
    slurm_job = dashboards_config.replace(
        live, jobid_labels=("uid", "slurm_job"), slurm_jobid_label="slurm_job"
    )
    return {"default": dashboards_config.load(None), "live": live, "slurm_job": slurm_job}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, configs) -> Iterator[LiveStack]:
    workdir = tmp_path_factory.mktemp("live")
    out = workdir / "generated"
    generate.write(configs["live"], out)
    rule_files = [str(p) for p in sorted((out / "rules").glob("*.yaml"))]
    with run_live_stack(workdir, rule_files) as stack:
        prom = stack.prometheus
        # Two samples of every job (rates), the rules evaluated, alerts firing.
        prom.wait_for(f'{metric_names.JOB_WRITE_RATE}{{jobid="{stack.job}"}}', timeout=60)
        prom.wait_for(rules.JOB_POWER, timeout=60)
        prom.wait_for('ALERTS{alertname="LustreJobMetadataStorm", alertstate="firing"}', 60)
        prom.wait_for(f"{metric_names.GEOPM_UP} == 0", timeout=30)
        prom.wait_for(f'up{{job="{SCRAPE_JOB}"}} == 0', timeout=30)
        prom.wait_for(f"count({metric_names.SLURM_JOB_INFO}) == 4", timeout=30)  # 2 jobs x 2
        prom.wait_for(rules.ACCOUNT_POWER, timeout=60)
        yield stack


def _queries(config: dashboards_config.Config) -> Iterator[tuple[str, str, str]]:
    for uid, board in generate.dashboards(config).items():
        for where, query in lint.prometheus_queries(board):
            yield uid, where, query


def _run(prom, query: str, values: dict[str, str]) -> list[dict]:
    selector = lint.label_values_selector(query)
    if selector:  # Grafana's label_values(): series of the selector carrying the label
        expr, label = selector
        query = f"count by ({label}) ({expr})"
    return prom.query(lint.substitute_variables(query, values))


@pytest.mark.parametrize("config_name", ["default", "live", "slurm_job"])
def test_every_dashboard_promql_returns_data(stack: LiveStack, configs, config_name) -> None:
    prom = stack.prometheus
    empty = []
    count = 0
    for uid, where, query in _queries(configs[config_name]):
        values = dict(VALUES)
        if uid == "hpcmon-job":
            values["jobid"] = stack.job
        count += 1
        if not _run(prom, query, values):
            empty.append(f"{uid} {where}: {lint.substitute_variables(query, values)}")
    assert count > 20
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_job_dashboard_power_splits_shared_node(stack: LiveStack, configs) -> None:
    """Two jobs on the node: each is given half of the node's power."""
    prom = stack.prometheus
    node = prom.query(rules.NODE_POWER)
    jobs = prom.query(rules.JOB_POWER)
    assert len(node) == 1 and len(jobs) == 2
    node_watts = float(node[0]["value"][1])
    assert node_watts > 0  # a young series' rate() is lower than the injected 180 W
    for job in jobs:
        assert float(job["value"][1]) == pytest.approx(node_watts / 2, rel=1e-6)


def test_every_rule_returns_data(stack: LiveStack, configs) -> None:
    prom = stack.prometheus
    files = rules.rule_files(configs["live"])
    empty = []
    for content in files.values():
        for rule in content["groups"][0]["rules"]:
            name = rule.get("record") or rule["alert"]
            if name in NEEDS_A_FAULT:
                selector = rule["expr"].split("==")[0]
                assert prom.query(selector), f"{name}: {selector} has no series"
                continue
            if not prom.query(rule["expr"]):
                empty.append(f"{name}: {rule['expr']}")
            if "record" in rule and not prom.query(rule["record"]):
                empty.append(f"recorded {name}")
    assert not empty, "rules without data:\n" + "\n".join(empty)
    firing = {r["metric"]["alertname"] for r in prom.query('ALERTS{alertstate="firing"}')}
    assert firing >= set(rules.ALERT_NAMES) - NEEDS_A_FAULT


def _metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects, from its syntax tree."""
    found: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                found.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    found.update(re.split(r"\|", matcher.value))
            return
        for attribute in ("lhs", "rhs", "expr", "vector_selector", "param"):
            child = getattr(node, attribute, None)
            if child is not None and not isinstance(child, str | int | float):
                visit(child)
        for arg in getattr(node, "args", None) or []:
            visit(arg)

    visit(promql_parser.parse(expr))
    return found


def test_dashboards_and_rules_use_only_exported_metrics(stack: LiveStack, configs) -> None:
    """Renaming a metric in the exporter breaks this test: the names the dashboards and rules
    use come from hpcmon.common.metric_names, and each of them is in the real exporter's output."""
    exposition = b""
    for exporter in (stack.exporter, stack.broken_exporter, *stack.controllers):
        status, body = http_get(f"http://{exporter.address}/metrics")
        assert status == 200
        exposition += body
    exported = set(re.findall(rb"^# TYPE (\S+) ", exposition, re.M))
    exported = {name.decode() for name in exported}
    exported |= {n + "_total" for n in exported}  # prometheus-client's counter TYPE lines
    missing = set(metric_names.ALL) - exported - HARDWARE_DEPENDENT
    assert not missing, f"metric names no longer exported: {missing}"

    recorded = {
        r["record"]
        for r in rules.recording_rules(configs["live"]) + rules.longterm_rules(configs["live"])
    }
    used: set[str] = set()
    for config in configs.values():
        for _, _, query in _queries(config):
            selector = lint.label_values_selector(query)
            used |= _metric_names(lint.substitute_variables(selector[0] if selector else query))
        for content in rules.rule_files(config).values():
            for rule in content["groups"][0]["rules"]:
                used |= _metric_names(rule["expr"])
    unknown = used - set(metric_names.ALL) - recorded - PROMETHEUS_OWN
    assert not unknown, f"names outside hpcmon.metric_names: {unknown}"


def test_grafana_variables_list_real_values(stack: LiveStack, configs) -> None:
    board = generate.dashboards(configs["live"])["hpcmon-overview"]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        selector = lint.label_values_selector(variable["query"])
        assert selector is not None, variable["query"]
        expr, label = selector
        values = {r["metric"].get(label) for r in _run(stack.prometheus, variable["query"], {})}
        assert values - {None, ""}, f"variable {variable['name']} lists nothing"


# Stat panels of the health row that count failures: 0, not "No data", on a healthy system.
FAILURE_STATS = {"Parse errors", "Dropped series", "Nodes without power source",
                 "Firing hpcmon alerts"}  # fmt: skip


def test_health_row_on_a_healthy_exporter(prometheus_factory, tmp_path) -> None:
    """Issue 21: a healthy exporter (a clean capture, nothing cut, an empty post-job spool):
    every query of the overview's health row returns data, and every stat that counts
    failures shows 0 (counters that appear only after a first failure must not empty it)."""
    from tests.exporter.test_jobstats_collector import HP_OST
    from tests.servers import run_exporter

    args = ["--jobstats.source=file", f"--jobstats.path={HP_OST}", "--jobstats.interval=1",
            "--collector.postjob", f"--postjob.spool-dir={tmp_path / 'spool'}"]  # fmt: skip
    with run_exporter(args, tmp_path) as exporter:
        prom = prometheus_factory(
            [{"job_name": "hpcmon-jobstats", "static_configs": [{"targets": [exporter.address]}]}],
            scrape_interval="1s",
        )
        prom.wait_for(f"{metric_names.POSTJOB_SPOOL_LINES}", timeout=60)
        prom.wait_for(f"count_over_time({metric_names.JOBSTATS_JOBS}[1m]) > 2", timeout=60)
        board = generate.dashboards(dashboards_config.Config())["hpcmon-overview"]
        panels = list(lint.panels(board))
        first = next(i for i, p in enumerate(panels) if p.get("type") == "row"
                     and p.get("title") == "Health")  # fmt: skip
        health = [p for p in panels[first + 1 :] if p.get("type") != "row"]
        titles = {p["title"] for p in health}
        assert FAILURE_STATS <= titles and "Post-job backlog: lines waiting" in titles
        values = {**VALUES, "instance": ".*"}
        for panel in health:
            if panel["type"] == "table" and panel["title"] in FAILURE_STATS:
                continue  # the list of firing alerts is rightly empty
            for target in panel.get("targets", []):
                found = _run(prom, target["expr"], values)
                assert found, f"{panel['title']}: {target['expr']} has no data"
                if panel["title"] in FAILURE_STATS:
                    assert [r["value"][1] for r in found] == ["0"], (panel["title"], found)


# Issue 32: the real Slurm jobs of the live site (SLURM_JOBS), listed by two controllers.
JOB_TABLES = ("Top jobs by write rate", "Top jobs by read rate",
              "Top jobs by metadata operations", "Energy per job over the time range")  # fmt: skip


def _panel_queries(config, uid: str, titles) -> dict[str, str]:
    board = generate.dashboards(config)[uid]
    return {p["title"]: p["targets"][0]["expr"] for p in lint.panels(board) if p["title"] in titles}


def test_storming_job_alert_names_its_slurm_job(stack: LiveStack) -> None:
    """The storm job is a Slurm job listed by both controllers: its alert fires once, with
    its user, account and job name as squeue gives them."""
    job = SLURM_JOBS[stack.job]
    assert len(stack.prometheus.query(f'{metric_names.SLURM_JOB_INFO}{{jobid="{stack.job}"}}')) == 2
    alerts = stack.prometheus.query(
        f'ALERTS{{alertname="LustreJobMetadataStorm", alertstate="firing", jobid="{stack.job}"}}'
    )
    assert [
        (a["metric"].get("user"), a["metric"].get("account"), a["metric"].get("job_name"))
        for a in alerts
    ] == [(job.user, job.account, job.name)]


@pytest.mark.parametrize("config_name", ["default", "live", "slurm_job"])
def test_job_tables_name_the_jobs_and_follow_account_and_user(
    stack: LiveStack, configs, config_name
) -> None:
    """The overview's top-job tables: under All, Slurm's jobs with their names and the jobs
    Slurm does not list without; an account or a user chosen: its jobs only."""
    queries = _panel_queries(configs[config_name], "hpcmon-overview", JOB_TABLES)
    assert set(queries) == set(JOB_TABLES)
    names = {jobid: (j.user, j.account, j.name) for jobid, j in SLURM_JOBS.items()}
    for title, query in queries.items():
        rows = _run(stack.prometheus, query, dict(VALUES))
        seen = {r["metric"]["jobid"]: r["metric"] for r in rows}
        for jobid, labels in seen.items():
            shown = (labels.get("user"), labels.get("account"), labels.get("job_name"))
            assert shown == names.get(jobid, (None, None, None)), (title, jobid, labels)
        if title != "Energy per job over the time range":  # only Slurm's jobs use power
            assert set(seen) - set(SLURM_JOBS), f"{title}: no job Slurm does not list"
        for jobid, job in SLURM_JOBS.items():
            for variable, value in (("account", job.account), ("user", job.user)):
                chosen = _run(stack.prometheus, query, {**VALUES, variable: value})
                assert [r["metric"]["jobid"] for r in chosen] == [jobid], (title, variable)


def test_account_and_user_sums_are_their_jobs_sums(stack: LiveStack) -> None:
    """Each account and user of the live site has one Slurm job, listed twice (a controller
    pair): its recorded bytes, metadata operations and power equal its job's, once."""
    prom = stack.prometheus
    at = time.time() - 3  # a past instant: every rule of the group evaluated at it

    def values(query: str) -> dict[str, float]:
        found = prom.query(query, at=at)
        return {r["metric"].get("direction", ""): float(r["value"][1]) for r in found}

    for jobid, job in SLURM_JOBS.items():
        for owner, name in (("account", job.account), ("user", job.user)):
            pairs = (
                (f"hpcmon:lustre_{owner}_bytes:rate5m", rules.JOB_BYTES),
                (f"hpcmon:lustre_{owner}_metadata_ops:rate5m", rules.JOB_METADATA_OPS),
                (f"hpcmon:lustre_{owner}_bytes:avg5m", rules.LONGTERM_JOB_BYTES),
                (f"hpcmon:lustre_{owner}_metadata_ops:avg5m", rules.LONGTERM_JOB_METADATA_OPS),
                (f"hpcmon:{owner}_power_watts:avg5m", rules.LONGTERM_JOB_POWER),
            )
            for summed, per_job in pairs:
                total = values(f'{summed}{{{owner}="{name}"}}')
                alone = values(f'{per_job}{{jobid="{jobid}"}}')
                assert total and total.keys() == alone.keys(), (summed, total, alone)
                for key, value in total.items():
                    assert value == pytest.approx(alone[key], rel=1e-9), (summed, key)
