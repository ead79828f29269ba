"""Post-job points (as rows from InfluxDB, or the hook's own Point objects) -> typed records.

The hook stores the job's record (post_job/darshan/record.py): per module every additive
counter summed over all records and the folded rule inputs, the raw counters of the top
records and of every shared file, and bytes per rank. The report reads a log through the same
points (report/darshan_log.py), so the database and the log give the same report.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from functools import partial
from itertools import repeat

import numpy as np

from hpcmon.common.fields import finite_field
from hpcmon.post_job.darshan.record import RULE_INPUTS, prefix
from hpcmon.post_job.layout import NS_PER_SECOND, SLOT_WIDTH
from hpcmon.report.influx import MEASUREMENTS, Rows
from hpcmon.report.model import (
    FILE_COLUMNS,
    DarshanData,
    FileTable,
    FunctionStat,
    GeopmEnergy,
    HeatmapSeries,
    ModuleTotals,
    SlurmView,
    TracedFile,
)


def rows_from_points(points: Iterable) -> Rows:
    """The rows InfluxDB would return for these points (tags and fields merged, time in ns)."""
    rows: Rows = {m: [] for m in MEASUREMENTS}
    for point in points:
        tags, fields = point.tags, point.fields
        row = dict(fields)  # copied whole (a record point has many fields), then the tags
        row.update(tags)
        if len(row) < len(fields) + len(tags) or not all(tags.values()):
            # a tag named like a field (the field wins) or an empty tag (InfluxDB stores none)
            row = {k: v for k, v in tags.items() if v not in (None, "")}
            row.update(fields)
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


def _finite_or_zero(value: float) -> float:
    """``_finite([value])`` for one value, without the list (once per heatmap bin)."""
    return value if math.isfinite(value) else 0.0


def _finite(values: Iterable[float], default: float = 0.0) -> float:
    """The largest finite value, or default: hostile rows carry NaN, inf or text."""
    found = [v for v in values if math.isfinite(v)]
    return max(found) if found else default


def _int(value, default: int = 0, limit: int = 2**62) -> int:
    """A field as an int (exact: a time in ns does not fit a float), or ``default`` for what
    is no finite number or beyond ``limit``."""
    if type(value) is int:  # times, ranks, counts: nearly every call
        return value if -limit <= value <= limit else default
    number = _float(value)
    if not math.isfinite(number) or abs(number) > limit:
        return default
    return int(number)


MAX_BINS = 1_000_000  # more heatmap bins than any Darshan log holds: a damaged point


_NUMBER = (int, float)
_NUMBER_OR_NONE = {int, float, type(None)}


def _floats(values: list[list]) -> np.ndarray:
    """Lists of values as one float64 array: absent, text or bool values are NaN (each value
    is looked at only when one of them is neither a number nor None, which numpy makes NaN)."""
    types: set[type] = set()
    for part in values:
        types.update(map(type, part))
    if not types <= _NUMBER_OR_NONE:
        values = [[v if type(v) in _NUMBER else np.nan for v in part] for part in values]
    return np.array(values, dtype=np.float64)


FEW_RECORDS = 8  # a table this small makes all its columns at once (see _read_columns)


def _read_columns(records: list[dict], name: str) -> dict[str, np.ndarray]:
    """Column ``name`` over all records as float64 (absent, text or bool values are NaN); for a
    table of few records every FILE_COLUMNS column with it: one numpy conversion then costs
    less than the many that the rules would ask for one at a time."""
    nan = np.nan  # a local: looked up once, not once per value
    if len(records) > FEW_RECORDS:
        return {name: _floats([[r.get(name, nan) for r in records]])[0]}
    by_record = [list(map(r.get, FILE_COLUMNS, repeat(nan))) for r in records]
    by_column = _floats(by_record).T.copy()  # a contiguous row per column
    return dict(zip(FILE_COLUMNS, by_column, strict=True))


def _in_order(rows: list[dict]) -> list[dict]:
    """Rows by log, then time: InfluxDB and the hook list them in different orders."""
    return sorted(rows, key=lambda r: (str(r.get("log", "")), _int(r.get("time"))))


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
    data.read_heatmaps = partial(
        _heatmaps, rows.get("darshan_heatmap", []), rows.get("darshan_heatmap_bin", [])
    )
    data.read_ranks = partial(_ranks, rows.get("darshan_rank", []))
    return data


def _ranks(rank_rows: list[dict]) -> dict[int, tuple[float, float, float]]:
    out: dict[int, tuple[float, float, float]] = {}
    for row in _in_order(rank_rows):
        rank = _int(row.get("rank"), default=-1, limit=2**31)
        if rank < 0:
            continue
        values = [
            _finite_or_zero(_num(row, name)) for name in ("bytes_read", "bytes_written", "io_time")
        ]
        known = out.get(rank, (0.0, 0.0, 0.0))
        out[rank] = (known[0] + values[0], known[1] + values[1], known[2] + values[2])
    return out


def _heatmaps(heatmap_rows: list[dict], bin_rows: list[dict]) -> list[HeatmapSeries]:
    """A series per heatmap point (log, submodule); its bins are the bin points of the same
    log and submodule, placed by their ``bin`` field. Stored times keep only their second
    (post_job/layout.py: the nanoseconds are the job's slot and a point's place), so a bin is
    matched to its heatmap by seconds: from the heatmap's to the end of its last bin, plus the
    seconds a place may carry over (the heatmap of another run of one log name starts later)."""
    widths = {}
    for row in heatmap_rows:
        key = (str(row.get("log", "")), str(row.get("module")), _int(row.get("time")))
        widths[key] = (_num(row, "bin_width"), _int(row.get("nbins"), limit=MAX_BINS))
    series = []
    bins_by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in bin_rows:
        bins_by_key[(str(row.get("log", "")), str(row.get("module")))].append(row)
    for (log, module, start_ns), (width, nbins) in sorted(
        widths.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])
    ):
        if not np.isfinite(width) or width <= 0 or nbins <= 0:
            continue
        read = np.zeros(nbins)
        write = np.zeros(nbins)
        first = start_ns // NS_PER_SECOND
        last = first + math.ceil(nbins * width) + 1 + nbins // SLOT_WIDTH
        for row in bins_by_key.get((log, module), []):
            second = _int(row.get("time")) // NS_PER_SECOND
            k = _int(row.get("bin"), default=-1)
            if first <= second <= last and 0 <= k < nbins:
                read[k] += _finite_or_zero(_num(row, "read_bytes"))
                write[k] += _finite_or_zero(_num(row, "write_bytes"))
        series.append(HeatmapSeries(module, float(first), float(width), read, write))
    return series


def functions_from_rows(rows: Rows) -> list[FunctionStat]:
    """The traced functions, by time. A point without its time (Recorder leaves it out when
    calls had no timestamps) makes the function's total unknown (NaN, "n/a"), not a smaller
    figure; the function still ranks by the time that is known."""
    merged: dict[tuple[str, str], FunctionStat] = {}
    known: dict[tuple[str, str], float] = {}
    for source, measurement, calls in (
        ("recorder", "recorder_function", "count"),
        ("viztracer", "viztracer_function", "calls"),
    ):
        for row in rows.get(measurement, []):
            key = (source, str(row.get("function", "?")))
            stat = merged.setdefault(key, FunctionStat(key[1], 0.0, 0.0, None, source))
            stat.calls += np.nan_to_num(_num(row, calls))
            seconds = _num(row, "total_time_seconds")
            stat.total_time += seconds if math.isfinite(seconds) else np.nan
            known[key] = known.get(key, 0.0) + _finite_or_zero(seconds)
            self_time = _num(row, "self_time_seconds")
            if not np.isnan(self_time):
                stat.self_time = (stat.self_time or 0.0) + self_time
    return [merged[key] for key in sorted(merged, key=lambda key: -known[key])]


def traced_files_from_rows(rows: Rows) -> list[TracedFile]:
    """Recorder's traced files, by accesses; a time left out of a point makes the file's
    time unknown (see ``functions_from_rows``)."""
    merged: dict[str, TracedFile] = {}
    for row in rows.get("recorder_file", []):
        name = str(row.get("file", "?"))
        item = merged.setdefault(name, TracedFile(name, 0.0, 0.0, 0.0))
        item.accesses += _finite([_num(row, "accesses")])
        item.ranks = max(item.ranks, _finite([_num(row, "ranks")]))
        seconds = _num(row, "time_seconds")
        item.time += seconds if math.isfinite(seconds) else np.nan
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
    first = min((_int(r.get("time"), default=-1) for r in totals), default=-1)
    start = float(first // NS_PER_SECOND) if first >= 0 else None  # its second (the layout's)
    return GeopmEnergy(hosts, float(energy), float(runtime), start)


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _whole(value) -> int | None:
    """An integer field (exit code, signal, node count) as int; None for anything else (text,
    bool, a fraction: a damaged point)."""
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and abs(value) <= 2**31 else None


def _epoch(row: dict, name: str) -> float | None:
    """Epoch seconds as Slurm gives them (after 1970, before the year 5138), else None."""
    seconds = finite_field(row, name)
    return seconds if seconds is not None and 0 <= seconds < 1e11 else None


def slurm_from_rows(rows: Rows) -> SlurmView | None:
    """Slurm's view from the job's newest ``slurm_job`` point (a rerun of the hook without
    Slurm's times stamps another one); None for a job without one (older data, by-hand runs)."""
    found = rows.get("slurm_job", [])
    if not found:
        return None
    row = max(found, key=lambda r: _int(r.get("time")))
    return SlurmView(
        job_id=_text(row.get("job_id")) or str(row.get("jobid", "")),
        job_name=_text(row.get("job_name")),
        user=_text(row.get("user")),
        account=_text(row.get("account")),
        partition=_text(row.get("partition")),
        nodelist=_text(row.get("nodelist")),
        num_nodes=_whole(row.get("num_nodes")),
        exit_code=_whole(row.get("exit_code")),
        exit_signal=_whole(row.get("exit_signal")),
        start=_epoch(row, "start"),
        end=_epoch(row, "end"),
    )


__all__ = [
    "FILE_COLUMNS",
    "darshan_from_rows",
    "functions_from_rows",
    "geopm_from_rows",
    "rows_from_points",
    "slurm_from_rows",
]
