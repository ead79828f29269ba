"""The spec's text output: the preserved log header, then one line per signal.

Lines are ``MODULE<TAB>rank<TAB>record_id<TAB>SIGNAL_NAME<TAB>value``. Job lines use module
``JOB`` and record id ``JOB_AGG``; module lines use rank -1 and record id ``MODULE_AGG``;
job-level HEATMAP lines (bins summed over ranks) use rank -1 and the submodule's record id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from post_job.darshan.model import JobInfo
from post_job.darshan.signals import NA, LogSignals, Value

_RULE = "# " + "=" * 60


def format_value(value: Value) -> str:
    if isinstance(value, NA):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


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
            yield f"{module.module}\t-1\tMODULE_AGG\tSIGNAL_{name.upper()}\t{format_value(value)}"
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
    for heatmap in signals.heatmap_totals:
        prefix = f"HEATMAP\t{heatmap.rank}\t{heatmap.record_id}\t"
        for name, value in heatmap.values.items():
            yield f"{prefix}SIGNAL_{name.upper()}\t{format_value(value)}"


def write_signals(path: Path, logs: list[tuple[JobInfo, LogSignals]]) -> None:
    """Write the signals of one or more logs (one header block each) to ``path``."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for job, signals in logs:
            for line in signal_lines(job, signals):
                handle.write(line)
                handle.write("\n")
