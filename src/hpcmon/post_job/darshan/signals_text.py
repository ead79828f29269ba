"""The spec's text output: the preserved log header, then one line per signal.

Lines are ``MODULE<TAB>rank<TAB>record_id<TAB>SIGNAL_NAME<TAB>value``. Job lines use module
``JOB`` and record id ``JOB_AGG``; module lines use rank -1 and record id ``MODULE_PERF``
(time-based signals: bandwidth, IOPS, Darshan's agg_*_by_slowest) or ``MODULE_AGG`` (sizes
and totals); HEATMAP has no module lines (spec v2.2). HEATMAP lines are per rank, as Darshan
stores them (never rank -1); the job series summed over ranks goes to the points only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hpcmon.post_job.darshan.model import JobInfo
from hpcmon.post_job.darshan.signals import NA, LogSignals, Value
from hpcmon.post_job.files import replaced_atomically

_RULE = "# " + "=" * 60
# module signals that need the module's time; the others are sizes and totals (MODULE_AGG)
MODULE_PERF_SIGNALS = frozenset(
    ("read_bw", "write_bw", "read_iops", "write_iops", "agg_time_by_slowest", "agg_perf_by_slowest")
)


def format_value(value: Value) -> str:
    if isinstance(value, NA):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return repr(float(value) + 0.0)  # + 0.0: never "-0.0"


def signal_lines(job: JobInfo, signals: LogSignals) -> Iterator[str]:
    yield _RULE
    yield "# ORIGINAL DARSHAN LOG HEADER"
    yield _RULE
    yield from job.header_lines
    yield ""
    for name, value in signals.job.items():
        yield f"JOB\t-1\tJOB_AGG\tSIGNAL_{name.upper()}\t{format_value(value)}"
    for module in signals.modules:
        for name, value in module.values.items():
            record = "MODULE_PERF" if name in MODULE_PERF_SIGNALS else "MODULE_AGG"
            yield f"{module.module}\t-1\t{record}\tSIGNAL_{name.upper()}\t{format_value(value)}"
    for records in signals.records:
        names = [(name, f"SIGNAL_{name.upper()}") for name in records.columns]
        for row in range(len(records)):
            prefix = f"{records.module}\t{records.ranks[row]}\t{records.record_ids[row]}\t"
            for name, label in names:
                value = format_value(records.columns[name].get(row))
                yield f"{prefix}{label}\t{value}"
    for group in signals.heatmap_groups:
        labels = [(name, f"SIGNAL_{name.upper()}") for name in group.columns]
        for row, record in enumerate(group.records):
            prefix = f"HEATMAP\t{record.rank}\t{record.record_id}\t"
            for name, label in labels:
                yield f"{prefix}{label}\t{format_value(group.columns[name].get(row))}"


def write_signals(path: Path, logs: list[tuple[JobInfo, LogSignals]]) -> None:
    """Write the signals of one or more logs (one header block each) to ``path``, replacing
    it only once complete (a re-run or a killed hook never leaves half a file)."""
    with replaced_atomically(path) as handle:
        for job, signals in logs:
            for line in signal_lines(job, signals):
                handle.write(line)
                handle.write("\n")
