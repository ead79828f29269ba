"""``hpcmon-exporter --print-series-budget``: how many series a site's exporters expose, from
the site's shape and the exporter's flags, and what that costs a Prometheus in memory.

The formula (checked exactly against the real exporter in tests/exporter/test_series_budget.py):

per job entry exported on a target, with ``b`` byte operations (read_bytes, write_bytes) and
``k`` other operations left by --jobstats.operations / --jobstats.operations-deny:

    S = 4 b + r_b + k (1 + L + r_o)

``L`` = 1 when the target reports latencies (unit usecs, Lustre 2.14+), ``r_b`` = byte
operations whose rate is on (--jobstats.rates read_bytes, write_bytes), ``r_o`` = 1 when the
operation rates are on. Entries per target (per component and server with
--jobstats.aggregate=server, where J is the distinct jobs of the server):

    E = min(J, max-jobs) [+ 1 for jobid="other" when --jobstats.top-jobs N < J, J -> min(J, N)]

per exporter: ``min(sum E S, max-series) + 3 T + D + 1 + F_src + 2 C + P`` with T targets
(lustre_jobstats_up, _jobs, _parse_errors_total each), D the dropped-series counters (one per
block and filter or limit in force, exported from 0), 1 the sample duration, F_src 4 lctl
failure counters (source lctl), 2 C collector success/duration per enabled collector, and P
the process and Python series of prometheus-client (counted from the library at run time).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from prometheus_client import REGISTRY, generate_latest

from hpcmon.exporter.collector import count_flag
from hpcmon.exporter.jobstats.collector import RATE_KINDS, _operations, rate_kinds

# Operations a Lustre 2.15 target lists for every job (read_bytes/write_bytes included).
OST_OPERATIONS = (
    "read_bytes", "write_bytes", "read", "write", "getattr", "setattr", "punch", "sync",
    "destroy", "create", "statfs", "get_info", "set_info", "quotactl", "prealloc",
)  # fmt: skip
MDT_OPERATIONS = (
    "open", "close", "mknod", "link", "unlink", "mkdir", "rmdir", "rename", "getattr",
    "setattr", "getxattr", "setxattr", "statfs", "sync", "samedir_rename",
    "parallel_rename_file", "parallel_rename_dir", "crossdir_rename", "read", "write",
    "read_bytes", "write_bytes", "punch", "migrate",
)  # fmt: skip
BYTE_OPERATIONS = ("read_bytes", "write_bytes")
# Robust Perception, "How much RAM does Prometheus 2.x need for cardinality and ingestion?"
# (Brian Brazil, 2019): about 2 GiB of head memory per million series, GC overhead included.
BYTES_PER_SERIES = 2048
SCRAPE_SERIES = 5  # up, scrape_duration_seconds, scrape_samples_scraped, _post_metric_relabeling,
# scrape_series_added: what Prometheus adds for every target it scrapes


@dataclass
class Budget:
    series_per_job_ost: int
    series_per_job_mdt: int
    oss_exporter: int
    mds_exporter: int
    node_exporter: int
    site: int
    prometheus_memory_bytes: int
    bytes_per_series: int


def process_series() -> int:
    """Series prometheus-client adds to every exporter (process_*, python_*), on this host."""
    from hpcmon.exporter.cli import available_collectors

    available_collectors()  # the modules the exporter imports, in case one registers
    text = generate_latest(REGISTRY).decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def kept_operations(
    names: Sequence[str], allow: frozenset[str] | None, deny: frozenset[str]
) -> list[str]:
    return [name for name in names if (allow is None or name in allow) and name not in deny]


def series_per_job(operations: Sequence[str], options: argparse.Namespace) -> int:
    """S = 4 b + r_b + k (1 + L + r_o)."""
    kept = kept_operations(operations, options.jobstats_operations, options.jobstats_deny)
    byte_ops = [name for name in kept if name in BYTE_OPERATIONS]
    others = len(kept) - len(byte_ops)
    rates = options.jobstats_rates
    latency = 1 if options.site_latency else 0
    return (
        4 * len(byte_ops)
        + sum(name in rates for name in byte_ops)
        + others * (1 + latency + ("operations" in rates))
    )


def entries(jobs: int, options: argparse.Namespace) -> int:
    """E: job entries exported per block (target, or server and component)."""
    if options.jobstats_max_jobs:
        jobs = min(jobs, options.jobstats_max_jobs)
    top = options.jobstats_top_jobs
    if top and jobs:  # ``other`` is on every target with jobs, at 0 until something is folded
        return min(jobs, top) + 1
    return jobs


def jobstats_exporter(
    targets: int, operations: Sequence[str], options: argparse.Namespace, fixed: int
) -> int:
    """Series of one Lustre server exporter with ``targets`` targets of one component."""
    if targets == 0:
        return 0
    per_job = series_per_job(operations, options)
    if options.jobstats_aggregate == "server":
        blocks, jobs = 1, options.site_jobs_per_server or options.site_jobs_per_target
    else:
        blocks, jobs = targets, options.site_jobs_per_target
    exported = blocks * entries(jobs, options) * per_job
    # One dropped-series counter per block and limit in force, from 0 (whether it cuts or not).
    filters = options.jobstats_operations is not None or bool(options.jobstats_deny)
    limits = filters + bool(options.jobstats_max_jobs) + bool(options.jobstats_max_series)
    dropped = blocks * limits
    extra = 0
    if options.jobstats_max_series:
        extra = 1  # lustre_jobstats_series_cut
        exported = min(exported, options.jobstats_max_series)  # at most: whole jobs are cut
    failures = 4 if options.site_source == "lctl" else 0
    return exported + 3 * targets + dropped + 1 + failures + 2 + fixed + extra


def node_exporter(options: argparse.Namespace, fixed: int) -> int:
    """Series of one compute node exporter (power and jobs collectors): energy and power of
    the CPU and DRAM of each package and of the board, the collector's health, one series per
    job. Exact for powercap nodes (tested); the GPU part (energy and power per GPU) is not
    measured here."""
    power = 4 * options.site_sockets_per_node + 2 * options.site_gpus_per_node + 2
    health = 4  # geopm_up, geopm_sample_duration_seconds, geopm_errors_total, rebases
    return power + health + options.site_jobs_per_node + 2 * 2 + fixed


def compute(options: argparse.Namespace, fixed: int | None = None) -> Budget:
    fixed = process_series() if fixed is None else fixed
    oss, mds = options.site_oss, options.site_mds
    osts_each = math.ceil(options.site_osts / oss) if oss else 0
    mdts_each = math.ceil(options.site_mdts / mds) if mds else 0
    oss_series = jobstats_exporter(osts_each, OST_OPERATIONS, options, fixed)
    mds_series = jobstats_exporter(mdts_each, MDT_OPERATIONS, options, fixed)
    node_series = node_exporter(options, fixed) if options.site_power_nodes else 0
    site = (
        oss * oss_series
        + mds * mds_series
        + options.site_power_nodes * node_series
        + SCRAPE_SERIES * (oss + mds + options.site_power_nodes)
    )
    return Budget(
        series_per_job(OST_OPERATIONS, options),
        series_per_job(MDT_OPERATIONS, options),
        oss_series,
        mds_series,
        node_series,
        site,
        site * options.site_bytes_per_series,
        options.site_bytes_per_series,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcmon-exporter --print-series-budget",
        usage="%(prog)s [--site.* flags] [--jobstats.* flags]",
        description="Series per exporter and for the site, and Prometheus memory, from the "
        "site's shape and the jobstats flags the exporters run with.",
    )

    def flag(name: str, **kwargs) -> None:
        parser.add_argument(
            name, dest=name.lstrip("-").replace(".", "_").replace("-", "_"), **kwargs
        )

    flag("--site.osts", type=count_flag, default=0, help="OSTs of the site")
    flag("--site.mdts", type=count_flag, default=0, help="MDTs of the site")
    flag("--site.oss", type=count_flag, default=0, help="OSS servers (one exporter each)")
    flag("--site.mds", type=count_flag, default=0, help="MDS servers (one exporter each)")
    flag(
        "--site.jobs-per-target",
        type=count_flag,
        default=0,
        help="job entries a target lists (jobs active within Lustre's job_cleanup_interval)",
    )
    flag(
        "--site.jobs-per-server",
        type=count_flag,
        default=0,
        help="distinct jobs on one server, for --jobstats.aggregate=server "
        "(default: --site.jobs-per-target, every job striped over all the server's targets)",
    )
    flag(
        "--site.latency",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="targets report latencies (Lustre 2.14+, unit usecs)",
    )
    flag(
        "--site.source",
        choices=["lctl", "procfs", "file"],
        default="lctl",
        help="--jobstats.source of the exporters",
    )
    flag("--site.power-nodes", type=count_flag, default=0, help="compute nodes with power")
    flag("--site.sockets-per-node", type=count_flag, default=2, help="CPU packages per node")
    flag("--site.gpus-per-node", type=count_flag, default=0, help="GPUs per node")
    flag("--site.jobs-per-node", type=count_flag, default=1, help="jobs running on a node")
    flag(
        "--site.bytes-per-series",
        type=count_flag,
        default=BYTES_PER_SERIES,
        help="Prometheus memory per active series (default 2048: Robust Perception)",
    )
    flag("--site.json", action="store_true", help="print JSON")
    flag(
        "--jobstats.rates",
        type=rate_kinds,
        default=frozenset(RATE_KINDS),
        help="all, none or some of read_bytes,write_bytes,operations",
    )
    parser.add_argument(
        "--no-jobstats.rates",
        dest="jobstats_rates",
        action="store_const",
        const=frozenset(),
        default=argparse.SUPPRESS,
    )
    flag("--jobstats.operations", type=_operations, default=None, help="allowlist")
    parser.add_argument(
        "--jobstats.operations-deny",
        dest="jobstats_deny",
        type=_operations,
        default=frozenset(),
        help="denylist",
    )
    flag("--jobstats.max-jobs", type=count_flag, default=0)
    flag("--jobstats.top-jobs", type=count_flag, default=0)
    flag("--jobstats.max-series", type=count_flag, default=0)
    flag("--jobstats.aggregate", choices=["target", "server"], default="target")
    return parser


def main(argv: Sequence[str]) -> int:
    options = build_parser().parse_args(list(argv))
    options.jobstats_deny = options.jobstats_deny or frozenset()
    budget = compute(options)
    if options.site_json:
        print(json.dumps(asdict(budget), indent=2))
        return 0
    print(
        f"series per job entry: {budget.series_per_job_ost} on an OST, "
        f"{budget.series_per_job_mdt} on an MDT"
    )
    print(f"per OSS exporter:          {budget.oss_exporter:>14,}")
    print(f"per MDS exporter:          {budget.mds_exporter:>14,}")
    print(f"per compute node exporter: {budget.node_exporter:>14,}")
    print(f"site:                      {budget.site:>14,}")
    print(
        f"Prometheus head memory:    {budget.prometheus_memory_bytes / 2**30:>14,.1f} GiB "
        f"({budget.bytes_per_series} B per series)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
