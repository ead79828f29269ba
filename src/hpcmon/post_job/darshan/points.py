"""InfluxDB points from Darshan signals: job, module (+ the job's record, record.py), top-K
records, ranks, heatmap and its bins.

Field names are the spec's signal names in lower case; NA signals are left out of the point
and listed in the string field ``na_reasons`` (``signal:reason,...``). Every point is stamped
from the log (job start, or job start + k x bin width), so re-running writes the same points.
"""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet
from itertools import compress

import numpy as np

from hpcmon.common.timeutil import NS_PER_SECOND, seconds_to_ns
from hpcmon.post_job.darshan.model import JobInfo
from hpcmon.post_job.darshan.record import (
    counter_sums,
    rank_totals,
    record_columns,
    rule_inputs,
)
from hpcmon.post_job.darshan.signals import (
    NA,
    NA_REASONS,
    HeatmapSignals,
    LogSignals,
    RecordSignals,
    Value,
)
from hpcmon.post_job.points import Point

HEATMAP_BIN_MEASUREMENT = "darshan_heatmap_bin"  # a point per bin, zero runs left out


def _fields(values: dict[str, Value]) -> dict[str, int | float | str]:
    fields: dict[str, int | float | str] = {}
    reasons = []
    for name, value in values.items():
        if isinstance(value, NA):
            reasons.append(f"{name}:{value.reason}")
        else:
            fields[name] = value
    if reasons:
        fields["na_reasons"] = ",".join(reasons)
    return fields


def top_record_rows(records: RecordSignals, top: int) -> np.ndarray:
    """Rows kept as points: the top-K by bytes moved, the top-K by I/O time, all shared files."""
    if len(records) == 0:
        return np.zeros(0, dtype=np.int64)
    if top >= len(records):  # every record is in the top-K
        return np.arange(len(records), dtype=np.int64)
    moved = records.bytes_read + records.bytes_written
    keep = np.flatnonzero(records.ranks == -1)
    if top > 0:
        by_bytes = np.argsort(-moved, kind="stable")[:top]
        by_time = np.argsort(-records.io_time, kind="stable")[:top]
        keep = np.concatenate([keep, by_bytes, by_time])
    return np.unique(keep)


def log_points(
    job: JobInfo,
    signals: LogSignals,
    base_tags: dict[str, str],
    names: dict[int, str],
    top_records: int,
    *,
    flagged: AbstractSet[str] = frozenset(),
    partial_modules: list[str] | None = None,
) -> list[Point]:
    """``flagged``: header fields found implausible (left out, listed in ``na_reasons``);
    ``partial_modules``: every module Darshan flagged partial, DXT_* included.

    Series per log (the budget, docs/post-job-data.md): 1 job + 1 per module (records fold
    into their module's series, one point per record at start + k ns) + 2 per heatmap
    submodule + 1 for the ranks (one point per rank at start + rank ns), whatever the ranks and
    records."""
    start_ns = seconds_to_ns(job.start_time)
    job_fields = _job_fields(job, signals, flagged, partial_modules)
    points = [Point("darshan_job", dict(base_tags), job_fields, start_ns)]
    for module in signals.modules:
        fields = _fields(module.values)
        fields["records"] = module.records
        fields["partial"] = module.partial
        if module.inconsistent:
            fields["inconsistent"] = module.inconsistent
        table = signals.tables.get(module.module)
        if table is not None:
            fields.update(counter_sums(table))
            fields.update(rule_inputs(table))
        points.append(
            Point("darshan_module", {**base_tags, "module": module.module}, fields, start_ns)
        )
    for records in signals.records:
        points.extend(_record_points(records, signals, base_tags, names, top_records, start_ns))
    points.extend(_rank_points(signals, base_tags, start_ns))
    for heatmap in signals.heatmap_totals:
        tags = {**base_tags, "module": heatmap.submodule}
        fields = _fields(heatmap.values)
        fields["bin_width"] = float(heatmap.bin_width)
        fields["nbins"] = int(len(heatmap.read_bins))
        points.append(Point("darshan_heatmap", tags, fields, start_ns))
        points.extend(_bin_points(heatmap, tags, start_ns))
    return points


def _bin_points(heatmap: HeatmapSignals, tags: dict[str, str], start_ns: int) -> list[Point]:
    """A point per bin at start + k x width (seconds_to_ns of each offset, vectorised: the
    same float products and the same round-half-even), except the zero bins between two zero
    bins: a missing bin is 0 (``darshan_heatmap`` holds ``nbins``), and the zeros kept next to
    each burst, the first and the last bin make any interpolation between points give 0 there
    too. A sparse heatmap (a few bursts in a long run, the usual case) gives a few points."""
    count, width = len(heatmap.read_bins), heatmap.bin_width
    if count == 0:
        return []
    active = (heatmap.read_bins != 0) | (heatmap.write_bins != 0)
    kept = active.copy()
    kept[1:] |= active[:-1]
    kept[:-1] |= active[1:]
    kept[0] = kept[-1] = True
    bins = np.flatnonzero(kept)
    if math.isfinite(width) and abs(width) * count < 2**62 / NS_PER_SECOND:
        offsets = np.rint(bins * width * NS_PER_SECOND).astype(np.int64).tolist()
    else:  # what no log holds; seconds_to_ns says what is wrong
        offsets = [seconds_to_ns(k * width) for k in bins.tolist()]
    reads = heatmap.read_bins[bins].astype(np.int64, copy=False).tolist()
    writes = heatmap.write_bins[bins].astype(np.int64, copy=False).tolist()
    return [
        Point(
            HEATMAP_BIN_MEASUREMENT,
            tags.copy(),
            {"read_bytes": read, "write_bytes": written, "bin": k},
            start_ns + offset,
        )
        for k, read, written, offset in zip(bins.tolist(), reads, writes, offsets, strict=True)
    ]


def _record_points(
    records: RecordSignals,
    signals: LogSignals,
    base_tags: dict[str, str],
    names_by_id: dict[int, str],
    top: int,
    start_ns: int,
) -> list[Point]:
    """The kept records of one module, all in the module's series: record k of the module at
    start + k ns, its rank and record id as fields."""
    kept = top_record_rows(records, top)
    if not len(kept):
        return []
    table = signals.tables.get(records.module)
    every, shared = record_columns(table, kept) if table is not None else ({}, {})
    rows = kept if len(kept) < len(records) else slice(None)  # usually all of them
    ranks, ids = records.ranks[rows].tolist(), records.record_ids[rows].tolist()
    moved_read, moved_written = (
        records.bytes_read[rows].tolist(),
        records.bytes_written[rows].tolist(),
    )
    io_time = records.io_time[rows].tolist()
    tags = {**base_tags, "module": records.module}
    names = list(records.columns)
    columns = records.columns.values()
    values = [column.values[rows].tolist() for column in columns]
    codes = [column.codes[rows].tolist() for column in columns]
    # per kept record: its signal values and NA codes
    value_rows = zip(*values, strict=True) if values else [()] * len(kept)
    code_rows = zip(*codes, strict=True) if codes else [()] * len(kept)
    # records with the same NA signals keep the same fields and have the same na_reasons
    layouts: dict[tuple[int, ...], tuple[list[bool], str]] = {}
    points = []
    for k, (row_values, row_codes) in enumerate(zip(value_rows, code_rows, strict=True)):
        fields: dict[str, int | float | str]
        if any(row_codes):  # what _fields makes of records.row(k)
            layout = layouts.get(row_codes)
            if layout is None:
                layout = layouts[row_codes] = _na_layout(names, row_codes)
            present, reasons = layout
            fields = dict(compress(zip(names, row_values, strict=True), present))
            fields["na_reasons"] = reasons
        else:
            fields = dict(zip(names, row_values, strict=True))
        record_id = int(ids[k])
        fields["record_id"] = str(record_id)
        fields["rank"] = int(ranks[k])
        fields["file"] = names_by_id.get(record_id, "")
        fields["bytes_read"] = int(moved_read[k])
        fields["bytes_written"] = int(moved_written[k])
        fields["io_time"] = float(io_time[k])
        for name, column in every.items():
            fields[name] = column[k]
        if ranks[k] == -1:
            for name, column in shared.items():
                fields[name] = column[k]
        points.append(Point("darshan_record", tags.copy(), fields, start_ns + k))
    return points


def _na_layout(names: list[str], codes: tuple[int, ...]) -> tuple[list[bool], str]:
    """Which signals of a record are values (not NA), and its ``na_reasons``, given its NA
    code per signal."""
    present = [not code for code in codes]
    reasons = [
        f"{name}:{NA_REASONS[code - 1]}" for name, code in zip(names, codes, strict=True) if code
    ]
    return present, ",".join(reasons)


def _rank_points(signals: LogSignals, base_tags: dict[str, str], start_ns: int) -> list[Point]:
    """Bytes and I/O time of each rank on its own files, in the job totals' modules (the
    lowest layers, so nothing is counted twice): one series, rank r at start + r ns."""
    tables = [signals.tables[m] for m in signals.counted_modules if m in signals.tables]
    ranks, read, written, time = rank_totals(tables)
    return [
        Point(
            "darshan_rank",
            dict(base_tags),
            {"rank": rank, "bytes_read": r, "bytes_written": w, "io_time": t},
            start_ns + rank,
        )
        for rank, r, w, t in zip(
            ranks.tolist(), read.tolist(), written.tolist(), time.tolist(), strict=True
        )
    ]


def _job_fields(
    job: JobInfo,
    signals: LogSignals,
    flagged: AbstractSet[str],
    partial_modules: list[str] | None,
) -> dict[str, int | float | str]:
    fields = _fields(signals.job)
    fields.update(
        {
            "nprocs": int(job.nprocs),
            "runtime": float(job.run_time),
            "exe": job.exe_name,
            "exe_cmdline": job.exe,
            "log_jobid": job.log_jobid,
            "log_version": job.log_version,
            "start_time": int(job.start_time),
            "end_time": int(job.end_time),
            "modules": ",".join(m.module for m in signals.modules),
            "counted_modules": ",".join(signals.counted_modules),
            "inconsistent_modules": ",".join(m.module for m in signals.modules if m.inconsistent),
            "partial_modules": ",".join(
                partial_modules
                if partial_modules is not None
                else [m.module for m in signals.modules if m.partial]
            ),
        }
    )
    if job.uid is not None:
        fields["uid"] = int(job.uid)
    for name in sorted(flagged):
        fields.pop(name, None)
        reasons = fields.get("na_reasons")
        entry = f"{name}:implausible_header"
        fields["na_reasons"] = f"{reasons},{entry}" if reasons else entry
    if "lib_ver" in job.metadata:
        fields["lib_ver"] = job.metadata["lib_ver"]
    return fields
