"""Post-job points (as rows from InfluxDB, or the hook's own Point objects) -> typed records.

The hook stores signals, not raw counters, and only the top records of each module (plus every
shared file). Counts are rebuilt from the signals where the spec makes that exact
(reads = bytes_read / avg_read_size, small reads = small_read_ratio x reads, ...); what the
signals cannot give (memory alignment, per-rank time extremes, MPI-IO collective counts)
stays NaN, and ``FileTable.complete`` says whether every record of the module is there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from report.influx import MEASUREMENTS, Rows
from report.model import (
    FILE_COLUMNS,
    DarshanData,
    FileTable,
    FunctionStat,
    GeopmEnergy,
    HeatmapSeries,
    ModuleTotals,
)

NS = 1e9


def rows_from_points(points: Iterable) -> Rows:
    """The rows InfluxDB would return for these points (tags and fields merged, time in ns)."""
    rows: Rows = {m: [] for m in MEASUREMENTS}
    for point in points:
        row = {k: v for k, v in point.tags.items() if v not in (None, "")}
        row.update(point.fields)
        row["time"] = point.time_ns
        rows.setdefault(point.measurement, []).append(row)
    return rows


def na_reasons(row: dict) -> dict[str, str]:
    text = row.get("na_reasons") or ""
    pairs = (item.split(":", 1) for item in str(text).split(",") if ":" in item)
    return {name: reason for name, reason in pairs}


def _num(row: dict, name: str) -> float:
    value = row.get(name)
    if isinstance(value, bool) or value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _finite(values: Iterable[float], default: float = 0.0) -> float:
    """The largest finite value, or default: hostile rows carry NaN, inf or text."""
    found = [v for v in values if np.isfinite(v)]
    return max(found) if found else default


def _int(value, default: int = 0, limit: int = 2**62) -> int:
    number = _num({"v": value}, "v")
    if not np.isfinite(number) or abs(number) > limit:
        return default
    return int(number)


MAX_BINS = 1_000_000  # more heatmap bins than any Darshan log holds: a damaged point


def _round(value: float) -> float:
    """Nearest integer count, NaN when unknown or not finite (never raises)."""
    return float(np.rint(value)) if np.isfinite(value) else np.nan


def _count(row: dict, reasons: dict[str, str], moved: str, size: str, none_reason: str) -> float:
    """Operations from bytes / average size; 0 when the signal is NA for having none."""
    average = _num(row, size)
    if average > 0:
        return _round(_num(row, moved) / average)
    if reasons.get(size) == none_reason:
        return 0.0
    return np.nan


def _ratio_count(row: dict, reasons: dict[str, str], ratio: str, ops: float) -> float:
    value = _num(row, ratio)
    if not np.isnan(value):
        return _round(value * ops)
    if ops == 0 or reasons.get(ratio) in ("no_reads", "no_writes", "no_io"):
        return 0.0
    return np.nan


def _record_values(row: dict) -> dict[str, float]:
    reasons = na_reasons(row)
    reads = _count(row, reasons, "bytes_read", "avg_read_size", "no_reads")
    writes = _count(row, reasons, "bytes_written", "avg_write_size", "no_writes")
    io_time = _num(row, "io_time")
    values = {
        "rank": _num(row, "rank"),
        "bytes_read": _num(row, "bytes_read"),
        "bytes_written": _num(row, "bytes_written"),
        "reads": reads,
        "writes": writes,
    }
    for direction, ops in (("read", reads), ("write", writes)):
        iops = _num(row, f"{direction}_iops")
        if iops > 0 and not np.isnan(ops):
            values[f"{direction}_time"] = ops / iops
        elif reasons.get(f"{direction}_iops") == f"no_{direction}_time" or ops == 0:
            values[f"{direction}_time"] = 0.0
    if row.get("module") == "POSIX":
        values["small_reads"] = _ratio_count(row, reasons, "small_read_ratio", reads)
        values["small_writes"] = _ratio_count(row, reasons, "small_write_ratio", writes)
        values["seq_reads"] = _ratio_count(row, reasons, "seq_read_ratio", reads)
        values["seq_writes"] = _ratio_count(row, reasons, "seq_write_ratio", writes)
        # POSIX_FILE_NOT_ALIGNED is shared by both ratios (see post_job/darshan/README.md)
        if reads and reads > 0:
            values["file_not_aligned"] = _ratio_count(row, reasons, "unaligned_read_ratio", reads)
        elif writes and writes > 0:
            values["file_not_aligned"] = _ratio_count(row, reasons, "unaligned_write_ratio", writes)
        elif reads == 0 and writes == 0:
            values["file_not_aligned"] = 0.0
        fraction = _num(row, "meta_fraction")
        if not np.isnan(fraction):
            values["meta_time"] = fraction * io_time
        elif reasons.get("meta_fraction") == "no_time":
            values["meta_time"] = 0.0
        values["reuse"] = _num(row, "reuse_proxy")
    return values


def darshan_from_rows(rows: Rows) -> DarshanData | None:
    jobs = rows.get("darshan_job", [])
    if not jobs:
        return None
    data = DarshanData(logs=len(jobs), source="InfluxDB points")
    starts = [_num(j, "start_time") for j in jobs]
    ends = [_num(j, "end_time") for j in jobs]
    data.start = -_finite([-v for v in starts], default=np.nan)
    data.end = _finite(ends, default=np.nan)
    if not (np.isfinite(data.start) and np.isfinite(data.end)):
        data.start = data.end = None
    data.runtime = max(_finite(_num(j, "runtime") for j in jobs), 0.0)
    data.nprocs = max(_int(_finite(_num(j, "nprocs") for j in jobs), limit=2**31), 0)
    data.exe = str(jobs[0].get("exe", ""))
    for job in jobs:
        data.counted_modules.update(m for m in str(job.get("counted_modules", "")).split(",") if m)
        data.module_names.update(m for m in str(job.get("modules", "")).split(",") if m)
    for row in rows.get("darshan_module", []):
        module = str(row.get("module", ""))
        totals = data.modules.setdefault(module, ModuleTotals(module))
        totals.bytes_read += np.nan_to_num(_num(row, "total_bytes_read"))
        totals.bytes_written += np.nan_to_num(_num(row, "total_bytes_written"))
        totals.reads += np.nan_to_num(_num(row, "total_reads"))
        totals.writes += np.nan_to_num(_num(row, "total_writes"))
        totals.records += max(_int(row.get("records"), limit=2**40), 0)
        totals.time_by_slowest += np.nan_to_num(_num(row, "agg_time_by_slowest"))
    by_module: dict[str, list[dict]] = defaultdict(list)
    for row in rows.get("darshan_record", []):
        by_module[str(row.get("module", ""))].append(row)
    for module, records in by_module.items():
        table = FileTable.empty(module, len(records))
        table.total_records = max(len(records), data.modules.get(module, ModuleTotals("")).records)
        for i, row in enumerate(records):
            table.record_ids[i] = str(row.get("record_id", ""))
            table.files[i] = str(row.get("file", ""))
            for name, value in _record_values(row).items():
                table.columns[name][i] = value
        data.files[module] = table
    data.heatmaps = _heatmaps(rows)
    return data


def _heatmaps(rows: Rows) -> list[HeatmapSeries]:
    widths = {}
    for row in rows.get("darshan_heatmap", []):
        key = (str(row.get("module")), _int(row.get("time")))
        widths[key] = (_num(row, "bin_width"), _int(row.get("nbins"), limit=MAX_BINS))
    series = []
    bins_by_key: dict[str, list[dict]] = defaultdict(list)
    for row in rows.get("darshan_heatmap_bin", []):
        bins_by_key[str(row.get("module"))].append(row)
    for (module, start_ns), (width, nbins) in sorted(widths.items(), key=lambda kv: kv[0][1]):
        if not np.isfinite(width) or width <= 0 or nbins <= 0:
            continue
        read = np.zeros(nbins)
        write = np.zeros(nbins)
        end_ns = start_ns + nbins * width * NS
        for row in bins_by_key.get(module, []):
            t = _int(row.get("time"))
            k = _int(row.get("bin"), default=-1)
            if start_ns <= t < end_ns and 0 <= k < nbins:
                read[k] += _finite([_num(row, "read_bytes")])
                write[k] += _finite([_num(row, "write_bytes")])
        series.append(HeatmapSeries(module, start_ns / NS, float(width), read, write))
    return series


def functions_from_rows(rows: Rows) -> list[FunctionStat]:
    out = []
    merged: dict[tuple[str, str], FunctionStat] = {}
    for source, measurement, calls in (
        ("recorder", "recorder_function", "count"),
        ("viztracer", "viztracer_function", "calls"),
    ):
        for row in rows.get(measurement, []):
            name = str(row.get("function", "?"))
            stat = merged.setdefault((source, name), FunctionStat(name, 0.0, 0.0, None, source))
            stat.calls += np.nan_to_num(_num(row, calls))
            stat.total_time += np.nan_to_num(_num(row, "total_time_seconds"))
            self_time = _num(row, "self_time_seconds")
            if not np.isnan(self_time):
                stat.self_time = (stat.self_time or 0.0) + self_time
    out = sorted(merged.values(), key=lambda s: -s.total_time)
    return out


def geopm_from_rows(rows: Rows) -> GeopmEnergy | None:
    totals = [r for r in rows.get("geopm_totals", []) if r.get("scope") == "application"]
    if not totals:
        return None
    energy = 0.0
    for row in totals:
        for name in ("package_energy_joules", "dram_energy_joules", "gpu_energy_joules"):
            energy += np.nan_to_num(_num(row, name))
    runtime = max(np.nan_to_num(_num(r, "runtime_seconds")) for r in totals)
    hosts = len({r.get("host") for r in totals})
    return GeopmEnergy(hosts, float(energy), float(runtime))


__all__ = [
    "FILE_COLUMNS",
    "darshan_from_rows",
    "functions_from_rows",
    "geopm_from_rows",
    "rows_from_points",
]
