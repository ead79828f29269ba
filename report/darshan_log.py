"""A Darshan log itself (optional ``--darshan LOG``) -> typed records with every counter.

The InfluxDB points hold signals of the top records only; the log has all records and the raw
counters some diagnosis rules need (memory alignment, per-rank time extremes of shared files,
MPI-IO collective and non-blocking counts). The log is read by the post-job hook's reader
(PyDarshan in a child process), so a corrupt log cannot crash the report.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcmon.report.model import FILE_COLUMNS, DarshanData, FileTable, HeatmapSeries, ModuleTotals

_SMALL = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
_PREFIX = {"POSIX": "POSIX", "MPI-IO": "MPIIO", "STDIO": "STDIO"}
# MPI-IO and the libraries above it move bytes that POSIX also counts (Drishti's rule).
_COUNTED = ("POSIX", "STDIO")


def _sum(table, names: list[str]) -> np.ndarray:
    total = np.zeros(len(table))
    for name in names:
        column = table.column(name)
        if column is None:
            return np.full(len(table), np.nan)
        total = total + np.clip(column.astype(np.float64), 0, None)
    return total


def _table(module: str, table, names: dict[int, str]) -> FileTable:
    p = _PREFIX[module]
    rows = len(table)
    out = FileTable.empty(module, rows)
    out.record_ids = [str(int(r)) for r in table.record_ids]
    out.files = [names.get(int(r), "") for r in table.record_ids]
    c = out.columns
    c["rank"] = table.ranks.astype(np.float64)

    def put(column: str, *counters: str) -> None:
        c[column] = _sum(table, [f"{p}_{name}" for name in counters])

    put("bytes_read", "BYTES_READ")
    put("bytes_written", "BYTES_WRITTEN")
    put("read_time", "F_READ_TIME")
    put("write_time", "F_WRITE_TIME")
    put("meta_time", "F_META_TIME")
    put("slowest_rank_time", "F_SLOWEST_RANK_TIME")
    put("fastest_rank_time", "F_FASTEST_RANK_TIME")
    if module == "MPI-IO":
        put("indep_reads", "INDEP_READS")
        put("indep_writes", "INDEP_WRITES")
        put("coll_reads", "COLL_READS")
        put("coll_writes", "COLL_WRITES")
        put("nb_reads", "NB_READS")
        put("nb_writes", "NB_WRITES")
        put("reads", "INDEP_READS", "COLL_READS", "SPLIT_READS", "NB_READS")
        put("writes", "INDEP_WRITES", "COLL_WRITES", "SPLIT_WRITES", "NB_WRITES")
    else:
        put("reads", "READS")
        put("writes", "WRITES")
        put("max_byte_read", "MAX_BYTE_READ")
        put("max_byte_written", "MAX_BYTE_WRITTEN")
    if module == "POSIX":
        put("small_reads", *[f"SIZE_READ_{b}" for b in _SMALL])
        put("small_writes", *[f"SIZE_WRITE_{b}" for b in _SMALL])
        put("file_not_aligned", "FILE_NOT_ALIGNED")
        put("mem_not_aligned", "MEM_NOT_ALIGNED")
        put("seq_reads", "SEQ_READS")
        put("seq_writes", "SEQ_WRITES")
        put("slowest_rank_bytes", "SLOWEST_RANK_BYTES")
        put("fastest_rank_bytes", "FASTEST_RANK_BYTES")
        high = np.fmax(c["max_byte_read"], c["max_byte_written"])
        with np.errstate(divide="ignore", invalid="ignore"):
            c["reuse"] = np.where(c["bytes_read"] > 0, c["bytes_read"] / (high + 1), np.nan)
    assert set(c) == set(FILE_COLUMNS)
    return out


def darshan_from_logs(paths: list[Path]) -> tuple[DarshanData | None, list[str]]:
    """All logs of the job merged; problems (unreadable logs) as one line each."""
    from hpcmon.post_job.darshan import read_log  # the hook's isolated reader
    from hpcmon.post_job.problems import SourceError

    logs, problems = [], []
    for path in paths:
        try:
            logs.append(read_log(Path(path)))
        except (SourceError, OSError) as exc:
            problems.append(str(exc))
    data = darshan_from_log_objects(logs)
    problems.extend(p for log in logs for p in log.problems)
    return data, problems


def darshan_from_log_objects(logs: list) -> DarshanData | None:
    """Typed records from the hook reader's ``DarshanLog`` objects (one per log file)."""
    if not logs:
        return None
    data = DarshanData(source="Darshan logs")
    tables: dict[str, list[FileTable]] = {}
    for log in logs:
        job = log.job
        data.logs += 1
        data.nprocs = max(data.nprocs, int(job.nprocs))
        data.runtime = max(data.runtime, float(job.run_time))
        data.start = job.start_time if data.start is None else min(data.start, job.start_time)
        data.end = job.end_time if data.end is None else max(data.end, job.end_time)
        data.exe = data.exe or job.exe_name
        data.module_names.update(log.modules)
        data.module_names.update(log.skipped_modules)
        for module, table in log.modules.items():
            if module not in _PREFIX or not len(table):
                continue
            ft = _table(module, table, log.names)
            tables.setdefault(module, []).append(ft)
            totals = data.modules.setdefault(module, ModuleTotals(module))
            totals.bytes_read += float(np.nansum(ft.col("bytes_read")))
            totals.bytes_written += float(np.nansum(ft.col("bytes_written")))
            totals.reads += float(np.nansum(ft.col("reads")))
            totals.writes += float(np.nansum(ft.col("writes")))
            totals.records += len(ft)
        data.heatmaps.extend(_heatmaps(log))
    for module, parts in tables.items():
        data.files[module] = _concat(module, parts)
    data.counted_modules = {m for m in _COUNTED if m in data.modules}
    if not data.counted_modules and "MPI-IO" in data.modules:
        data.counted_modules = {"MPI-IO"}
    return data


def _concat(module: str, parts: list[FileTable]) -> FileTable:
    if len(parts) == 1:
        return parts[0]
    return FileTable(
        module,
        [r for p in parts for r in p.record_ids],
        [f for p in parts for f in p.files],
        {name: np.concatenate([p.columns[name] for p in parts]) for name in FILE_COLUMNS},
        sum(p.total_records for p in parts),
    )


def _heatmaps(log) -> list[HeatmapSeries]:
    by_module: dict[tuple[str, float], list] = {}
    for record in log.heatmaps:
        by_module.setdefault((record.submodule, record.bin_width), []).append(record)
    out = []
    for (module, width), records in by_module.items():
        if width <= 0:
            continue
        reads, writes = [r.read_bins for r in records], [r.write_bins for r in records]
        n = max(len(bins) for bins in reads + writes)
        read, write = _summed(reads, n), _summed(writes, n)
        out.append(HeatmapSeries(module, float(log.job.start_time), float(width), read, write))
    return out


def _summed(rows: list[np.ndarray], n: int) -> np.ndarray:
    """Bins summed over ranks: one array operation when every rank has ``n`` bins (the
    post-job hook diagnoses every job: a Python loop over 1,500 records costs it 5 ms)."""
    if all(len(row) == n for row in rows):
        return np.sum(np.stack(rows), axis=0, dtype=np.float64)
    total = np.zeros(n)
    for row in rows:
        total[: len(row)] += row
    return total
