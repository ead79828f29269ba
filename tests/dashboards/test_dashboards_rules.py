"""The generated rules, proven by Prometheus' own promtool: `check rules`, and `test rules` for
every alert (fires on a spike, silent just below its threshold, resolves), the same alerts from
the exporter's counters (rate) and from its per-second gauges (avg_over_time), and the energy
attribution rule for nodes shared by several jobs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, rules
from hpcmon.dashboards.config import GIB, MIB

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make servers)")

MINUTE = 60
JOBSTATS = 'instance="oss1:19325", job="hpcmon-jobstats"'
DASHBOARD = "http://localhost:3000/d"


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None  # the module is skipped without it
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _write_rules(tmp_path: Path, config: dashboards_config.Config) -> list[str]:
    out = tmp_path / "generated"
    generate.write(config, out)
    return [str(p) for p in sorted((out / "rules").glob("*.yaml"))]


class Series:
    """Input series of a promtool test from per-minute rates: the exporter's counter (value
    accumulated at each minute) and its gauge (the rate itself), as the exporter shows both."""

    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, name: str, labels: str, values: Sequence[float | None]) -> None:
        text = " ".join("_" if v is None else f"{v:.10g}" for v in values)  # _: no sample
        self.items.append({"series": f"{name}{{{labels}}}", "values": text})

    def rate(self, counter: str, gauge: str, labels: str, rates: list[float], **gauge_labels):
        total, counts = 0.0, []
        for per_second in rates:
            counts.append(total)
            total += per_second * MINUTE
        self.add(counter, labels, counts)
        extra = "".join(f', {k}="{v}"' for k, v in gauge_labels.items())
        self.add(gauge, labels + extra, rates)


def profile(*segments: tuple[float, int]) -> list[float]:
    """(rate, minutes) segments, one value per minute."""
    return [rate for rate, minutes in segments for _ in range(minutes)]


def _bytes(series: Series, direction: str, labels: str, rates: list[float]) -> None:
    series.rate(
        f"lustre_job_{direction}_bytes_total",
        f"lustre_job_{direction}_bytes_per_second",
        labels,
        rates,
    )


def _link(uid: str, query: str, start: int, lookback: int) -> str:
    """The alert's drill-down URL as the template renders it at time `start` (seconds)."""
    return (
        f"{DASHBOARD}/{uid}/{uid}?{query}&from={(start - lookback) * 1000}"
        f"&to={(start + 300) * 1000}"
    )


def _samples(record: str, *expected: tuple[str, float]) -> dict:
    """A promtool promql_expr_test: the recorded series' samples at 10 min."""
    return {
        "expr": record,
        "eval_time": "10m",
        "exp_samples": [
            {"labels": f"{record}{{{labels}}}", "value": value} for labels, value in expected
        ],
    }


def _run(tmp_path: Path, config: dashboards_config.Config, tests: list[dict]) -> None:
    files = _write_rules(tmp_path, config)
    unit = {"rule_files": files, "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(unit, sort_keys=False, width=1000))
    result = _promtool("test", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


CONFIGS = {
    "counters": dashboards_config.Config(),
    "gauges": dashboards_config.Config(rates_from="gauges"),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request) -> dashboards_config.Config:
    return CONFIGS[request.param]


def test_promtool_check_rules_default_and_custom(tmp_path: Path) -> None:
    custom = dashboards_config.replace(
        dashboards_config.Config(),
        cluster_label="cluster",
        jobid_labels=("uid", "exe", "slurm_job"),
        slurm_jobid_label="slurm_job",
        rates_from="gauges",
    )
    for index, config in enumerate([dashboards_config.Config(), custom]):
        files = _write_rules(tmp_path / str(index), config)
        result = _promtool("check", "rules", *files, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 14 rules found" in result.stdout  # recording
        assert f"SUCCESS: {len(rules.ALERT_NAMES)} rules found" in result.stdout  # alerts
        assert "SUCCESS: 16 rules found" in result.stdout  # long-term


def test_promtool_check_rules_catches_a_broken_rule(tmp_path: Path) -> None:
    """The check is real: a rule file with a syntax error fails it."""
    files = _write_rules(tmp_path, dashboards_config.Config())
    broken = Path(files[0])
    broken.write_text(broken.read_text().replace("expr: ", "expr: sum(", 1))
    assert _promtool("check", "rules", *files, cwd=tmp_path).returncode != 0


@pytest.mark.slow  # promtool evaluates 25 h of samples: not in `make check`
def test_target_io_spike(tmp_path: Path, config) -> None:
    """25 h at 100 MiB/s, then 15 min at a spike, then back. The spike to 1.5 GiB/s fires;
    0.99 GiB/s (>= 4x but under 1 GiB/s), 1.5 GiB/s on a 400 MiB/s baseline (3.75x) and
    1.5 GiB/s on a target seen only for the last hour (no 24 h baseline) stay silent;
    all resolve once the spike is over."""
    base_minutes = 25 * 60
    series = Series()
    targets = {
        "fs-OST0000": (100 * MIB, 1.5 * GIB),
        "fs-OST0001": (100 * MIB, 0.99 * GIB),
        "fs-OST0002": (400 * MIB, 1.5 * GIB),
    }
    for target, (base, spike) in targets.items():
        labels = f'{JOBSTATS}, component="ost", target="{target}", jobid="1"'
        _bytes(series, "write", labels, profile((base, base_minutes), (spike, 15), (base, 30)))
        series.add(
            "lustre_jobstats_up",
            f'{JOBSTATS}, component="ost", target="{target}", source="lctl"',
            [1] * (base_minutes + 45),
        )
    # A target first seen an hour ago, at 50 MiB/s: 1.5 GiB/s is 8x that hour, but an hour
    # is not the 24 h baseline the alert promises (under half of it has samples).
    labels = f'{JOBSTATS}, component="ost", target="fs-OST0003", jobid="1"'
    young = profile((50 * MIB, 60), (1.5 * GIB, 15), (50 * MIB, 30))
    counter = [sum(young[:i]) * MINUTE for i in range(len(young))]
    series.add("lustre_job_write_bytes_total", labels, [None] * (base_minutes - 60) + counter)
    series.add("lustre_job_write_bytes_per_second", labels, [None] * (base_minutes - 60) + young)
    fire_at = base_minutes + 13  # 5 min window + 5 min for + margin
    description = (
        "fs-OST0000 (ost) writes 1.5GiB/s over 5 min, at least 4x its average over the "
        "previous 24 h. The jobs behind it are in the dashboard's top-jobs tables."
    )
    expected = {
        "exp_labels": {
            "severity": "warning",
            "component": "ost",
            "target": "fs-OST0000",
            "direction": "write",
        },
        "exp_annotations": {
            "summary": "Lustre target fs-OST0000: write spike",
            "description": description,
            "dashboard": _link(
                "hpcmon-overview",
                "var-component=ost&var-target=fs-OST0000",
                fire_at * MINUTE,
                3600 + 300,
            ),
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": [
                {"eval_time": f"{base_minutes - 10}m", "alertname": "LustreTargetIOSpike"},
                {
                    "eval_time": f"{fire_at}m",
                    "alertname": "LustreTargetIOSpike",
                    "exp_alerts": [expected],
                },
                {"eval_time": f"{base_minutes + 35}m", "alertname": "LustreTargetIOSpike"},
            ],
        }
    ]
    _run(tmp_path, config, tests)


def test_job_dominates_target(tmp_path: Path, config) -> None:
    """90% of 500 MiB/s fires; 79.8% of 500 MiB/s and 90% of 495 MiB/s stay silent."""
    series = Series()
    jobs = {  # target: (dominant job rate, other job rate), MiB/s
        "fs-OST0000": (450, 50),
        "fs-OST0001": (399, 101),
        "fs-OST0002": (445.5, 49.5),
    }
    for target, (big, small) in jobs.items():
        for jobid, rate in (("big", big), ("small", small)):
            labels = f'{JOBSTATS}, component="ost", target="{target}", jobid="{jobid}-{target}"'
            _bytes(series, "read", labels, profile((0, 5), (rate * MIB, 20), (0, 20)))
    fire_at = 5 + 17
    expected = {
        "exp_labels": {
            "severity": "warning",
            "component": "ost",
            "target": "fs-OST0000",
            "direction": "read",
            "jobid": "big-fs-OST0000",
        },
        "exp_annotations": {
            "summary": "Job big-fs-OST0000 dominates fs-OST0000",
            "description": (
                "Job big-fs-OST0000 carries 90% of fs-OST0000's read throughput while the "
                "target moves at least 500 MiB/s."
            ),
            "dashboard": _link(
                "hpcmon-job", "var-jobid=big-fs-OST0000", fire_at * MINUTE, 3600 + 600
            ),
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "LustreJobDominatesTarget"},  # pending
                {
                    "eval_time": f"{fire_at}m",
                    "alertname": "LustreJobDominatesTarget",
                    "exp_alerts": [expected],
                },
                {"eval_time": "40m", "alertname": "LustreJobDominatesTarget"},
            ],
        }
    ]
    _run(tmp_path, config, tests)


def _operations(series: Series, labels: str, operation: str, rates: list[float]) -> None:
    series.rate(
        "lustre_job_stats_total",
        "lustre_job_operations_per_second",
        f'{labels}, operation="{operation}"',
        rates,
    )


def test_job_metadata_storm(tmp_path: Path, config) -> None:
    """10,000 operations/s summed over two MDTs and two operations fires; 9,999/s does not;
    reads and writes on the MDT are not metadata."""
    series = Series()
    parts = {  # job: [(mdt, operation, ops/s)]
        "storm": [
            ("MDT0000", "open", 3000),
            ("MDT0000", "getattr", 3000),
            ("MDT0001", "open", 4000),
        ],
        "busy": [("MDT0000", "open", 5000), ("MDT0001", "unlink", 4999)],
        "data": [("MDT0000", "open", 9000), ("MDT0000", "read", 5000)],
    }  # fmt: skip
    for job, items in parts.items():
        for mdt, operation, rate in items:
            labels = f'{JOBSTATS}, component="mdt", target="fs-{mdt}", jobid="{job}"'
            _operations(series, labels, operation, profile((0, 3), (rate, 25), (0, 20)))
    fire_at = 3 + 17
    expected = {
        "exp_labels": {"severity": "warning", "jobid": "storm"},
        "exp_annotations": {
            "summary": "Job storm: metadata storm",
            "description": (
                "Job storm averages 10k metadata operations/s over 5 min, summed over all MDTs "
                "and operations (threshold 10000/s)."
            ),
            "dashboard": _link("hpcmon-job", "var-jobid=storm", fire_at * MINUTE, 3600 + 600),
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": [
                {
                    "eval_time": f"{fire_at}m",
                    "alertname": "LustreJobMetadataStorm",
                    "exp_alerts": [expected],
                },
                {"eval_time": "45m", "alertname": "LustreJobMetadataStorm"},
            ],
        }
    ]
    _run(tmp_path, config, tests)


def test_job_small_writes(tmp_path: Path, config) -> None:
    """5,000 writes/s of 60 KiB over two OSTs fires; 4,999 writes/s, or 64 KiB writes, do not."""
    series = Series()
    jobs = {"small": (5000, 60 * 1024), "fewer": (4999, 4096), "sized": (6000, 64 * 1024)}
    for job, (ops, size) in jobs.items():
        for ost in ("OST0000", "OST0001"):
            labels = f'{JOBSTATS}, component="ost", target="fs-{ost}", jobid="{job}"'
            shape = ((0, 3), (ops / 2, 30), (0, 25))
            series.rate(
                "lustre_job_write_samples_total",
                "lustre_job_operations_per_second",
                labels,
                profile(*shape),
                operation="write",
            )
            _bytes(series, "write", labels, [r * size for r in profile(*shape)])
    fire_at = 3 + 22
    expected = {
        "exp_labels": {"severity": "warning", "jobid": "small"},
        "exp_annotations": {
            "summary": "Job small: many small writes",
            "description": (
                "Job small issues 5k writes/s to the OSTs with a mean write size under 64 KiB."
            ),
            "dashboard": _link("hpcmon-job", "var-jobid=small", fire_at * MINUTE, 3600 + 900),
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "LustreJobSmallWrites"},  # still pending
                {
                    "eval_time": f"{fire_at}m",
                    "alertname": "LustreJobSmallWrites",
                    "exp_alerts": [expected],
                },
                {"eval_time": "55m", "alertname": "LustreJobSmallWrites"},
            ],
        }
    ]
    _run(tmp_path, config, tests)


def test_health_alerts(tmp_path: Path) -> None:
    """A target down 6 min and an unscraped exporter fire LustreJobstatsDown, 4 min does not;
    a collector failing 11 min fires, 9 min does not; a node with no working power source
    fires GeopmDown, one with powercap working while geopmdpy is absent does not; squeue
    failing 11 min on a controller fires SlurmJobListDown, 9 min on the other does not."""
    series = Series()
    down = lambda minutes: [1] * 5 + [0] * minutes + [1] * (40 - minutes)  # noqa: E731
    series.add(
        "lustre_jobstats_up",
        f'{JOBSTATS}, component="ost", target="fs-OST0000", source="lctl"',
        down(6),
    )
    series.add(
        "lustre_jobstats_up",
        f'{JOBSTATS}, component="ost", target="fs-OST0001", source="lctl"',
        down(4),
    )
    series.add("up", 'instance="oss2:19325", job="hpcmon-jobstats"', down(6))
    series.add("up", 'instance="other:9100", job="node"', down(20))
    series.add(
        "hpcmon_exporter_collector_success", 'instance="n1:19325", collector="geopm"', down(12)
    )
    series.add(
        "hpcmon_exporter_collector_success", 'instance="n2:19325", collector="geopm"', down(9)
    )
    for node, geopmdpy, powercap in (("n1:19325", 0, 0), ("n2:19325", 0, 1)):
        series.add("geopm_up", f'instance="{node}", source="geopmdpy"', [geopmdpy] * 45)
        series.add("geopm_up", f'instance="{node}", source="powercap"', [powercap] * 45)
    # Slurm's job list: squeue failing 11 min on one controller, 9 min on the other
    series.add("hpc_slurm_up", 'instance="ctl1:19325"', down(11))
    series.add("hpc_slurm_up", 'instance="ctl2:19325"', down(9))

    def alert(labels: dict[str, str], summary: str, description: str, link: str) -> dict:
        return {
            "exp_labels": labels,
            "exp_annotations": {"summary": summary, "description": description, "dashboard": link},
        }

    overview = "hpcmon-overview"
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "LustreJobstatsDown",
                    "exp_alerts": [
                        alert(
                            {
                                "severity": "critical",
                                "component": "ost",
                                "target": "fs-OST0000",
                                "source": "lctl",
                                "instance": "oss1:19325",
                                "job": "hpcmon-jobstats",
                            },
                            "Jobstats not collected from oss1:19325",
                            "Target fs-OST0000 (lctl) could not be read on oss1:19325: per-job "
                            "I/O of that server is missing.",
                            _link(overview, "var-instance=oss1%3A19325", 600, 3600 + 300),
                        ),
                        alert(
                            {
                                "severity": "critical",
                                "instance": "oss2:19325",
                                "job": "hpcmon-jobstats",
                            },
                            "Jobstats not collected from oss2:19325",
                            "The exporter is not scraped on oss2:19325: per-job I/O of that "
                            "server is missing.",
                            _link(overview, "var-instance=oss2%3A19325", 600, 3600 + 300),
                        ),
                    ],
                },
                {"eval_time": "30m", "alertname": "LustreJobstatsDown"},
                {"eval_time": "14m", "alertname": "HpcmonCollectorFailing"},  # 9 min: silent
                {
                    "eval_time": "16m",
                    "alertname": "HpcmonCollectorFailing",
                    "exp_alerts": [
                        alert(
                            {"severity": "warning", "instance": "n1:19325", "collector": "geopm"},
                            "Collector geopm failing on n1:19325",
                            "The geopm collector of n1:19325 has failed at every scrape; see the "
                            "exporter's log.",
                            _link(overview, "var-instance=n1%3A19325", 960, 3600 + 600),
                        )
                    ],
                },
                {"eval_time": "30m", "alertname": "HpcmonCollectorFailing"},
                {
                    "eval_time": "12m",
                    "alertname": "GeopmDown",
                    "exp_alerts": [
                        alert(
                            {"severity": "warning", "instance": "n1:19325"},
                            "No power source on n1:19325",
                            "Neither GEOPM nor powercap gives power and energy on n1:19325: job "
                            "energy for that node is missing.",
                            _link(overview, "var-instance=n1%3A19325", 720, 3600 + 600),
                        )
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "SlurmJobListDown",
                    "exp_alerts": [
                        alert(
                            {"severity": "warning", "instance": "ctl1:19325"},
                            "Slurm's job list not read on ctl1:19325",
                            "squeue fails or hangs on ctl1:19325 (see the exporter's log): its "
                            "job alerts and dashboards show job ids without user, account and "
                            "job name while no other host reads Slurm's list.",
                            _link(overview, "var-instance=ctl1%3A19325", 900, 3600 + 600),
                        )
                    ],
                },
                {"eval_time": "30m", "alertname": "SlurmJobListDown"},
            ],
        }
    ]
    _run(tmp_path, dashboards_config.Config(), tests)


def test_postjob_backlog(tmp_path: Path) -> None:
    """Issue 21: n1's oldest spooled line ages past 1 h (from minute 66) and stays there 15 min:
    fires at 81, not at 80; a flush at 91 empties the spool (age 0) and resolves it. n2's
    backlog is flushed at 59 min old: silent. The other kind of n1's spool stays empty."""
    age = "hpcmon_postjob_spool_oldest_age_seconds"
    node = 'instance="{}:19325", job="hpcmon-compute"'
    items = [
        {"series": f'{age}{{{node.format("n1")}, kind="influx-v1"}}',
         "values": "0x4 0+60x85 0x20"},  # age (minute - 5) * 60 until the flush at 91
        {"series": f'{age}{{{node.format("n1")}, kind="influx-v2"}}', "values": "0x110"},
        {"series": f'{age}{{{node.format("n2")}, kind="influx-v1"}}',
         "values": "0x4 0+60x59 0x46"},  # at most 3540 s old, then flushed
    ]  # fmt: skip
    firing = {
        "exp_labels": {"severity": "warning", "instance": "n1:19325", "job": "hpcmon-compute"},
        "exp_annotations": {
            "summary": "Post-job data stuck on n1:19325",
            "description": (
                "The oldest line in the post-job spool of n1:19325 has waited 1h 17m 0s: the "
                "epilog hook cannot deliver to InfluxDB. The lines are kept; 'hpcmon-post-job "
                "flush' sends them once the server takes data."
            ),
            "dashboard": _link("hpcmon-overview", "var-instance=n1%3A19325", 82 * 60, 4500),
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": items,
            "alert_rule_test": [
                {"eval_time": "65m", "alertname": "HpcmonPostJobBacklog"},  # 3600: not above
                {"eval_time": "80m", "alertname": "HpcmonPostJobBacklog"},  # pending 14 min
                {"eval_time": "82m", "alertname": "HpcmonPostJobBacklog", "exp_alerts": [firing]},
                {"eval_time": "95m", "alertname": "HpcmonPostJobBacklog"},  # flushed: resolved
            ],
        }
    ]
    _run(tmp_path, dashboards_config.Config(), tests)


def _node_energy(series: Series, node: str, watts: float, minutes: int) -> None:
    """CPU and DRAM (64 W) counters make the node's power; the board domain is not counted."""
    series.add(
        "geopm_cpu_energy_joules_total",
        f'instance="{node}", domain="package", domain_index="0", source="powercap"',
        [(watts - 64) * MINUTE * i for i in range(minutes)],
    )
    series.add(
        "geopm_dram_energy_joules_total",
        f'instance="{node}", domain="package", domain_index="0", source="powercap"',
        [64 * MINUTE * i for i in range(minutes)],
    )
    series.add(
        "geopm_board_energy_joules_total",
        f'instance="{node}", domain="board", domain_index="0", source="powercap"',
        [watts * 2 * MINUTE * i for i in range(minutes)],
    )


def test_job_power_splits_shared_nodes(tmp_path: Path) -> None:
    """The energy attribution rule: node A (300 W) runs jobs 1 and 2, node B (100 W) runs job 2
    alone, so job 1 gets 150 W and job 2 gets 150 + 100 W; a job that leaves gives its share
    back. (The old `power * on(instance) group_left(jobid) hpc_node_job_info` failed here
    with many-to-many matching.)"""
    series = Series()
    for node, watts in (("a:19325", 300.0), ("b:19325", 100.0)):
        _node_energy(series, node, watts, 40)
    series.add("hpc_node_job_info", 'instance="a:19325", jobid="1", uid="1000"', [1] * 20)
    series.add("hpc_node_job_info", 'instance="a:19325", jobid="2", uid="1000"', [1] * 40)
    series.add("hpc_node_job_info", 'instance="b:19325", jobid="2", uid="1000"', [1] * 40)
    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "promql_expr_test": [
                {
                    "expr": rules.JOB_POWER,
                    "eval_time": "10m",
                    "exp_samples": [
                        {"labels": f'{rules.JOB_POWER}{{jobid="1"}}', "value": 150},
                        {"labels": f'{rules.JOB_POWER}{{jobid="2"}}', "value": 250},
                    ],
                },
                {
                    "expr": rules.JOB_POWER,
                    "eval_time": "35m",  # job 1 has left node a
                    "exp_samples": [{"labels": f'{rules.JOB_POWER}{{jobid="2"}}', "value": 400}],
                },
                {
                    "expr": rules.NODE_POWER,
                    "eval_time": "10m",
                    "exp_samples": [
                        {"labels": f'{rules.NODE_POWER}{{instance="a:19325"}}', "value": 300},
                        {"labels": f'{rules.NODE_POWER}{{instance="b:19325"}}', "value": 100},
                    ],
                },
            ],
        }
    ]
    _run(tmp_path, dashboards_config.Config(), tests)


def test_longterm_rules_keep_jobs_and_targets_apart(tmp_path: Path) -> None:
    """The long-term group's aggregates from the 5-minute recorded series: the busiest job's
    share of each target (0.75, 1), targets per job (2, 1), jobs per target (2, 1), bytes per
    job and component (350, 100), and 5-minute averages (75 = mean of 50..100 at 1-minute
    steps: Prometheus 2.x ranges include both ends)."""
    direction = 'direction="write"'
    series = Series()
    for job, target, rate in (("a", "t0", 300), ("b", "t0", 100), ("a", "t1", 50)):
        series.add(
            rules.JOB_TARGET_BYTES,
            f'jobid="{job}", component="ost", target="{target}", {direction}',
            [rate] * 21,
        )
    for target, rate in (("t0", 400), ("t1", 50)):
        series.add(
            rules.TARGET_BYTES, f'component="ost", target="{target}", {direction}', [rate] * 21
        )
    series.add(rules.JOB_BYTES, f'jobid="a", {direction}', [10 * i for i in range(21)])

    tests = [
        {
            "interval": "1m",
            "input_series": series.items,
            "promql_expr_test": [
                _samples(
                    "hpcmon:lustre_target_top_job_share:max5m",
                    (f'component="ost", target="t0", {direction}', 0.75),
                    (f'component="ost", target="t1", {direction}', 1),
                ),
                _samples("hpcmon:lustre_job_targets:count5m", ('jobid="a"', 2), ('jobid="b"', 1)),
                _samples(
                    "hpcmon:lustre_target_jobs:count5m",
                    ('component="ost", target="t0"', 2),
                    ('component="ost", target="t1"', 1),
                ),
                _samples(
                    "hpcmon:lustre_job_component_bytes:avg5m",
                    (f'jobid="a", component="ost", {direction}', 350),
                    (f'jobid="b", component="ost", {direction}', 100),
                ),
                _samples("hpcmon:lustre_job_bytes:avg5m", (f'jobid="a", {direction}', 75)),
            ],
        }
    ]
    _run(tmp_path, dashboards_config.Config(longterm_interval="5m"), tests)


# Issue 32: Slurm's job list (hpc_slurm_job_info) joined into the job alerts and the per-user
# and per-account rules. A controller pair exports each job twice (ctl1, ctl2), in states that
# may differ for a moment; a job Slurm no longer lists is in no join.
SLURM = 'job="hpcmon-slurm", partition="debug"'
CONTROLLERS = ("ctl1:19325", "ctl2:19325")


def _slurm_job(series: Series, jobid: str, user: str, account: str, name: str, minutes: int,
               states: tuple[str, str] = ("RUNNING", "COMPLETING"), names: tuple[str, ...] = ()
               ) -> None:  # fmt: skip
    """The job as both controllers list it (states[i], names[i] on controller i)."""
    for index, controller in enumerate(CONTROLLERS):
        labels = (
            f'instance="{controller}", {SLURM}, jobid="{jobid}", user="{user}", '
            f'account="{account}", job_name="{(names or (name, name))[index]}", '
            f'state="{states[index]}"'
        )
        series.add("hpc_slurm_job_info", labels, [1] * minutes)


def _storming_job(series: Series, labels: str, target: str) -> None:
    """From minute 3 to 33: 12,000 metadata operations/s on the MDT, 6,000 writes/s of 4 KiB
    and 600 MiB/s of reads on `target` (an OST no other job uses): all three job alerts."""
    shape = ((0, 3), (1, 30), (0, 25))
    mdt = f'{labels}, component="mdt", target="fs-MDT0000"'
    _operations(series, mdt, "open", [12_000 * x for x in profile(*shape)])
    ost = f'{labels}, component="ost", target="{target}"'
    writes = [6000 * x for x in profile(*shape)]
    series.rate(
        "lustre_job_write_samples_total",
        "lustre_job_operations_per_second",
        ost,
        writes,
        operation="write",
    )
    _bytes(series, "write", ost, [4096 * x for x in writes])
    _bytes(series, "read", ost, [600 * MIB * x for x in profile(*shape)])


JOB_ALERTS = ("LustreJobMetadataStorm", "LustreJobSmallWrites", "LustreJobDominatesTarget")


def _job_alert_tests(series: Series, jobs: list[tuple[dict[str, str], str]],
                     disagreeing: Series) -> list[dict]:  # fmt: skip
    """At minute 25 every job alert fires once per job of `jobs` (its labels, and how the
    summary shows it); and, in a second test, once for the one job of `disagreeing`, whose
    two controllers disagree on its name."""
    at = 25 * MINUTE
    checks = []
    for alertname, summary, description, lookback in (
        (
            "LustreJobMetadataStorm",
            "Job {shown}: metadata storm",
            "Job {jobid} averages 12k metadata operations/s over 5 min, summed over all MDTs "
            "and operations (threshold 10000/s).",
            600,
        ),
        (
            "LustreJobSmallWrites",
            "Job {shown}: many small writes",
            "Job {jobid} issues 6k writes/s to the OSTs with a mean write size under 64 KiB.",
            900,
        ),
        (
            "LustreJobDominatesTarget",
            "Job {shown} dominates {target}",
            "Job {jobid} carries 100% of {target}'s read throughput while the target moves at "
            "least 500 MiB/s.",
            600,
        ),
    ):
        expected = []
        for labels, shown in jobs:
            labels = dict(labels)
            target = labels.pop("target")
            if alertname == "LustreJobDominatesTarget":
                labels.update(component="ost", target=target, direction="read")
            text = {"shown": shown, "jobid": labels["jobid"], "target": target}
            expected.append(
                {
                    "exp_labels": {"severity": "warning", **labels},
                    "exp_annotations": {
                        "summary": summary.format(**text),
                        "description": description.format(**text),
                        "dashboard": _link(
                            "hpcmon-job", f"var-jobid={labels['jobid']}", at, 3600 + lookback
                        ),
                    },
                }
            )
        checks.append({"eval_time": "25m", "alertname": alertname, "exp_alerts": expected})
    return [
        {
            "interval": "1m",
            "input_series": series.items,
            "alert_rule_test": checks,
        },
        {
            "interval": "1m",
            "input_series": disagreeing.items,
            "promql_expr_test": [
                {
                    "expr": 'count by (alertname) (ALERTS{alertstate="firing"})',
                    "eval_time": "25m",
                    "exp_samples": [
                        {"labels": f'{{alertname="{name}"}}', "value": 1} for name in JOB_ALERTS
                    ],
                }
            ],
        },
    ]


def test_job_alerts_name_the_slurm_job(tmp_path: Path, config) -> None:
    """Job 4242 is listed by both controllers (RUNNING on one, already COMPLETING on the
    other): its three alerts carry its user, account and job name, and the summary names
    them. Job 4243 is one Slurm no longer lists: its alerts fire as they do without any Slurm
    collector. Job 4244's controllers disagree on its name for a moment (renamed between
    their reads): still one alert each, not a failing rule."""
    series, disagreeing = Series(), Series()
    for jobid, target in (("4242", "fs-OST0000"), ("4243", "fs-OST0001")):
        _storming_job(series, f'{JOBSTATS}, jobid="{jobid}"', target)
    _slurm_job(series, "4242", "alice", "climate", "wrf-ensemble_7", 60)
    _storming_job(disagreeing, f'{JOBSTATS}, jobid="4244"', "fs-OST0002")
    _slurm_job(disagreeing, "4244", "bob", "physics", "", 60, names=("lattice", "lattice-v2"))
    known = {"jobid": "4242", "user": "alice", "account": "climate",
             "job_name": "wrf-ensemble_7", "target": "fs-OST0000"}  # fmt: skip
    jobs = [
        (known, "4242 (wrf-ensemble_7, user alice, account climate)"),
        ({"jobid": "4243", "target": "fs-OST0001"}, "4243"),
    ]
    _run(tmp_path, config, _job_alert_tests(series, jobs, disagreeing))


SLURM_JOB_CONFIG = dashboards_config.replace(
    dashboards_config.Config(), jobid_labels=("slurm_job",), slurm_jobid_label="slurm_job"
)


@pytest.mark.parametrize("join", ["jobid", "slurm_job"])
def test_user_and_account_sums_are_their_jobs_sums(tmp_path: Path, join: str) -> None:
    """Per user and per account, the sum of their jobs: bytes/s and metadata operations/s
    every minute (rate5m) and in the long-term group (avg5m), power there too. Job 4242 is
    listed by both controllers and counts once; job 4243, which Slurm no longer lists, in no
    sum. join=slurm_job: the site's jobstats ids carry the node (4242.n1, 4242.n2: the job's
    two nodes) and --jobstats.jobid-pattern gives Slurm's id as slurm_job; power joins on the
    compute nodes' jobid, which is Slurm's id."""
    jobs = {  # Slurm id: (user, account, write MiB/s, read MiB/s, metadata ops/s)
        "4242": ("alice", "climate", 100, 10, 300),
        "4245": ("bob", "climate", 50, 0, 200),
        "4246": ("alice", "physics", 20, 0, 100),
        "4243": (None, None, 1000, 0, 5000),
    }
    series = Series()
    for jobid, (user, account, write, read, metadata) in jobs.items():
        parts = [f'jobid="{jobid}"']
        if join == "slurm_job":  # the job's I/O split over its two nodes' ids
            parts = [f'jobid="{jobid}.{n}", slurm_job="{jobid}"' for n in ("n1", "n2")]
        for labels in parts:
            share = 1 / len(parts)
            ost = f'{JOBSTATS}, {labels}, component="ost", target="fs-OST0000"'
            _bytes(series, "write", ost, [write * MIB * share] * 21)
            if read:
                _bytes(series, "read", ost, [read * MIB * share] * 21)
            mdt = f'{JOBSTATS}, {labels}, component="mdt", target="fs-MDT0000"'
            _operations(series, mdt, "open", [metadata * share] * 21)
        if user:
            _slurm_job(series, jobid, user, account, f"job-{jobid}", 21)
    # Power: node a (300 W) runs 4242 and 4245, b (100 W) 4245, c (200 W) 4246 and 4243.
    for node, watts in (("a:19325", 300.0), ("b:19325", 100.0), ("c:19325", 200.0)):
        _node_energy(series, node, watts, 21)
    for node, jobid in (("a", "4242"), ("a", "4245"), ("b", "4245"), ("c", "4246"), ("c", "4243")):
        series.add("hpc_node_job_info", f'instance="{node}:19325", jobid="{jobid}"', [1] * 21)

    write, read = 'direction="write"', 'direction="read"'
    for_bytes = {
        "user": [(f'user="alice", {write}', 120 * MIB), (f'user="alice", {read}', 10 * MIB),
                 (f'user="bob", {write}', 50 * MIB)],
        "account": [(f'account="climate", {write}', 150 * MIB),
                    (f'account="climate", {read}', 10 * MIB),
                    (f'account="physics", {write}', 20 * MIB)],
    }  # fmt: skip
    for_metadata = {
        "user": [('user="alice"', 400), ('user="bob"', 200)],
        "account": [('account="climate"', 500), ('account="physics"', 100)],
    }
    for_power = {  # 4242: 150 W, 4245: 150 + 100 W, 4246: 100 W (4243 has the other half of c)
        "user": [('user="alice"', 250), ('user="bob"', 250)],
        "account": [('account="climate"', 400), ('account="physics"', 100)],
    }
    checks = []
    for owner in ("user", "account"):
        checks += [
            _samples(f"hpcmon:lustre_{owner}_bytes:rate5m", *for_bytes[owner]),
            _samples(f"hpcmon:lustre_{owner}_bytes:avg5m", *for_bytes[owner]),
            _samples(f"hpcmon:lustre_{owner}_metadata_ops:rate5m", *for_metadata[owner]),
            _samples(f"hpcmon:lustre_{owner}_metadata_ops:avg5m", *for_metadata[owner]),
            _samples(f"hpcmon:{owner}_power_watts:avg5m", *for_power[owner]),
        ]
    tests = [{"interval": "1m", "input_series": series.items, "promql_expr_test": checks}]
    config = SLURM_JOB_CONFIG if join == "slurm_job" else dashboards_config.Config()
    _run(tmp_path, config, tests)


def test_job_alerts_name_the_slurm_job_of_a_jobid_pattern(tmp_path: Path) -> None:
    """A site whose jobstats ids carry more than Slurm's number (4242.n1): the alerts join on
    the slurm_job label of --jobstats.jobid-pattern and carry it next to user, account and
    job name."""
    series, disagreeing = Series(), Series()
    _storming_job(series, f'{JOBSTATS}, jobid="4242.n1", slurm_job="4242"', "fs-OST0000")
    _storming_job(series, f'{JOBSTATS}, jobid="4243.n1", slurm_job="4243"', "fs-OST0001")
    _slurm_job(series, "4242", "alice", "climate", "wrf-ensemble_7", 60)
    _storming_job(disagreeing, f'{JOBSTATS}, jobid="4244.n1", slurm_job="4244"', "fs-OST0002")
    _slurm_job(disagreeing, "4244", "bob", "physics", "", 60, names=("lattice", "lattice-v2"))
    known = {"jobid": "4242.n1", "slurm_job": "4242", "user": "alice", "account": "climate",
             "job_name": "wrf-ensemble_7", "target": "fs-OST0000"}  # fmt: skip
    jobs = [
        (known, "4242.n1 (wrf-ensemble_7, user alice, account climate)"),
        ({"jobid": "4243.n1", "slurm_job": "4243", "target": "fs-OST0001"}, "4243.n1"),
    ]
    _run(tmp_path, SLURM_JOB_CONFIG, _job_alert_tests(series, jobs, disagreeing))
