"""Generated Lustre 2.15-layout job_stats (``lctl get_param`` output) of any size, for the
series budget and the site-scale benchmark. Operation names and the record layout are those of
the real 2.14/2.15 captures in tests/data/jobstats (whamcloud lustrefs-exporter fixtures);
the numbers are made up, deterministic, and grow with ``step``."""

from __future__ import annotations

from pathlib import Path

from hpcmon.exporter.budget import MDT_OPERATIONS, OST_OPERATIONS

SNAPSHOT = 1_723_114_647


def target_name(component: str, index: int, fs: str = "synth") -> str:
    return f"{fs}-{'OST' if component == 'ost' else 'MDT'}{index:04x}"


def job_record(jobid: str, number: int, operations: tuple[str, ...], step: int = 0) -> list[str]:
    """One ``- job_id:`` record; counters grow with ``step`` (10 s per step)."""
    snapshot = SNAPSHOT + 10 * step + number % 7
    start = SNAPSHOT - 3600 - number % 1000
    lines = [
        f"- job_id:          {jobid}",
        f"  snapshot_time:   {snapshot}.000000001 secs.nsecs",
        f"  start_time:      {start}.000000001 secs.nsecs",
        f"  elapsed_time:    {snapshot - start}.000000000 secs.nsecs",
    ]
    for k, name in enumerate(operations):
        calls = ((number * 7919 + k * 104729) % 5000) * (1 + step) if (number + k) % 3 else 0
        if name in ("read_bytes", "write_bytes"):
            size = 4096 << (number % 8)
            lines.append(
                f"  {name + ':':<17}{{ samples: {calls:>11}, unit: bytes, min: {size:>8}, "
                f"max: {size * 4:>8}, sum: {calls * size * 2:>16}, sumsq: 0, hist: {{  }} }}"
            )
        else:
            low, high = (12, 90) if calls else (0, 0)
            lines.append(
                f"  {name + ':':<17}{{ samples: {calls:>11}, unit: usecs, min: {low:>8}, "
                f"max: {high:>8}, sum: {calls * 37:>16}, sumsq: {calls * 1900:>18} }}"
            )
    return lines


def target_text(
    component: str, index: int, jobs: int, step: int = 0, first_job: int = 0, fs: str = "synth"
) -> str:
    """``lctl get_param`` output of one target with ``jobs`` jobs."""
    operations = OST_OPERATIONS if component == "ost" else MDT_OPERATIONS
    param = "obdfilter" if component == "ost" else "mdt"
    lines = [f"{param}.{target_name(component, index, fs)}.job_stats=", "job_stats:"]
    for number in range(first_job, first_job + jobs):
        lines += job_record(f"job{number}", number + index, operations, step)
    return "\n".join(lines) + "\n"


def write_server(
    folder: Path, osts: int, mdts: int, jobs_per_target: int, step: int = 0, fs: str = "synth"
) -> list[Path]:
    """One file per target under ``folder`` (glob ``folder/*.txt``)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for component, count in (("ost", osts), ("mdt", mdts)):
        for index in range(count):
            path = folder / f"{target_name(component, index, fs)}.txt"
            path.write_text(target_text(component, index, jobs_per_target, step, fs=fs))
            paths.append(path)
    return paths
