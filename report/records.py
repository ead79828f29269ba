"""Post-job points (as rows from InfluxDB, or the hook's own Point objects) -> typed records.

The hook stores the job's record (post_job/darshan/record.py): per module every additive
counter summed over all records and the folded rule inputs, the raw counters of the top
records and of every shared file, and bytes per rank. The report reads a log through the same
points (report/darshan_log.py), so the database and the log give the same report.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from functools import partial
from itertools import repeat

import numpy as np

from hpcmon.post_job.darshan.record import RULE_INPUTS, prefix
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
        row = dict(point.fields)  # a copy of the whole dict at once: a record has many fields
        for key, value in point.tags.items():
            if value not in (None, ""):  # InfluxDB stores no empty tag
                row.setdefault(key, value)  # a field wins over a tag of the same name
        row["time"] = point.time_ns
        rows.setdefault(point.measurement, []).append(row)
    return rows


def na_reasons(row: dict) -> dict[str, str]:
    text = row.get("na_reasons") or ""
    pairs = (item.split(":", 1) for item in str(text).split(",") if ":" in item)
    return {name: reason for name, reason in pairs}


def _num(row: dict, name: str) -> float:
    return _float(row.get(name))


def _float(value) -> float:
    """A field as a float; NaN for what is no number (bool, None, text)."""
    if type(value) in _NUMBER:  # nearly every field: no bool (a subclass of int), no text
        return float(value)
    if isinstance(value, bool) or value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


_LARGEST = float(np.finfo(np.float64).max)


def _nan_to_num(value: float) -> np.float64:
    """``np.nan_to_num`` of one float (NaN 0, infinities the largest finite float), without
    its array machinery: it runs for several fields of every module row."""
    if math.isnan(value):
        return np.float64(0.0)
    return np.float64(min(max(value, -_LARGEST), _LARGEST))


def _finite(values: Iterable[float], default: float = 0.0) -> float:
    """The largest finite value, or default: hostile rows carry NaN, inf or text."""
    found = [v for v in values if math.isfinite(v)]
    return max(found) if found else default


def _int(value, default: int = 0, limit: int = 2**62) -> int:
    number = _float(value)
    if not math.isfinite(number) or abs(number) > limit:
        return default
    return int(number)


MAX_BINS = 1_000_000  # more heatmap bins than any Darshan log holds: a damaged point


_NUMBER = (int, float)
_NUMBER_OR_NONE = {int, float, type(None)}


def _fields(
    rows: list[dict], names: tuple[str, ...], convert: Callable[[object], float]
) -> np.ndarray:
    """Fields over all rows as float64, one row of the result per name: numbers as they are,
    absent values NaN, any other value through ``convert``. One numpy conversion for all:
    most inputs hold a few rows."""
    nan = np.nan  # a local: looked up once, not once per value
    return _floats([[r.get(name, nan) for r in rows] for name in names], convert)


def _floats(values: list[list], convert: Callable[[object], float]) -> np.ndarray:
    """Lists of values as one float64 array; each value through ``convert`` only when one of
    them is neither a number nor None (None is NaN in numpy)."""
    types: set[type] = set()
    for part in values:
        types.update(map(type, part))
    if not types <= _NUMBER_OR_NONE:
        values = [[convert(v) for v in part] for part in values]
    return np.array(values, dtype=np.float64)


def _number_or_nan(value) -> float:
    return value if type(value) in _NUMBER else np.nan


FEW_RECORDS = 8  # a table this small makes all its columns at once (see _read_columns)


def _read_columns(records: list[dict], name: str) -> dict[str, np.ndarray]:
    """Column ``name`` over all records as float64 (absent, text or bool values are NaN); for a
    table of few records every FILE_COLUMNS column with it: one numpy conversion then costs
    less than the many that the rules would ask for one at a time."""
    if len(records) > FEW_RECORDS:
        return {name: _fields(records, (name,), _number_or_nan)[0]}
    nan = np.nan
    by_record = [list(map(r.get, FILE_COLUMNS, repeat(nan))) for r in records]
    table = _floats(by_record, _number_or_nan).reshape(len(records), len(FILE_COLUMNS))
    return dict(zip(FILE_COLUMNS, table.T.copy(), strict=True))  # a contiguous row per column


def _numbers(rows: list[dict], *names: str) -> np.ndarray:
    """``_num`` of each row's fields, one row of the result per name."""
    return _fields(rows, names, _float)


def _whole(numbers: np.ndarray, default: int = 0, limit: int = 2**62) -> np.ndarray:
    """``_int`` of each number, as float64 (the same whole values: ``_int`` truncates)."""
    return np.where(np.abs(numbers) <= limit, np.trunc(numbers), default)  # NaN, inf: default


def _finite_or_zeros(values: np.ndarray) -> np.ndarray:
    """Each value, 0 where it is NaN or infinite (a hostile row's)."""
    return np.where(np.isfinite(values), values, 0.0)


def _in_order(rows: list[dict]) -> list[dict]:
    """Rows by log, then time: InfluxDB and the hook list them in different orders."""
    if not rows:  # nothing to convert (numpy's fixed cost is most of a small log's)
        return []
    times = _whole(_numbers(rows, "time")[0]).tolist()
    logs = [str(r.get("log", "")) for r in rows]
    order = sorted(range(len(rows)), key=times.__getitem__)
    order.sort(key=logs.__getitem__)  # a stable sort: by log, then time, then the rows' order
    return [rows[i] for i in order]


def _add_counters(totals: ModuleTotals, row: dict) -> None:
    """The fields of a darshan_module row that hold a counter sum (named with the module's
    prefix) or a folded rule input, added to the module's."""
    counter_prefix = prefix(totals.module).lower() + "_"
    counters = totals.counters
    for name, value in row.items():
        if type(value) not in _NUMBER or not (
            name.startswith(counter_prefix) or name in RULE_INPUTS
        ):
            continue
        value = float(value)
        if not math.isfinite(value):
            continue
        known = counters.get(name)
        if known is None:
            counters[name] = value
        elif name.startswith("max_"):
            counters[name] = max(known, value)
        else:
            counters[name] = known + value


def darshan_from_rows(rows: Rows) -> DarshanData | None:
    jobs = rows.get("darshan_job", [])
    if not jobs:
        return None
    data = DarshanData(logs=len(jobs), source="InfluxDB points")
    starts = [_num(j, "start_time") for j in jobs]
    ends = [_num(j, "end_time") for j in jobs]
    data.start = -_finite([-v for v in starts], default=np.nan)
    data.end = _finite(ends, default=np.nan)
    if not (math.isfinite(data.start) and math.isfinite(data.end)):
        data.start = data.end = None
    data.runtime = max(_finite(_num(j, "runtime") for j in jobs), 0.0)
    data.nprocs = max(_int(_finite(_num(j, "nprocs") for j in jobs), limit=2**31), 0)
    data.exe = str(_in_order(jobs)[0].get("exe", ""))
    for job in jobs:
        data.counted_modules.update(m for m in str(job.get("counted_modules", "")).split(",") if m)
        data.module_names.update(m for m in str(job.get("modules", "")).split(",") if m)
    for row in _in_order(rows.get("darshan_module", [])):
        module = str(row.get("module", ""))
        totals = data.modules.setdefault(module, ModuleTotals(module))
        totals.bytes_read += _nan_to_num(_num(row, "total_bytes_read"))
        totals.bytes_written += _nan_to_num(_num(row, "total_bytes_written"))
        totals.reads += _nan_to_num(_num(row, "total_reads"))
        totals.writes += _nan_to_num(_num(row, "total_writes"))
        totals.records += max(_int(row.get("records"), limit=2**40), 0)
        totals.time_by_slowest += _nan_to_num(_num(row, "agg_time_by_slowest"))
        _add_counters(totals, row)
    by_module: dict[str, list[dict]] = defaultdict(list)
    for row in rows.get("darshan_record", []):
        by_module[str(row.get("module", ""))].append(row)
    for module in sorted(by_module):
        records = _in_order(by_module[module])
        data.files[module] = FileTable(
            module,
            record_ids=[str(row.get("record_id", "")) for row in records],
            files=[str(row.get("file", "")) for row in records],
            columns={},  # each made from the records when first read
            total_records=max(len(records), data.modules.get(module, ModuleTotals("")).records),
            read_columns=partial(_read_columns, records),
        )
    data.heatmaps = _heatmaps(rows)
    data.ranks = _ranks(rows)
    return data


def _ranks(rows: Rows) -> dict[int, tuple[float, float, float]]:
    out: dict[int, tuple[float, float, float]] = {}
    ordered = _in_order(rows.get("darshan_rank", []))
    if not ordered:
        return out
    numbers = _numbers(ordered, "rank", "bytes_read", "bytes_written", "io_time")
    ranks = _whole(numbers[0], default=-1, limit=2**31).astype(np.int64).tolist()
    reads, writes, io_times = _finite_or_zeros(numbers[1:]).tolist()
    for rank, read, written, io_time in zip(ranks, reads, writes, io_times, strict=True):
        if rank < 0:
            continue
        known = out.get(rank, (0.0, 0.0, 0.0))
        out[rank] = (known[0] + read, known[1] + written, known[2] + io_time)
    return out


def _heatmaps(rows: Rows) -> list[HeatmapSeries]:
    widths = {}
    for row in rows.get("darshan_heatmap", []):
        key = (str(row.get("log", "")), str(row.get("module")), _int(row.get("time")))
        widths[key] = (_num(row, "bin_width"), _int(row.get("nbins"), limit=MAX_BINS))
    series: list[tuple[str, int, float, list[float], list[float]]] = []
    # (log, module) -> (start, end, bins, read, write) of each of its series, filled below;
    # times as floats (start_ns is a float's whole value): int-float comparisons are slower
    windows: dict[tuple[str, str], list[tuple[float, float, int, list[float], list[float]]]] = (
        defaultdict(list)
    )
    for (log, module, start_ns), (width, nbins) in sorted(
        widths.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])
    ):
        if not math.isfinite(width) or width <= 0 or nbins <= 0:
            continue
        read, write = [0.0] * nbins, [0.0] * nbins
        end_ns = start_ns + nbins * width * NS
        windows[(log, module)].append((float(start_ns), end_ns, nbins, read, write))
        series.append((module, start_ns, width, read, write))
    if not series:
        return []
    bins = rows.get("darshan_heatmap_bin", [])
    numbers = _numbers(bins, "time", "bin", "read_bytes", "write_bytes")
    times = _whole(numbers[0]).tolist()
    ks = _whole(numbers[1], default=-1).astype(np.int64).tolist()
    reads, writes = _finite_or_zeros(numbers[2:]).tolist()
    # one pass over the bins in their order: each series adds its bins in that order
    for row, t, k, moved_read, moved_write in zip(bins, times, ks, reads, writes, strict=True):
        key = (str(row.get("log", "")), str(row.get("module")))
        for start_ns, end_ns, nbins, read, write in windows.get(key, ()):
            if start_ns <= t < end_ns and 0 <= k < nbins:
                read[k] += moved_read
                write[k] += moved_write
    return [
        HeatmapSeries(module, start_ns / NS, float(width), np.array(read), np.array(write))
        for module, start_ns, width, read, write in series
    ]


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
