"""Benchmark: parse a 1,000-host GEOPM report (target < 2 s), against yaml.CSafeLoader.

The big reports are made from real fixtures by repeating one host's block under new host
names: the wide 2.x report (44 per-core report signals per region), the many-region 1.1 nekbone
report, and the 1.x text report (no YAML reference: it is not YAML).

    .venv/bin/python benchmarks/bench_geopm_report.py [--quick] [--hosts N]

Prints a table of medians and writes bench-results/geopm_report.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timing import median_seconds  # noqa: E402

from hpcmon.post_job.geopm_report.model import Report  # noqa: E402
from hpcmon.post_job.geopm_report.points import report_points  # noqa: E402
from hpcmon.post_job.geopm_report.reader import parse_report_text  # noqa: E402
from hpcmon.post_job.model import JobContext  # noqa: E402

DATA = ROOT / "tests" / "data" / "geopm_report"
TARGET_SECONDS = 2.0
CASES = {
    "yaml-2.x-wide": ("geopm-2.0.0+dev39x_test_sleep_region_map_report.yaml", "yaml"),
    "yaml-1.1-nekbone": ("geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report", "yaml"),
    "text-1.x": ("geopm-1.0.0+dev30_pre-yaml-text-format.report", "text"),
}


def scale_yaml_report(text: str, hosts: int) -> str:
    """Header + ``Hosts:`` + the first host's block repeated under names node0000...; any
    trailer (e.g. Figure of Merit) kept at the end."""
    head, _, body = text.partition("\nHosts:\n")
    lines = body.splitlines(keepends=True)
    first_host_end = next(
        (
            i
            for i, line in enumerate(lines[1:], 1)
            if line.startswith("  ") and not line.startswith("   ") and line.rstrip().endswith(":")
        ),
        len(lines),
    )
    block = "".join(lines[1:first_host_end]).rstrip("\n") + "\n"
    trailer = "".join(line for line in lines if line[:1] not in (" ", "\n", ""))
    hosts_text = "".join(f"  node{i:04d}:\n{block}" for i in range(hosts))
    return f"{head}\nHosts:\n{hosts_text}{trailer}"


def scale_text_report(text: str, hosts: int) -> str:
    """1.x text report: header + the first ``Host:`` block repeated under new names."""
    head, _, rest = text.partition("\nHost: ")
    block = rest.split("\nHost: ")[0].split("\n", 1)[1]
    return head + "".join(f"\nHost: node{i:04d}\n{block}" for i in range(hosts))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, one YAML reference")
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 7
    reference_repeats = 1 if args.quick else 3
    job = JobContext("bench")
    results = []
    for case, (fixture, kind) in CASES.items():
        text = (DATA / fixture).read_text()
        big = (scale_yaml_report if kind == "yaml" else scale_text_report)(text, args.hosts)
        parsed = parse_report_text(big, Path(fixture))
        assert not parsed.errors, parsed.errors[:3]
        report = parsed.reports[0]
        assert isinstance(report, Report), type(report)  # the fixtures are geopm reports
        assert len(report.hosts) == args.hosts
        parse_s = median_seconds(lambda big=big: parse_report_text(big, Path("bench")), repeats)
        points_s = median_seconds(lambda r=report: report_points(r, job, 0), repeats)
        reference_s = None
        if kind == "yaml" and (not args.quick or case == "yaml-2.x-wide"):
            reference_s = median_seconds(
                lambda big=big: yaml.load(big, Loader=yaml.CSafeLoader), reference_repeats
            )
        results.append(
            {
                "case": case,
                "fixture": fixture,
                "hosts": args.hosts,
                "mbytes": round(len(big.encode()) / 1e6, 2),
                "lines": big.count("\n"),
                "points": len(report_points(report, job, 0)),
                "parse_s": round(parse_s, 4),
                "parse_and_points_s": round(parse_s + points_s, 4),
                "csafeloader_s": None if reference_s is None else round(reference_s, 4),
                "speedup_vs_csafeloader": None
                if reference_s is None
                else round(reference_s / parse_s, 1),
                "meets_target": parse_s < TARGET_SECONDS,
            }
        )

    header = (
        f"{'case':18} {'hosts':>5} {'MB':>6} {'lines':>8} {'points':>7} {'parse s':>8} "
        f"{'+points s':>9} {'CSafe s':>8} {'speedup':>7}  target<{TARGET_SECONDS:g}s"
    )
    print(
        f"GEOPM report parsing, medians of {repeats} runs "
        f"(CSafeLoader: {reference_repeats}); {platform.python_version()}"
    )
    print(header)
    print("-" * len(header))
    for row in results:
        reference = "-" if row["csafeloader_s"] is None else f"{row['csafeloader_s']:.3f}"
        speedup = (
            "-"
            if row["speedup_vs_csafeloader"] is None
            else f"{row['speedup_vs_csafeloader']:.1f}x"
        )
        print(
            f"{row['case']:18} {row['hosts']:5d} {row['mbytes']:6.1f} {row['lines']:8d} "
            f"{row['points']:7d} {row['parse_s']:8.3f} {row['parse_and_points_s']:9.3f} "
            f"{reference:>8} {speedup:>7}  {'ok' if row['meets_target'] else 'MISSED'}"
        )
    out_dir = ROOT / "bench-results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "geopm_report.json").write_text(
        json.dumps(
            {
                "benchmark": "geopm_report",
                "target": f"{args.hosts}-host report parsed in < {TARGET_SECONDS} s",
                "baseline": "yaml.load(..., Loader=yaml.CSafeLoader) on the same text",
                "quick": args.quick,
                "repeats": repeats,
                "python": platform.python_version(),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written: {out_dir / 'geopm_report.json'}")
    return 0 if all(row["meets_target"] for row in results) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
