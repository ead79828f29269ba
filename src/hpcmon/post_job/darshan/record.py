"""The job's record: what the report's rules and pictures need from every record of a log,
folded so that a log adds a bounded number of InfluxDB series whatever its ranks and records.

- per module: the sum over all records of every additive Darshan counter (operation counts,
  access-size histograms, alignment, sequential/consecutive, collective/independent/
  non-blocking MPI-IO, bytes, read/write/metadata time), and the few rule inputs that are
  not sums (random operations, bytes read again, slow metadata records, rank imbalance);
- per kept record (top records and every shared file): the raw counters behind the rules;
- per rank: bytes moved and I/O time on its own files.

Counters are clipped at 0 (Darshan's -1 is "not monitored") and garbage timers count as 0, as
the signals do (see README.md next to this file).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from hpcmon.common.fields import every_known
from hpcmon.post_job.darshan.model import ModuleTable
from hpcmon.post_job.darshan.signals import (
    LAYOUTS,
    invalid_timer,
    is_timer,
    take_counter_matrices,
)

# Drishti 0.8's thresholds the folded rule inputs need (the report's rules use the same).
SLOW_METADATA_SECONDS = 30.0  # a record with more metadata time than this is slow (P17)
RANK_IMBALANCE = 0.3  # (max - min bytes) / max over the ranks of one file (P21/P22)

# Counters whose sum over records means nothing (times of day, ranks, offsets, sizes of one
# access, modes, ids); every other counter of an I/O module is summed.
_NOT_ADDITIVE = re.compile(
    r"TIMESTAMP|RANK|MAX_|ALIGNMENT|STRIDE|ACCESS|_MODE$|REC_ID|RENAMED_FROM|CHUNK|CELL_SIZE"
    r"|DATATYPE|NDIMS|NPOINTS|OTYPE|_USE_|IS_RECORD|DEPRECATED"
)
# names of the folded rule inputs on a darshan_module point ("max_..." combine by max, the
# others add up over a job's logs)
RULE_INPUTS = frozenset(
    {
        "random_reads",
        "random_writes",
        "redundant_read_bytes",
        "slow_meta_records",
        "max_record_meta_time",
        "rank_read_imbalance_files",
        "max_rank_read_imbalance",
        "rank_write_imbalance_files",
        "max_rank_write_imbalance",
    }
)
_SMALL_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
_PREFIX = {"MPI-IO": "MPIIO"}


def prefix(module: str) -> str:
    """The prefix of a module's counter names (MPI-IO -> MPIIO)."""
    return _PREFIX.get(module, module)


def is_additive(name: str) -> bool:
    return _NOT_ADDITIVE.search(name) is None


@functools.lru_cache(maxsize=64)
def _additive(names: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """Which counters are additive, and their field names, once per module layout."""
    keep = [is_additive(name) for name in names]
    fields = [name.lower() for name, additive in zip(names, keep, strict=True) if additive]
    return np.array(keep, dtype=bool), fields


@functools.lru_cache(maxsize=64)
def _timers(names: tuple[str, ...]) -> np.ndarray:
    return np.array([is_timer(name) for name in names], dtype=bool)


class _Clean:
    """A module's counters as two matrices (one row per record), clipped at 0 and with
    garbage timers as 0, computed once per table: a few whole-matrix operations cost far
    less than one per counter on the small tables most logs have."""

    def __init__(self, table: ModuleTable) -> None:
        self.int_names = tuple(table.counters)
        self.float_names = tuple(table.fcounters)
        ints, floats = take_counter_matrices(table)  # one row per counter: ours to change
        timers = _timers(self.float_names)
        if timers.any():
            garbage = invalid_timer(floats[timers])
            if garbage.any():
                floats[timers] = np.where(garbage, 0.0, floats[timers])
        np.maximum(ints, 0, out=ints)
        np.maximum(floats, 0, out=floats)
        self.ints, self.floats = ints.T, floats.T
        self.index = _index(self.int_names, self.float_names)

    def column(self, name: str) -> np.ndarray | None:
        found = self.index.get(name)
        if found is None:
            return None
        is_float, i = found
        return self.floats[:, i] if is_float else self.ints[:, i]


@functools.lru_cache(maxsize=64)
def _index(ints: tuple[str, ...], floats: tuple[str, ...]) -> dict[str, tuple[bool, int]]:
    """Counter name -> (in the float matrix, column), once per module layout."""
    index = {name: (False, i) for i, name in enumerate(ints)}
    index.update({name: (True, i) for i, name in enumerate(floats)})
    return index


def _clean(table: ModuleTable) -> _Clean:
    cached = table.__dict__.get("_clean")
    if cached is None:
        cached = table.__dict__["_clean"] = _Clean(table)
    return cached


def clean(table: ModuleTable, name: str) -> np.ndarray | None:
    """A counter column clipped at 0, garbage timers as 0; None when the log lacks it."""
    return _clean(table).column(name)


def counter_sums(table: ModuleTable) -> dict[str, int | float]:
    """Every additive counter summed over the module's records, keyed by its name in lower
    case (``posix_size_read_0_100``); integer counters stay integers."""
    matrices = _clean(table)
    out: dict[str, int | float] = {}
    for names, matrix in (
        (matrices.int_names, matrices.ints),
        (matrices.float_names, matrices.floats),
    ):
        keep, fields = _additive(names)
        out.update(zip(fields, matrix[:, keep].sum(axis=0).tolist(), strict=True))
    return out


def rule_inputs(table: ModuleTable) -> dict[str, int | float]:
    """POSIX rule inputs over all records that are not plain sums of one counter."""
    if table.module != "POSIX" or not len(table):
        return {}
    out: dict[str, int | float] = {}
    for direction in ("READS", "WRITES"):
        ops, seq = clean(table, f"POSIX_{direction}"), clean(table, f"POSIX_SEQ_{direction}")
        if ops is not None and seq is not None:
            out[f"random_{direction.lower()}"] = int(np.maximum(ops - seq, 0).sum())
    read = clean(table, "POSIX_BYTES_READ")
    high_read = clean(table, "POSIX_MAX_BYTE_READ")
    high_written = clean(table, "POSIX_MAX_BYTE_WRITTEN")
    if read is not None and high_read is not None and high_written is not None:
        extent = np.maximum(high_read, high_written) + 1
        out["redundant_read_bytes"] = int(np.maximum(read - extent, 0).sum())
    meta = clean(table, "POSIX_F_META_TIME")
    if meta is not None:
        out["slow_meta_records"] = int((meta > SLOW_METADATA_SECONDS).sum())
        out["max_record_meta_time"] = float(meta.max())
    by_file = _by_file(table)
    for name, counter in (("read", "POSIX_BYTES_READ"), ("write", "POSIX_BYTES_WRITTEN")):
        moved = clean(table, counter)
        if moved is None:
            continue
        files, worst = 0, 0.0  # a file on one rank has no spread
        if by_file is not None:
            spread = _spread(moved[by_file[0]].astype(np.float64), by_file[1])
            files, worst = int((spread > RANK_IMBALANCE).sum()), float(spread.max())
        out[f"rank_{name}_imbalance_files"] = files
        out[f"max_rank_{name}_imbalance"] = worst
    return out


def _by_file(table: ModuleTable) -> tuple[np.ndarray, np.ndarray] | None:
    """The records on their own ranks, each file's together (positions in the table, file ids
    ascending) and where each file starts; None when no file is on several ranks."""
    own = np.flatnonzero(table.ranks != -1)
    if len(own) < 2:
        return None
    by_file = own[np.argsort(table.record_ids[own], kind="stable")]
    sorted_ids = table.record_ids[by_file]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    return (by_file, starts) if len(starts) < len(by_file) else None


def _spread(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(max - min) / max of each run of values (one starting at each of ``starts``; 0 where
    the max is 0)."""
    high = np.maximum.reduceat(values, starts)
    low = np.minimum.reduceat(values, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(high > 0, (high - low) / high, 0.0)


# FileTable column of the report -> counters (without the module prefix) summed for it
_RECORD_COUNTERS: dict[str, tuple[str, ...]] = {
    "read_time": ("F_READ_TIME",),
    "write_time": ("F_WRITE_TIME",),
    "meta_time": ("F_META_TIME",),
    "max_byte_read": ("MAX_BYTE_READ",),
    "max_byte_written": ("MAX_BYTE_WRITTEN",),
    "small_reads": tuple(f"SIZE_READ_{b}" for b in _SMALL_BINS),
    "small_writes": tuple(f"SIZE_WRITE_{b}" for b in _SMALL_BINS),
    "file_not_aligned": ("FILE_NOT_ALIGNED",),
    "mem_not_aligned": ("MEM_NOT_ALIGNED",),
    "seq_reads": ("SEQ_READS",),
    "seq_writes": ("SEQ_WRITES",),
    "indep_reads": ("INDEP_READS",),
    "indep_writes": ("INDEP_WRITES",),
    "coll_reads": ("COLL_READS",),
    "coll_writes": ("COLL_WRITES",),
    "nb_reads": ("NB_READS",),
    "nb_writes": ("NB_WRITES",),
}
# per shared record only: the extremes and variance over the ranks that opened it
_SHARED_COUNTERS: dict[str, tuple[str, ...]] = {
    "slowest_rank_bytes": ("SLOWEST_RANK_BYTES",),
    "fastest_rank_bytes": ("FASTEST_RANK_BYTES",),
    "slowest_rank_time": ("F_SLOWEST_RANK_TIME",),
    "fastest_rank_time": ("F_FASTEST_RANK_TIME",),
    "variance_rank_bytes": ("F_VARIANCE_RANK_BYTES",),
    "variance_rank_time": ("F_VARIANCE_RANK_TIME",),
}


# the raw fields of a darshan_record point (shared-only ones on rank -1 records)
RECORD_FIELDS = ("reads", "writes", *_RECORD_COUNTERS, *_SHARED_COUNTERS)


def record_columns(table: ModuleTable, rows: np.ndarray) -> tuple[dict[str, list], dict[str, list]]:
    """The raw values of the given records (positions in the table, ascending), a Python list
    per field (shared-only ones separately): ``reads``/``writes`` (all of the module's
    read/write calls) and the columns above."""
    matrices = _clean(table)
    every, shared = _plan(table.module, matrices.int_names, matrices.float_names)
    ints, floats = matrices.ints, matrices.floats
    if len(rows) < len(table):  # only the records asked for
        ints, floats = ints[rows], floats[rows]

    def values(in_floats: bool, columns: tuple[int, ...]) -> list:
        matrix = floats if in_floats else ints
        if len(columns) == 1:
            return matrix[:, columns[0]].tolist()
        return matrix[:, list(columns)].sum(axis=1).tolist()

    return (
        {name: values(in_floats, columns) for name, in_floats, columns in every},
        {name: values(in_floats, columns) for name, in_floats, columns in shared},
    )


_Plan = list[tuple[str, bool, tuple[int, ...]]]


@functools.lru_cache(maxsize=64)
def _plan(module: str, ints: tuple[str, ...], floats: tuple[str, ...]) -> tuple[_Plan, _Plan]:
    """Which matrix columns make each record field, once per module layout (a field whose
    counters the log lacks is left out)."""
    index = _index(ints, floats)
    p = prefix(module)

    def resolve(out: _Plan, name: str, counters: tuple[str, ...]) -> None:
        found = every_known(index.get(counter) for counter in counters)
        if found and len({kind for kind, _ in found}) == 1:
            out.append((name, found[0][0], tuple(i for _, i in found)))

    every: _Plan = []
    shared: _Plan = []
    layout = LAYOUTS.get(module)
    if layout is not None:
        resolve(every, "reads", layout.reads)
        resolve(every, "writes", layout.writes)
    for name, counters in _RECORD_COUNTERS.items():
        resolve(every, name, tuple(f"{p}_{counter}" for counter in counters))
    for name, counters in _SHARED_COUNTERS.items():
        resolve(shared, name, tuple(f"{p}_{counter}" for counter in counters))
    return every, shared


def rank_totals(
    tables: list[ModuleTable],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ranks, bytes read, bytes written, I/O time) of each rank's own (not shared) records
    over the given modules, ranks ascending."""
    ranks, read, written, time = [], [], [], []
    for table in tables:
        layout = LAYOUTS[table.module]
        own = np.flatnonzero(table.ranks >= 0)
        if not len(own):
            continue
        ranks.append(table.ranks[own])
        for out, name in ((read, layout.bytes_read), (written, layout.bytes_written)):
            column = clean(table, name) if name else None
            out.append(column[own] if column is not None else np.zeros(len(own), np.int64))
        timers = [layout.read_time, layout.write_time, layout.meta_time]
        spent = np.zeros(len(own))
        for name in timers:
            column = clean(table, name) if name else None
            if column is not None:
                spent = spent + column[own]
        time.append(spent)
    if not ranks:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, np.zeros(0)
    keys, group = np.unique(np.concatenate(ranks), return_inverse=True)
    sums = [
        np.bincount(group, weights=np.concatenate(parts).astype(np.float64), minlength=len(keys))
        for parts in (read, written, time)
    ]
    return keys, np.rint(sums[0]).astype(np.int64), np.rint(sums[1]).astype(np.int64), sums[2]
