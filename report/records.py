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

from hpcmon.report.influx import MEASUREMENTS, Rows
from hpcmon.report.model import (
    FILE_COLUMNS,
    DarshanData,
    FileTable,
    FunctionStat,
    GeopmEnergy,
    HeatmapSeries,
    ModuleTotals,
    TracedFile,
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


_RECORD_FIELDS = (
    "rank", "bytes_read", "bytes_written", "avg_read_size", "avg_write_size", "read_iops",
    "write_iops", "io_time", "small_read_ratio", "small_write_ratio", "seq_read_ratio",
    "seq_write_ratio", "unaligned_read_ratio", "unaligned_write_ratio", "meta_fraction",
    "reuse_proxy",
)  # fmt: skip


_NUMBER = (int, float)


def _column(records: list[dict], name: str) -> np.ndarray:
    """One field over all records as float64; absent, text or bool values are NaN."""
    values = [r.get(name) for r in records]
    values = [v if type(v) in _NUMBER else np.nan for v in values]
    with np.errstate(over="ignore"):
        return np.array(values, dtype=np.float64)


def _record_columns(module: str, records: list[dict]) -> dict[str, np.ndarray]:
    """The FileTable columns the signals rebuild exactly, column-wise (100,000 rows)."""
    f = {name: _column(records, name) for name in _RECORD_FIELDS}
    f["rank"] = np.array([_num(r, "rank") for r in records], dtype=np.float64)  # a tag: text
    reasons = [r.get("na_reasons") for r in records]

    def na(signal: str, reason: str, where: np.ndarray) -> np.ndarray:
        """Rows (among `where`, the few with no value) whose signal is NA for this reason."""
        key = f"{signal}:{reason}"
        hit = np.zeros(len(records), dtype=bool)
        for i in np.flatnonzero(where):
            text = reasons[i]
            hit[i] = isinstance(text, str) and key in text
        return hit

    def rint(values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(values), np.rint(values), np.nan)

    def count(moved: str, size: str, reason: str) -> np.ndarray:
        average = f[size]
        with np.errstate(divide="ignore", invalid="ignore"):
            ops = np.where(average > 0, rint(f[moved] / average), np.nan)
        return np.where(na(size, reason, np.isnan(ops)), 0.0, ops)

    def ratio_count(ratio: str, ops: np.ndarray) -> np.ndarray:
        value = rint(f[ratio] * ops)
        missing = np.isnan(f[ratio])
        none = (ops == 0) | na(ratio, "no_reads", missing) | na(ratio, "no_writes", missing)
        return np.where(missing & (none | na(ratio, "no_io", missing)), 0.0, value)

    reads = count("bytes_read", "avg_read_size", "no_reads")
    writes = count("bytes_written", "avg_write_size", "no_writes")
    out = {"rank": f["rank"], "bytes_read": f["bytes_read"], "bytes_written": f["bytes_written"]}
    out["reads"], out["writes"] = reads, writes
    for direction, ops in (("read", reads), ("write", writes)):
        iops = f[f"{direction}_iops"]
        with np.errstate(divide="ignore", invalid="ignore"):
            time = np.where((iops > 0) & ~np.isnan(ops), ops / iops, np.nan)
        missing = np.isnan(time)
        zero = na(f"{direction}_iops", f"no_{direction}_time", missing) | (ops == 0)
        out[f"{direction}_time"] = np.where(missing & zero, 0.0, time)
    if module != "POSIX":
        return out
    out["small_reads"] = ratio_count("small_read_ratio", reads)
    out["small_writes"] = ratio_count("small_write_ratio", writes)
    out["seq_reads"] = ratio_count("seq_read_ratio", reads)
    out["seq_writes"] = ratio_count("seq_write_ratio", writes)
    # POSIX_FILE_NOT_ALIGNED is shared by both ratios (see post_job/darshan/README.md)
    by_reads = ratio_count("unaligned_read_ratio", reads)
    by_writes = ratio_count("unaligned_write_ratio", writes)
    out["file_not_aligned"] = np.where(
        reads > 0,
        by_reads,
        np.where(writes > 0, by_writes, np.where((reads == 0) & (writes == 0), 0.0, np.nan)),
    )
    meta = f["meta_fraction"] * f["io_time"]
    out["meta_time"] = np.where(na("meta_fraction", "no_time", np.isnan(meta)), 0.0, meta)
    out["reuse"] = f["reuse_proxy"]
    return out


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
        table.record_ids = [str(row.get("record_id", "")) for row in records]
        table.files = [str(row.get("file", "")) for row in records]
        table.columns.update(_record_columns(module, records))
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


def traced_files_from_rows(rows: Rows) -> list[TracedFile]:
    merged: dict[str, TracedFile] = {}
    for row in rows.get("recorder_file", []):
        name = str(row.get("file", "?"))
        item = merged.setdefault(name, TracedFile(name, 0.0, 0.0, 0.0))
        item.accesses += _finite([_num(row, "accesses")])
        item.ranks = max(item.ranks, _finite([_num(row, "ranks")]))
        item.time += _finite([_num(row, "time_seconds")])
    return sorted(merged.values(), key=lambda f: -f.accesses)


def geopm_from_rows(rows: Rows) -> GeopmEnergy | None:
    totals = [r for r in rows.get("geopm_totals", []) if r.get("scope") == "application"]
    if not totals:
        return None
    energy = 0.0
    for row in totals:
        for name in ("package_energy_joules", "dram_energy_joules", "gpu_energy_joules"):
            energy += _finite([_num(row, name)])
    runtime = max(_finite(_num(r, "runtime_seconds") for r in totals), 0.0)
    hosts = len({str(r.get("host")) for r in totals})
    start = _finite([-_num(r, "time") for r in totals], default=np.nan)
    return GeopmEnergy(
        hosts, float(energy), float(runtime), -start / NS if np.isfinite(start) else None
    )


__all__ = [
    "FILE_COLUMNS",
    "darshan_from_rows",
    "functions_from_rows",
    "geopm_from_rows",
    "rows_from_points",
]
