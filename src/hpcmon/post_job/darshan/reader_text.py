"""Read darshan-parser text output into the common typed records.

Counter lines are ``MODULE<TAB>rank<TAB>record_id<TAB>COUNTER<TAB>value<TAB>file<TAB>mount<TAB>fs``
and are keyed by (module, rank, record_id) as spec v2.2 requires: the same record id on
several ranks gives several records, and a line repeated by darshan-parser overwrites itself
instead of adding up. A fast path hands well-formed files to pandas' C parser; any file it
rejects is parsed line by line, keeping every good line and naming the bad ones.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpcmon.post_job.darshan.model import (
    HEATMAP,
    IO_MODULES,
    SKIPPED_MODULES,
    DarshanLog,
    HeatmapRecord,
    JobInfo,
    ModuleTable,
    heatmap_submodule,
    is_record_id_counter,
    partial_warning,
)
from hpcmon.post_job.files import read_input
from hpcmon.post_job.problems import Problems, SourceError

_PARTIAL_MARK = b"# *WARNING*: The "
_PARTIAL = re.compile(rb"# \*WARNING\*: The (\S+) module contains incomplete data!")
_FIRST_NON_SPACE = re.compile(rb"\S")
_REGION = re.compile(r"# (\S+) module: ")
_COUNTER_NAME = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_MODULE_NAME = re.compile(r"[A-Z0-9][A-Za-z0-9_/-]*\Z")
_HEATMAP_BIN = re.compile(r"HEATMAP_(READ|WRITE)_BIN_(\d+)\Z")
_HEADER_END = ("# description of columns:", "# *****")
_UINT64_MAX = 2**64 - 1


@dataclass
class _Rows:
    """Counter lines in long form, one entry per line; names stored once, lines hold codes."""

    module_names: list[str]
    module_codes: np.ndarray  # int, index into module_names
    ranks: np.ndarray  # int64
    ids: np.ndarray  # uint64
    counter_names: list[str]
    counter_codes: np.ndarray  # int, index into counter_names
    values: np.ndarray  # float64
    names: dict[int, str]


def read_parser_text(path: str | Path) -> DarshanLog:
    """Read one darshan-parser output file; raise SourceError when it has no log in it."""
    path = Path(path)
    gzip_problems: list[str] = []
    data, _ = read_input(path, gzip_problems)  # sites often archive the text gzipped
    if _FIRST_NON_SPACE.search(data) is None:
        raise SourceError(f"{path}: empty file, not darshan-parser output")
    job = _parse_header(path, data)
    log = DarshanLog(source=str(path), job=job, problems=gzip_problems)
    if not any(line.startswith("# start_time: ") for line in job.header_lines):
        log.problems.append(f"{path}: no '# start_time:' header line; points are stamped 0")
    partial = _partial_modules(data)
    for module in sorted(partial):
        log.partial_modules.append(module)
        log.warnings.append(partial_warning(path, module))
    rows = _fast_rows(_without_skipped_modules(data, job.header_lines))
    if rows is None and not _listed_modules(job.header_lines):
        rows = _fast_rows(_without_skipped_modules(data, list(SKIPPED_MODULES)))
    if rows is None:
        rows = _slow_rows(path, data, log.problems)
    else:
        rows.names = _record_names(data, rows)
    log.names = rows.names
    log.skipped_modules = sorted(_listed_modules(job.header_lines) & set(SKIPPED_MODULES))
    expected = sorted(_listed_modules(job.header_lines) & {*IO_MODULES, HEATMAP})
    if len(rows.values) == 0 and expected:
        raise SourceError(
            f"{path}: no counter lines although the header lists modules {', '.join(expected)}"
            " (output of darshan-parser --total/--perf/--file? the default --base is needed)"
        )
    _build_tables(path, rows, log, partial)
    return log


def _partial_modules(data: bytes) -> set[str]:
    """Modules darshan-parser flagged with "*WARNING*: The X module contains incomplete data!"."""
    found = set()
    position = data.find(_PARTIAL_MARK)
    while position >= 0:
        line_end = data.find(b"\n", position)
        match = _PARTIAL.match(data, position, line_end if line_end >= 0 else len(data))
        if match:
            found.add(match.group(1).decode("ascii", "replace"))
        position = data.find(_PARTIAL_MARK, position + 1)
    return found


def _parse_header(path: Path, data: bytes) -> JobInfo:
    job = JobInfo()
    header: list[str] = []
    for raw in data[:1_000_000].split(b"\n"):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if line.startswith(_HEADER_END) or (line and not line.startswith("#")):
            break
        header.append(line)
        key, sep, value = line[2:].partition(": ")
        if not sep:
            continue
        value = value.strip()
        try:
            if key == "darshan log version":
                job.log_version = value
            elif key == "exe":
                job.exe = value
            elif key == "uid":
                job.uid = int(value)
            elif key == "jobid":
                job.log_jobid = value
            elif key == "start_time":
                job.start_time = int(value)
            elif key == "end_time":
                job.end_time = int(value)
            elif key == "nprocs":
                job.nprocs = int(value)
            elif key == "run time":
                job.run_time = float(value)
            elif key == "metadata":
                name, _, meta_value = value.partition(" = ")
                job.metadata[name.strip()] = meta_value.strip()
        except ValueError:
            continue
    if not job.log_version:
        raise SourceError(
            f"{path}: not darshan-parser output (no '# darshan log version:' header line)"
        )
    while header and not header[-1].strip():
        header.pop()
    job.header_lines = header
    return job


def _listed_modules(header: list[str]) -> set[str]:
    """Modules named in the header's "# log file regions" block."""
    return {m.group(1) for line in header if (m := _REGION.match(line))}


def _without_skipped_modules(data: bytes, header_or_modules: list[str]) -> bytes:
    """Drop the lines of modules that give no signal (LUSTRE prints strings as values).

    Only the skipped modules the header lists are looked for (darshan-parser always prints
    "# log file regions"); a caller may pass module names instead of header lines.
    """
    listed = _listed_modules(header_or_modules) or set(header_or_modules)
    for module in SKIPPED_MODULES:
        if module not in listed:
            continue
        prefix = module.encode() + b"\t"
        if data.startswith(prefix) or b"\n" + prefix in data:
            data = re.sub(rb"^" + re.escape(prefix) + rb"[^\n]*\n?", b"", data, flags=re.M)
    return data


def _fast_rows(data: bytes) -> _Rows | None:
    """pandas' C parser for well-formed files; None when the file needs the careful path."""
    try:
        frame = pd.read_csv(
            io.BytesIO(data),
            sep="\t",
            header=None,
            usecols=[0, 1, 2, 3, 4],
            names=["module", "rank", "id", "counter", "value", "file", "mount", "fs"],
            dtype={
                "module": "category",
                "rank": np.int64,
                "id": np.uint64,
                "counter": "category",
                "value": np.float64,
            },
            comment="#",
            engine="c",
            na_filter=False,
            quoting=3,  # csv.QUOTE_NONE: quotes in file names are data
        )
    except Exception:
        return None
    values = frame["value"].to_numpy(dtype=np.float64)
    ranks = frame["rank"].to_numpy(dtype=np.int64)
    if not np.isfinite(values).all() or ranks.min(initial=0) < -1 or ranks.max(initial=0) >= 2**31:
        return None  # the careful path names the offending lines
    modules = frame["module"]
    counters = frame["counter"]
    module_names = [str(c) for c in modules.cat.categories]
    counter_names = [str(c) for c in counters.cat.categories]
    if not all(_MODULE_NAME.match(m) for m in module_names):
        return None
    if not all(_COUNTER_NAME.match(c) for c in counter_names):
        return None
    return _Rows(
        module_names=module_names,
        module_codes=modules.cat.codes.to_numpy(),
        ranks=ranks,
        ids=frame["id"].to_numpy(dtype=np.uint64),
        counter_names=counter_names,
        counter_codes=counters.cat.codes.to_numpy(),
        values=values,
        names={},
    )


def _record_names(data: bytes, rows: _Rows) -> dict[int, str]:
    """File name of each record id, read from the lines of each module's first counter only."""
    firsts = np.unique(rows.module_codes, return_index=True)[1]
    names: dict[int, str] = {}
    for counter in {rows.counter_names[rows.counter_codes[i]] for i in firsts}:
        needle = b"\t" + counter.encode() + b"\t"
        position = data.find(needle)
        while position >= 0:
            start = data.rfind(b"\n", 0, position) + 1
            end = data.find(b"\n", position)
            fields = data[start : end if end >= 0 else len(data)].split(b"\t")
            if len(fields) > 5 and fields[5] and fields[2].isdigit():
                names.setdefault(int(fields[2]), fields[5].decode("utf-8", "replace"))
            position = data.find(needle, position + len(needle))
    return names


def _slow_rows(path: Path, data: bytes, problems: list[str]) -> _Rows:
    """Line by line: keep every well-formed counter line, name the others."""
    modules: list[str] = []
    ranks: list[int] = []
    ids: list[int] = []
    counters: list[str] = []
    values: list[float] = []
    names: dict[int, str] = {}
    bad = Problems(path)  # "line N: reason", the first few listed in one error line
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if fields[0] in SKIPPED_MODULES:
            continue
        reason = _bad_line_reason(fields)
        if reason:
            bad.append(f"line {number}: {reason}")
            continue
        record_id = int(fields[2])
        modules.append(fields[0])
        ranks.append(int(fields[1]))
        ids.append(record_id)
        counters.append(fields[3])
        values.append(float(fields[4]))
        if len(fields) > 5 and fields[5] and record_id not in names:
            names[record_id] = fields[5]
    if bad:
        more = f" (and {bad.dropped} more)" if bad.dropped else ""
        problems.append(
            f"{path}: {bad.total} malformed counter line(s) skipped: " + "; ".join(bad.kept) + more
        )
    module_names = sorted(set(modules))
    counter_names = sorted(set(counters))
    module_index = {name: code for code, name in enumerate(module_names)}
    counter_index = {name: code for code, name in enumerate(counter_names)}
    return _Rows(
        module_names=module_names,
        module_codes=np.asarray([module_index[m] for m in modules], dtype=np.int64),
        ranks=np.asarray(ranks, dtype=np.int64),
        ids=np.asarray(ids, dtype=np.uint64),
        counter_names=counter_names,
        counter_codes=np.asarray([counter_index[c] for c in counters], dtype=np.int64),
        values=np.asarray(values, dtype=np.float64),
        names=names,
    )


def _bad_line_reason(fields: list[str]) -> str | None:
    if len(fields) < 5:
        return f"expected at least 5 tab-separated fields, found {len(fields)}"
    module, rank, record_id, counter, value = fields[:5]
    if not _MODULE_NAME.match(module):
        return "bad module name"
    try:
        rank_number = int(rank)
    except ValueError:
        return "bad rank (not an integer)"
    if not -1 <= rank_number < 2**31:
        return f"rank {rank_number} out of range"
    if not record_id.isdigit() or int(record_id) > _UINT64_MAX:
        return "bad record id (not a 64-bit unsigned integer)"
    if not _COUNTER_NAME.match(counter):
        return "bad counter name"
    try:
        number = float(value)
    except ValueError:
        return "bad value (not a number)"
    if not np.isfinite(number):
        return "value is not finite"
    return None


def _build_tables(path: Path, rows: _Rows, log: DarshanLog, partial: set[str]) -> None:
    if len(rows.values) == 0:
        return
    for code in np.flatnonzero(np.bincount(rows.module_codes)):
        module = rows.module_names[code]
        index = np.flatnonzero(rows.module_codes == code)
        if module == HEATMAP:
            log.heatmaps = _heatmap_records(path, rows, index, log.problems)
        elif module in IO_MODULES:
            table = _module_table(path, module, rows, index, log.problems)
            table.partial = module in partial
            log.modules[module] = table
        elif module not in SKIPPED_MODULES:
            log.problems.append(f"{path}: a module unknown to this reader skipped")


def _group_records(rows: _Rows, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Record number of each line (by (rank, record_id), in order of first appearance).

    darshan-parser prints a record's counters on consecutive lines, so lines are grouped in
    runs first and only the runs (one per record, or a few) are matched up in Python.
    """
    ranks, ids = rows.ranks[index], rows.ids[index]
    run_start = np.r_[True, (ranks[1:] != ranks[:-1]) | (ids[1:] != ids[:-1])]
    run_of_line = np.cumsum(run_start, dtype=np.int64) - 1
    firsts = np.flatnonzero(run_start)
    record_of_run = np.empty(len(firsts), dtype=np.int64)
    seen: dict[tuple[int, int], int] = {}
    run_keys = zip(ranks[firsts].tolist(), ids[firsts].tolist(), strict=True)
    for run, key in enumerate(run_keys):
        record_of_run[run] = seen.setdefault(key, len(seen))
    keys = list(seen)
    unique_ranks = np.fromiter((k[0] for k in keys), dtype=np.int64, count=len(keys))
    unique_ids = np.fromiter((k[1] for k in keys), dtype=np.uint64, count=len(keys))
    return record_of_run[run_of_line], unique_ranks, unique_ids


def _module_table(path, module: str, rows: _Rows, index: np.ndarray, problems) -> ModuleTable:
    record_of_line, ranks, ids = _group_records(rows, index)
    codes = rows.counter_codes[index]
    used = np.flatnonzero(np.bincount(codes))  # the counters this module's lines name
    column_of_code = np.zeros(len(rows.counter_names), dtype=np.int64)
    column_of_code[used] = np.arange(len(used))
    counter_of_line = column_of_code[codes]
    matrix = np.full((len(ids), len(used)), np.nan)
    matrix[record_of_line, counter_of_line] = rows.values[index]
    missing = np.isnan(matrix)
    if missing.any():
        incomplete = int(missing.any(axis=1).sum())
        problems.append(
            f"{path}: {incomplete} {module} record(s) lack some counters"
            " (treated as not monitored, -1)"
        )
        matrix[missing] = -1
    counters: dict[str, np.ndarray] = {}
    fcounters: dict[str, np.ndarray] = {}
    for column, code in enumerate(used):
        name = rows.counter_names[code]
        if is_record_id_counter(name):
            continue
        if "_F_" in name:
            fcounters[name] = matrix[:, column].copy()
            continue
        values = matrix[:, column]
        out_of_range = np.abs(values) >= 2.0**63
        if out_of_range.any():
            problems.append(f"{path}: {module} counter {name} out of range, read as -1")
            values = np.where(out_of_range, -1.0, values)
        counters[name] = np.rint(values).astype(np.int64)
    return ModuleTable(module, ids, ranks, counters, fcounters)


def _heatmap_records(path, rows: _Rows, index: np.ndarray, problems) -> list[HeatmapRecord]:
    record_of_line, ranks, ids = _group_records(rows, index)
    names = [rows.counter_names[code] for code in rows.counter_codes[index].tolist()]
    values = rows.values[index].tolist()
    count = len(ids)
    widths = np.zeros(count)
    bins: dict[str, list[dict[int, int]]] = {
        "READ": [{} for _ in range(count)],
        "WRITE": [{} for _ in range(count)],
    }
    unknown: set[str] = set()
    for record, name, value in zip(record_of_line, names, values, strict=True):
        if name == "HEATMAP_F_BIN_WIDTH_SECONDS":
            widths[record] = value
            continue
        match = _HEATMAP_BIN.match(name)
        if match is None:
            unknown.add(name)
            continue
        bins[match.group(1)][record][int(match.group(2))] = int(value)
    if unknown:
        problems.append(f"{path}: unknown HEATMAP counters ignored: {sorted(unknown)[:5]}")
    records = []
    for record in range(count):
        reads, writes = bins["READ"][record], bins["WRITE"][record]
        nbins = max([*reads, *writes], default=-1) + 1
        read_bins = np.zeros(nbins, dtype=np.int64)
        write_bins = np.zeros(nbins, dtype=np.int64)
        read_bins[list(reads)] = list(reads.values())
        write_bins[list(writes)] = list(writes.values())
        record_id = int(ids[record])
        records.append(
            HeatmapRecord(
                submodule=heatmap_submodule(record_id, rows.names.get(record_id)),
                rank=int(ranks[record]),
                record_id=record_id,
                bin_width=float(widths[record]),
                read_bins=read_bins,
                write_bins=write_bins,
            )
        )
    return records
