"""Darshan signals spec v2.2: job, module, record (+ POSIX) and HEATMAP signals with NA reasons.

Input is the common typed model, so binary and text logs give the same signals. Record signals
are computed with numpy because one job can have 100,000 records, all of a module's formulas
together (most modules have 1-10 records, where a numpy call costs more than its arithmetic).
Choices the spec leaves open are documented in README.md next to this file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from hpcmon.common.fields import every_known
from hpcmon.post_job.darshan.model import DarshanLog, HeatmapRecord, ModuleTable

MIB = 1024.0 * 1024.0

NA_REASONS = (
    "no_reads",
    "no_writes",
    "no_io",
    "no_read_time",
    "no_write_time",
    "no_time",
    "no_bytes",
    "no_file_size",
    "no_fastest_bytes",
    "not_shared_file",
    "not_monitored",
    "not_available",
    "no_bin_width",
    "invalid_time",
)
# A timer below 0 (other than Darshan's -1, "not monitored"), not finite, or beyond this many
# seconds is garbage from the runtime (seen: -222 s, -2.79e30 s, -1e-304 s): NA(invalid_time).
MAX_TIMER_SECONDS = 1.0e10
_CODE = {reason: number for number, reason in enumerate(NA_REASONS, start=1)}


@dataclass(frozen=True)
class NA:
    """A signal with no value, and why (one of NA_REASONS)."""

    reason: str

    def __str__(self) -> str:
        return f"NA({self.reason})"


Value = int | float | NA
_NA_BY_CODE = {code: NA(reason) for reason, code in _CODE.items()}


@dataclass(frozen=True)
class Layout:
    """Which counters of a module play which role in the formulas (None/() = module lacks it)."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]
    bytes_read: str | None
    bytes_written: str | None
    read_time: str | None
    write_time: str | None
    meta_time: str | None
    slowest_rank_time: str | None


def _layout(prefix: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> Layout:
    return Layout(
        reads=tuple(f"{prefix}_{name}" for name in reads),
        writes=tuple(f"{prefix}_{name}" for name in writes),
        bytes_read=f"{prefix}_BYTES_READ",
        bytes_written=f"{prefix}_BYTES_WRITTEN",
        read_time=f"{prefix}_F_READ_TIME",
        write_time=f"{prefix}_F_WRITE_TIME",
        meta_time=f"{prefix}_F_META_TIME",
        slowest_rank_time=f"{prefix}_F_SLOWEST_RANK_TIME",
    )


LAYOUTS: dict[str, Layout] = {
    "POSIX": _layout("POSIX", ("READS",), ("WRITES",)),
    "MPI-IO": _layout(
        "MPIIO",
        ("INDEP_READS", "COLL_READS", "SPLIT_READS", "NB_READS"),
        ("INDEP_WRITES", "COLL_WRITES", "SPLIT_WRITES", "NB_WRITES"),
    ),
    "STDIO": _layout("STDIO", ("READS",), ("WRITES",)),
    "H5F": Layout((), (), None, None, None, None, "H5F_F_META_TIME", None),
    "H5D": _layout("H5D", ("READS",), ("WRITES",)),
    "PNETCDF_FILE": Layout(
        (),
        (),
        "PNETCDF_FILE_BYTES_READ",
        "PNETCDF_FILE_BYTES_WRITTEN",
        None,
        None,
        "PNETCDF_FILE_F_META_TIME",
        None,
    ),
    "PNETCDF_VAR": _layout(
        "PNETCDF_VAR",
        ("INDEP_READS", "COLL_READS", "NB_READS"),
        ("INDEP_WRITES", "COLL_WRITES", "NB_WRITES"),
    ),
    "DFS": _layout("DFS", ("READS", "READXS"), ("WRITES", "WRITEXS")),
    "DAOS": _layout(
        "DAOS",
        ("OBJ_FETCHES", "ARRAY_READS", "KV_GETS"),
        ("OBJ_UPDATES", "ARRAY_WRITES", "KV_PUTS"),
    ),
}

# A module's bytes count toward the job totals only when none of the modules it is built on
# is in the log, so MPI-IO (over POSIX), HDF5/PnetCDF (over MPI-IO/POSIX) and DFS (over
# DAOS) are not counted twice.
LOWER_LAYERS: dict[str, tuple[str, ...]] = {
    "MPI-IO": ("POSIX",),
    "H5F": ("MPI-IO", "POSIX"),
    "H5D": ("MPI-IO", "POSIX"),
    "PNETCDF_VAR": ("MPI-IO", "POSIX"),
    "PNETCDF_FILE": ("PNETCDF_VAR", "MPI-IO", "POSIX"),
    "DFS": ("DAOS",),
}

RECORD_SIGNALS = (
    "read_bw",
    "write_bw",
    "read_iops",
    "write_iops",
    "avg_read_size",
    "avg_write_size",
)
POSIX_SIGNALS = (
    "seq_read_ratio",
    "seq_write_ratio",
    "consec_read_ratio",
    "consec_write_ratio",
    "seq_ratio",
    "consec_ratio",
    "meta_ops",
    "meta_intensity",
    "meta_fraction",
    "unaligned_read_ratio",
    "unaligned_write_ratio",
    "small_read_ratio",
    "small_write_ratio",
    "reuse_proxy",
    "rank_imbalance_ratio",
    "bw_variance_proxy",
    "is_shared",
)
MODULE_SIGNALS = RECORD_SIGNALS
JOB_SIGNALS = ("total_bytes_read", "total_bytes_written", "total_reads", "total_writes")
HEATMAP_SIGNALS = (
    "total_read_events",
    "total_write_events",
    "active_bins",
    "active_time",
    "activity_span",
    "peak_activity_bin",
    "peak_activity_value",
    "read_activity_entropy_norm",
    "write_activity_entropy_norm",
    "top1_share",
)
# Requests smaller than 1 MiB are "small" (Drishti's threshold): the size-histogram bins below.
_SMALL_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")


@dataclass
class SignalColumn:
    """One signal for every record of a module: values, and an NA reason code per row."""

    values: np.ndarray  # float64 or int64
    codes: np.ndarray  # uint8; 0 = value present, else 1 + index into NA_REASONS

    def get(self, row: int) -> Value:
        code = int(self.codes[row])
        if code:
            return NA(NA_REASONS[code - 1])
        value = self.values[row]
        return int(value) if self.values.dtype.kind == "i" else float(value)


@dataclass
class RecordSignals:
    """Record-level signals of one module, rows in canonical (rank, record_id) order."""

    module: str
    record_ids: np.ndarray
    ranks: np.ndarray
    columns: dict[str, SignalColumn]
    bytes_read: np.ndarray  # for ranking records (top-K) and for points
    bytes_written: np.ndarray
    io_time: np.ndarray

    def __len__(self) -> int:
        return len(self.record_ids)

    def row(self, index: int) -> dict[str, Value]:
        lists = self.__dict__.get("_lists")
        if lists is None:  # columns as Python lists, once: rows are read one by one
            lists = self.__dict__["_lists"] = _lists(self.columns)
        return _row(lists, index)


def _lists(columns: dict[str, SignalColumn]) -> list[tuple[str, list, list]]:
    """Columns as Python lists (name, values, codes), to read many rows cheaply."""
    return [
        (name, column.values.tolist(), column.codes.tolist()) for name, column in columns.items()
    ]


def _row(lists: list[tuple[str, list, list]], index: int) -> dict[str, Value]:
    """One row of ``_lists``: what ``SignalColumn.get`` gives for each column."""
    return {
        name: (_NA_BY_CODE[codes[index]] if codes[index] else values[index])
        for name, values, codes in lists
    }


@dataclass
class ModuleSignals:
    module: str
    records: int
    partial: bool
    values: dict[str, Value]
    inconsistent: str = ""  # what is wrong with its counters ("" when nothing)


@dataclass
class HeatmapSignals:
    """HEATMAP signals of one submodule, for one rank or for the job (rank -1, bins summed)."""

    submodule: str
    rank: int
    record_id: int
    bin_width: float
    read_bins: np.ndarray
    write_bins: np.ndarray
    values: dict[str, Value]


@dataclass
class HeatmapRankSignals:
    """Per-rank HEATMAP signals of one submodule and bin layout, one row per rank.

    Computed on first use: only the spec's text output (--signals-out) and the tests read
    them (the points hold the job series), and a 512-rank log has 1,536 rows of them."""

    submodule: str
    records: list[HeatmapRecord]
    bin_width: float
    reads: np.ndarray  # ranks x bins
    writes: np.ndarray

    @functools.cached_property
    def columns(self) -> dict[str, SignalColumn]:
        return heatmap_columns(self.reads, self.writes, self.bin_width)

    def rows(self) -> list[HeatmapSignals]:
        return [
            HeatmapSignals(
                self.submodule,
                record.rank,
                record.record_id,
                self.bin_width,
                record.read_bins,
                record.write_bins,
                {name: column.get(i) for name, column in self.columns.items()},
            )
            for i, record in enumerate(self.records)
        ]


@dataclass
class LogSignals:
    job: dict[str, Value]
    counted_modules: tuple[str, ...]
    modules: list[ModuleSignals] = field(default_factory=list)
    records: list[RecordSignals] = field(default_factory=list)
    heatmap_groups: list[HeatmapRankSignals] = field(default_factory=list)  # per rank
    heatmap_totals: list[HeatmapSignals] = field(default_factory=list)  # per job
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # each module's records in the order of ``records`` (the job's record folds them)
    tables: dict[str, ModuleTable] = field(default_factory=dict)

    @property
    def heatmaps(self) -> list[HeatmapSignals]:
        """Per-rank HEATMAP signals, sorted by (submodule, rank)."""
        rows = [row for group in self.heatmap_groups for row in group.rows()]
        return sorted(rows, key=lambda h: (h.submodule, h.rank))


def compute_signals(log: DarshanLog) -> LogSignals:
    """All signal levels of one log."""
    tables = {name: _canonical(log.modules[name]) for name in LAYOUTS if name in log.modules}
    present = {name for name, table in tables.items() if len(table)}
    counted = tuple(
        name
        for name in tables
        if name in present and not any(low in present for low in LOWER_LAYERS.get(name, ()))
    )
    result = LogSignals(job={}, counted_modules=counted, tables=tables)
    totals: dict[str, int] = dict.fromkeys(JOB_SIGNALS, 0)
    for name, table in tables.items():
        layout = LAYOUTS[name]
        inputs = _Inputs(table)
        records = _record_signals(inputs, layout)
        module_values, sums = _module_signals(inputs, layout, records.io_time)
        inconsistent = inconsistencies(inputs, layout)
        result.modules.append(
            ModuleSignals(name, len(table), table.partial, module_values, inconsistent)
        )
        if inconsistent:
            counted_note = " (counted in the job totals)" if name in counted else ""
            result.warnings.append(
                f"{log.source}: module {name} has inconsistent counters: {inconsistent}"
                f"{counted_note}; its module point has inconsistent=..."
            )
        result.records.append(records)
        if name in counted:
            for key in JOB_SIGNALS:
                totals[key] += sums[key]
    result.job = dict(totals)
    result.heatmap_groups, result.heatmap_totals = _heatmap_signals(log, result.problems)
    return result


def inconsistencies(inputs: _Inputs, layout: Layout) -> str:
    """What contradicts itself in a module's counters, as ``check:records,...`` ("" when
    nothing): bytes moved with no operation counted, or a count below -1 (garbage)."""
    found = []
    pairs = (
        ("read", layout.bytes_read, layout.reads),
        ("write", layout.bytes_written, layout.writes),
    )
    for direction, bytes_name, op_names in pairs:
        moved, ops = inputs.get(bytes_name), inputs.get(op_names)
        if moved is None or ops is None:
            continue
        bad = int(((moved.values > 0) & (ops.values == 0)).sum())
        if bad:
            found.append(f"{direction}_bytes_without_{direction}s:{bad}")
    names = (*layout.reads, *layout.writes, layout.bytes_read, layout.bytes_written)
    present = [(name, inputs.table.column(name)) for name in names if name]
    present = [(name, column) for name, column in present if column is not None]
    if present:  # the counters compared at once: one matrix
        below = (np.array([column for _, column in present]) < -1).sum(axis=1).tolist()
        found.extend(
            f"{name.lower()}_below_-1:{count}"
            for (name, _), count in zip(present, below, strict=True)
            if count
        )
    return ",".join(found)


def _canonical(table: ModuleTable) -> ModuleTable:
    """Rows sorted by (rank, record_id), so sums do not depend on the reader's record order."""
    order = None if len(table) < 2 else np.lexsort((table.record_ids, table.ranks))
    if order is None or (order[1:] > order[:-1]).all():  # in order (the usual case): no copies
        return ModuleTable(
            table.module,
            table.record_ids,
            table.ranks,
            dict(table.counters),
            dict(table.fcounters),
            table.partial,
        )
    return ModuleTable(
        module=table.module,
        record_ids=table.record_ids[order],
        ranks=table.ranks[order],
        counters={k: v[order] for k, v in table.counters.items()},
        fcounters={k: v[order] for k, v in table.fcounters.items()},
        partial=table.partial,
    )


# ---------------------------------------------------------------- formula inputs


class _Input:
    """A (possibly summed) counter column, where it was not monitored (-1), and where a timer
    in it holds garbage (negative, not finite, absurdly large)."""

    __slots__ = ("values", "unmonitored", "invalid")

    def __init__(
        self, values: np.ndarray, unmonitored: np.ndarray, invalid: np.ndarray | None = None
    ) -> None:
        self.values = values
        self.unmonitored = unmonitored
        self.invalid = np.zeros(len(values), dtype=bool) if invalid is None else invalid


def is_timer(name: str) -> bool:
    return "_F_" in name and name.endswith("_TIME") and "TIMESTAMP" not in name


def invalid_timer(column: np.ndarray) -> np.ndarray:
    """Rows of a timer column that hold garbage (Darshan's -1 is "not monitored", not this)."""
    if not column.size or (0 <= column.min() and column.max() <= MAX_TIMER_SECONDS):
        return np.zeros(column.shape, dtype=bool)  # the usual case (NaN fails the test)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(column) | ((column < 0) & (column != -1)) | (column > MAX_TIMER_SECONDS)


def _sum_columns(table: ModuleTable, names: tuple[str, ...]) -> _Input | None:
    """Sum of the named counters per row (garbage timers as 0); None if the log lacks one."""
    columns = every_known(table.column(name) for name in names)
    if columns is None:
        return None
    if len(columns) == 1 and not is_timer(names[0]):
        return _Input(columns[0], columns[0] == -1)
    unmonitored = np.zeros(len(table), dtype=bool)
    invalid = np.zeros(len(table), dtype=bool)
    total = np.zeros(len(table), dtype=columns[0].dtype)
    for name, column in zip(names, columns, strict=True):
        unmonitored |= column == -1
        if is_timer(name):
            bad = invalid_timer(column)
            invalid |= bad
            column = np.where(bad, 0.0, column)
        total = total + column
    return _Input(total, unmonitored, invalid)


def _names(name: str | None) -> tuple[str, ...]:
    """A layout's counter as a formula input (() = the module lacks it)."""
    return () if name is None else (name,)


def _posix(*names: str) -> tuple[str, ...]:
    return tuple(f"POSIX_{name}" for name in names)


# A ratio signal: (name, counters summed for the numerator, for the denominator, NA reason
# when the denominator is <= 0, scale of the numerator).
_Ratio = tuple[str, tuple[str, ...], tuple[str, ...], str, float]
_POSIX_READS, _POSIX_WRITES = _posix("READS"), _posix("WRITES")
_POSIX_IO = _posix("READS", "WRITES")
_POSIX_META_OPS = _posix("OPENS", "STATS", "SEEKS", "FSYNCS", "FDSYNCS")
_POSIX_BYTES_READ, _POSIX_MOVED = _posix("BYTES_READ"), _posix("BYTES_READ", "BYTES_WRITTEN")
_POSIX_VARIANCE = _posix("F_VARIANCE_RANK_BYTES")
_POSIX_RATIOS: tuple[_Ratio, ...] = (
    ("seq_read_ratio", _posix("SEQ_READS"), _POSIX_READS, "no_reads", 1.0),
    ("seq_write_ratio", _posix("SEQ_WRITES"), _POSIX_WRITES, "no_writes", 1.0),
    ("consec_read_ratio", _posix("CONSEC_READS"), _POSIX_READS, "no_reads", 1.0),
    ("consec_write_ratio", _posix("CONSEC_WRITES"), _POSIX_WRITES, "no_writes", 1.0),
    ("seq_ratio", _posix("SEQ_READS", "SEQ_WRITES"), _POSIX_IO, "no_io", 1.0),
    ("consec_ratio", _posix("CONSEC_READS", "CONSEC_WRITES"), _POSIX_IO, "no_io", 1.0),
    ("meta_intensity", _POSIX_META_OPS, _POSIX_IO, "no_io", 1.0),
    (
        "meta_fraction",
        _posix("F_META_TIME"),
        _posix("F_READ_TIME", "F_WRITE_TIME", "F_META_TIME"),
        "no_time",
        1.0,
    ),
    ("unaligned_read_ratio", _posix("FILE_NOT_ALIGNED"), _POSIX_READS, "no_reads", 1.0),
    ("unaligned_write_ratio", _posix("FILE_NOT_ALIGNED"), _POSIX_WRITES, "no_writes", 1.0),
    (
        "small_read_ratio",
        _posix(*(f"SIZE_READ_{size}" for size in _SMALL_BINS)),
        _POSIX_READS,
        "no_reads",
        1.0,
    ),
    (
        "small_write_ratio",
        _posix(*(f"SIZE_WRITE_{size}" for size in _SMALL_BINS)),
        _POSIX_WRITES,
        "no_writes",
        1.0,
    ),
    # then kept for shared files only (_shared_only)
    (
        "rank_imbalance_ratio",
        _posix("SLOWEST_RANK_BYTES"),
        _posix("FASTEST_RANK_BYTES"),
        "no_fastest_bytes",
        1.0,
    ),
)


@functools.cache
def _ratio_formulas(module: str) -> tuple[_Ratio, ...]:
    """The record signals of a module that are ratios of counter sums."""
    layout = LAYOUTS[module]
    bytes_read, bytes_written = _names(layout.bytes_read), _names(layout.bytes_written)
    read_time, write_time = _names(layout.read_time), _names(layout.write_time)
    reads, writes = layout.reads, layout.writes
    formulas: tuple[_Ratio, ...] = (
        ("read_bw", bytes_read, read_time, "no_read_time", 1 / MIB),
        ("write_bw", bytes_written, write_time, "no_write_time", 1 / MIB),
        ("read_iops", reads, read_time, "no_read_time", 1.0),
        ("write_iops", writes, write_time, "no_write_time", 1.0),
        ("avg_read_size", bytes_read, reads, "no_reads", 1.0),
        ("avg_write_size", bytes_written, writes, "no_writes", 1.0),
    )
    return formulas + _POSIX_RATIOS if module == "POSIX" else formulas


@dataclass(frozen=True)
class _Plan:
    """How ``_Inputs`` computes the inputs of a module's formulas, for one set of counter
    names. Inputs made of integer counters come first, then those made of timers (each kind
    taken as one matrix, its inputs by number of counters), then any other (no reader makes
    one: integer and float counters summed) from ``_sum_columns``."""

    integers: tuple[tuple[str, ...], ...]
    timers: tuple[tuple[str, ...], ...]
    others: tuple[tuple[str, ...], ...]
    integer_starts: np.ndarray  # each input's first counter: its row in integer_rows
    timer_starts: np.ndarray
    timer_runs: tuple[tuple[int, int], ...]  # (counters per input, inputs) of the timers
    integer_rows: np.ndarray  # the integers' counters: rows of counter_matrices' integers
    timer_rows: np.ndarray
    row: dict[tuple[str, ...], int]  # input -> its row in the matrices of all inputs
    ratios: tuple[str, ...]  # the ratio signals whose inputs the log has
    numerators: np.ndarray  # rows of their inputs
    denominators: np.ndarray
    scales: np.ndarray  # ratios x 1
    zero_codes: np.ndarray  # ratios x 1, uint8
    missing: tuple[str, ...]  # the ratio signals whose inputs the log lacks


# the inputs of a module's formulas that are not the ratios' (summed with them)
_MORE_INPUTS = {"POSIX": (_POSIX_MOVED,)}


@functools.lru_cache(maxsize=64)
def _plan(module: str, counters: tuple[str, ...], fcounters: tuple[str, ...]) -> _Plan:
    ints, floats = set(counters), set(fcounters) - set(counters)  # table.column's order
    formulas = _ratio_formulas(module)
    wanted = [
        names for _, numerator, denominator, *_ in formulas for names in (numerator, denominator)
    ]
    wanted += [_names(LAYOUTS[module].meta_time), *_MORE_INPUTS.get(module, ())]
    integers, timers, others = [], [], []
    for names in sorted(dict.fromkeys(names for names in wanted if names), key=len):
        if all(name in ints and not is_timer(name) for name in names):
            integers.append(names)
        elif all(name in floats and is_timer(name) for name in names):
            timers.append(names)
        elif all(name in ints or name in floats for name in names):
            others.append(names)
    row = {names: i for i, names in enumerate([*integers, *timers, *others])}
    ratios = [formula for formula in formulas if formula[1] in row and formula[2] in row]
    return _Plan(
        integers=tuple(integers),
        timers=tuple(timers),
        others=tuple(others),
        integer_starts=_starts_of(integers),
        timer_starts=_starts_of(timers),
        timer_runs=_runs_of(timers),
        integer_rows=_rows_of(integers, counters),
        timer_rows=_rows_of(timers, fcounters),
        row=row,
        ratios=tuple(signal for signal, *_ in ratios),
        numerators=np.array([row[numerator] for _, numerator, *_ in ratios], dtype=np.intp),
        denominators=np.array(
            [row[denominator] for _, _, denominator, *_ in ratios], dtype=np.intp
        ),
        scales=np.array([scale for *_, scale in ratios], dtype=np.float64).reshape(-1, 1),
        zero_codes=np.array([_CODE[zero] for *_, zero, _ in ratios], np.uint8).reshape(-1, 1),
        missing=tuple(formula[0] for formula in formulas if formula not in ratios),
    )


def _starts_of(inputs: list[tuple[str, ...]]) -> np.ndarray:
    """Where each input's counters start among all the inputs' counters (``reduceat``'s)."""
    bounds = np.cumsum([0, *(len(names) for names in inputs)], dtype=np.intp)
    return bounds[:-1]  # the last one is where the counters end


def _runs_of(inputs: list[tuple[str, ...]]) -> tuple[tuple[int, int], ...]:
    """(counters per input, inputs) of each run of inputs with as many counters."""
    sizes = [len(names) for names in inputs]
    return tuple((size, sizes.count(size)) for size in dict.fromkeys(sizes))


def _by_size(matrix: np.ndarray, runs: tuple[tuple[int, int], ...]) -> list[np.ndarray]:
    """``matrix`` (the counters of inputs, one after the other) as one block per run of
    inputs with as many counters: inputs x counters x records."""
    blocks = []
    start = 0
    for size, count in runs:
        blocks.append(matrix[start : start + size * count].reshape(count, size, matrix.shape[1]))
        start += size * count
    return blocks


def _sum_in_turn(block: np.ndarray) -> np.ndarray:
    """Float sums over the counters (axis 1) from 0, one counter after the other, as
    ``_sum_columns`` adds them (a float sum depends on the order; 0.0 + -0.0 is 0.0)."""
    total = block[:, 0] + 0.0
    for counter in range(1, block.shape[1]):
        total = total + block[:, counter]
    return total


def _rows_of(inputs: list[tuple[str, ...]], counters: tuple[str, ...]) -> np.ndarray:
    """The rows of the inputs' counters (input after input) in a matrix of ``counters``."""
    row = {name: i for i, name in enumerate(counters)}
    return np.array([row[name] for names in inputs for name in names], dtype=np.intp)


def counter_matrices(table: ModuleTable) -> tuple[np.ndarray, np.ndarray]:
    """The table's integer and float counters as two matrices, one row per counter (in the
    order of ``table.counters`` and ``table.fcounters``), built once: for the signals, then
    handed over to the points (``take_counter_matrices``)."""
    found = table.__dict__.get("_counter_matrices")
    if found is None:
        found = table.__dict__["_counter_matrices"] = _matrices(table)
    return found


def take_counter_matrices(table: ModuleTable) -> tuple[np.ndarray, np.ndarray]:
    """``counter_matrices`` for their last user, who may change them: no longer kept."""
    found = table.__dict__.pop("_counter_matrices", None)
    return _matrices(table) if found is None else found


def _matrices(table: ModuleTable) -> tuple[np.ndarray, np.ndarray]:
    rows = len(table)
    return (
        np.array(list(table.counters.values()), np.int64).reshape(len(table.counters), rows),
        np.array(list(table.fcounters.values()), np.float64).reshape(len(table.fcounters), rows),
    )


class _Block:
    """The formula inputs of (a piece of) a module table, as matrices with one row per input
    (the plan's order): ``values`` as floats (for the ratios), ``unmonitored``, ``invalid``;
    ``ints``, ``timers`` and ``others`` the sums as Darshan counts them."""

    def __init__(self, table: ModuleTable, plan: _Plan) -> None:
        rows = len(table)
        all_ints, all_floats = counter_matrices(table)
        self.ints, self.timers = np.zeros((0, rows), np.int64), np.zeros((0, rows))
        unmonitored, invalid = [np.zeros((0, rows), bool)], [np.zeros((0, rows), bool)]
        # reduceat: each input's counters (rows one after the other) at once, in one call;
        # exact on integers and flags only (it does not add floats in turn)
        if plan.integers:
            ints = all_ints[plan.integer_rows]
            self.ints = np.add.reduceat(ints, plan.integer_starts)
            unmonitored.append(np.logical_or.reduceat(ints == -1, plan.integer_starts))
            invalid.append(np.zeros((len(plan.integers), rows), dtype=bool))
        if plan.timers:
            timers = all_floats[plan.timer_rows]
            garbage = invalid_timer(timers)
            clean = np.where(garbage, 0.0, timers)
            self.timers = np.concatenate(
                [_sum_in_turn(block) for block in _by_size(clean, plan.timer_runs)]
            )
            unmonitored.append(np.logical_or.reduceat(timers == -1, plan.timer_starts))
            invalid.append(np.logical_or.reduceat(garbage, plan.timer_starts))
        others: list[_Input] = []
        for names in plan.others:
            item = _sum_columns(table, names)
            assert item is not None, names  # the plan's inputs are made of the table's counters
            others.append(item)
        self.others = [item.values for item in others]
        unmonitored += [item.unmonitored[None] for item in others]
        invalid += [item.invalid[None] for item in others]
        self.values = np.concatenate(
            [self.ints, self.timers, *(values[None] for values in self.others)], dtype=np.float64
        )
        self.unmonitored = np.concatenate(unmonitored)
        self.invalid = np.concatenate(invalid)

    def typed(self, row: int) -> np.ndarray:
        """An input's sums as Darshan counts them (integers stay integers)."""
        if row < len(self.ints):
            return self.ints[row]
        row -= len(self.ints)
        return self.timers[row] if row < len(self.timers) else self.others[row - len(self.timers)]


# Records per piece of a table in whole-matrix operations: with more, the matrices of a module
# with 100,000 records are far bigger than the CPU caches and the memory that the allocator
# keeps, and the operations get slower than column by column.
_PIECE = 8192


def _pieces(table: ModuleTable) -> list[ModuleTable]:
    """The table, or a big one's records in pieces of ``_PIECE`` (views)."""
    if len(table) <= _PIECE:
        return [table]
    return [
        ModuleTable(
            table.module,
            table.record_ids[part],
            table.ranks[part],
            {name: column[part] for name, column in table.counters.items()},
            {name: column[part] for name, column in table.fcounters.items()},
            table.partial,
        )
        for part in (slice(start, start + _PIECE) for start in range(0, len(table), _PIECE))
    ]


def _joined_rows(pieces: list[np.ndarray]) -> list[np.ndarray]:
    """The rows of a matrix computed piece by piece (records along axis 1), one array each."""
    if len(pieces) == 1:
        return list(pieces[0])
    return [np.concatenate(row) for row in zip(*pieces, strict=True)]


class _Inputs:
    """The inputs of one module table's formulas (sums of counters per record), computed
    together: the same sums as ``_sum_columns``, in a few whole-matrix operations (on the 1-10
    records of most modules a numpy call costs more than its arithmetic, and a module has some
    20 inputs), for the table's pieces in turn."""

    def __init__(self, table: ModuleTable) -> None:
        self.table = table
        self.plan = _plan(table.module, tuple(table.counters), tuple(table.fcounters))
        self.blocks = [_Block(piece, self.plan) for piece in _pieces(table)]
        self.found: dict[tuple[str, ...], _Input | None] = {}

    def get(self, names: tuple[str, ...] | str | None) -> _Input | None:
        """Sum of the named counters per row; None if any is missing from this log."""
        if names is None or names == ():
            return None
        if isinstance(names, str):
            names = (names,)
        if names in self.found:
            return self.found[names]
        row = self.plan.row.get(names)
        found: _Input | None
        if row is None:  # not an input of the formulas
            found = _sum_columns(self.table, names)
        elif len(self.blocks) == 1:
            block = self.blocks[0]
            found = _Input(block.typed(row), block.unmonitored[row], block.invalid[row])
        else:
            found = _Input(
                np.concatenate([block.typed(row) for block in self.blocks]),
                np.concatenate([block.unmonitored[row] for block in self.blocks]),
                np.concatenate([block.invalid[row] for block in self.blocks]),
            )
        self.found[names] = found
        return found


def _not_available(rows: int, integer: bool = False) -> SignalColumn:
    dtype = np.int64 if integer else np.float64
    codes = np.full(rows, _CODE["not_available"], np.uint8)
    return SignalColumn(np.zeros(rows, dtype=dtype), codes)


def _ratios(inputs: _Inputs) -> dict[str, SignalColumn]:
    """The module's ratio signals: numerator * scale / denominator, with NA(not_available |
    not_monitored | invalid_time | its zero reason), all of them as one matrix, a row each."""
    plan = inputs.plan
    out: dict[str, SignalColumn] = {}
    if plan.missing:
        # one (read only) column for all of them
        out.update(dict.fromkeys(plan.missing, _not_available(len(inputs.table))))
    if plan.ratios:
        pieces = [_block_ratios(block, plan) for block in inputs.blocks]
        values = _joined_rows([values for values, _ in pieces])
        codes = _joined_rows([codes for _, codes in pieces])
        out.update(zip(plan.ratios, map(SignalColumn, values, codes), strict=True))
    return out


def _block_ratios(block: _Block, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """The ratios of (a piece of) a table: values and NA codes, a row each."""
    num = block.values[plan.numerators] * plan.scales
    den = block.values[plan.denominators]
    positive = den > 0
    with np.errstate(over="ignore"):  # a garbage timer such as 1e-305 s: marked just below
        values = np.divide(num, den, out=np.zeros_like(num), where=positive)
    codes = np.where(positive, np.uint8(0), plan.zero_codes)
    finite = np.isfinite(values)
    if not finite.all():  # no finite ratio: the time (the only float divisor) is garbage
        overflow = ~finite
        values[overflow] = 0.0
        codes[overflow] = _CODE["invalid_time"]
    for masks, code in ((block.invalid, "invalid_time"), (block.unmonitored, "not_monitored")):
        if masks.any():
            codes[masks[plan.numerators] | masks[plan.denominators]] = _CODE[code]
    return values, codes


# ---------------------------------------------------------------- record level


def _record_signals(inputs: _Inputs, layout: Layout) -> RecordSignals:
    table = inputs.table
    rows = len(table)
    computed = _ratios(inputs)
    names = RECORD_SIGNALS
    if table.module == "POSIX":
        computed.update(_posix_signals(inputs, computed["rank_imbalance_ratio"]))
        names += POSIX_SIGNALS
    bytes_read, bytes_written = inputs.get(layout.bytes_read), inputs.get(layout.bytes_written)
    timers = [inputs.get(name) for name in (layout.read_time, layout.write_time, layout.meta_time)]
    zeros = np.zeros(rows)
    # garbage timers were read as 0 by the inputs
    io_time = sum((np.maximum(item.values, 0) if item is not None else zeros) for item in timers)
    return RecordSignals(
        module=table.module,
        record_ids=table.record_ids,
        ranks=table.ranks,
        columns={name: computed[name] for name in names},
        bytes_read=np.maximum(bytes_read.values, 0) if bytes_read else np.zeros(rows, np.int64),
        bytes_written=(
            np.maximum(bytes_written.values, 0) if bytes_written else np.zeros(rows, np.int64)
        ),
        io_time=np.asarray(io_time, dtype=np.float64),
    )


def _posix_signals(inputs: _Inputs, imbalance: SignalColumn) -> dict[str, SignalColumn]:
    """The POSIX record signals that are not plain ratios; ``imbalance`` is the ratio of the
    slowest rank's bytes to the fastest's."""
    table = inputs.table
    rows = len(table)
    out = {}
    meta_ops = inputs.get(_POSIX_META_OPS)
    if meta_ops is None:
        out["meta_ops"] = _not_available(rows, integer=True)
    else:
        codes = np.where(meta_ops.unmonitored, np.uint8(_CODE["not_monitored"]), np.uint8(0))
        out["meta_ops"] = SignalColumn(meta_ops.values.astype(np.int64, copy=False), codes)
    moved = inputs.get(_POSIX_MOVED)
    out["reuse_proxy"] = _reuse_proxy(table, inputs.get(_POSIX_BYTES_READ), moved)
    # for shared (rank -1) records that moved bytes only
    shared = table.ranks == -1
    not_shared = ~shared
    no_bytes = None if moved is None else (moved.values <= 0) & ~moved.unmonitored
    out["rank_imbalance_ratio"] = _shared_only(imbalance, not_shared, no_bytes)
    variance = inputs.get(_POSIX_VARIANCE)
    variance_column = (
        _not_available(rows)
        if variance is None
        else SignalColumn(
            variance.values.astype(np.float64, copy=False),
            np.where(variance.unmonitored, np.uint8(_CODE["not_monitored"]), np.uint8(0)),
        )
    )
    out["bw_variance_proxy"] = _shared_only(variance_column, not_shared, no_bytes)
    out["is_shared"] = SignalColumn(shared.astype(np.int64), np.zeros(rows, np.uint8))
    return out


def _reuse_proxy(
    table: ModuleTable, bytes_read: _Input | None, moved: _Input | None
) -> SignalColumn:
    """bytes_read / (max byte offset + 1): how often the file's extent was read over;
    ``moved``: bytes read + written."""
    max_read, max_written = (
        table.column("POSIX_MAX_BYTE_READ"),
        table.column("POSIX_MAX_BYTE_WRITTEN"),
    )
    if bytes_read is None or moved is None or max_read is None or max_written is None:
        return _not_available(len(table))
    size = np.maximum(max_read, max_written) + 1.0  # floats
    known = (size > 0) & (moved.values > 0)
    values = np.divide(bytes_read.values, size, out=np.zeros(len(table)), where=known)
    codes = np.where(known, np.uint8(0), np.uint8(_CODE["no_file_size"]))
    codes[moved.unmonitored | ((max_read == -1) & (max_written == -1))] = _CODE["not_monitored"]
    return SignalColumn(values, codes)


def _shared_only(
    column: SignalColumn, not_shared: np.ndarray, no_bytes: np.ndarray | None
) -> SignalColumn:
    """Spec: only for rank -1 records that moved bytes; NA(not_shared_file) / NA(no_bytes)."""
    codes = column.codes.copy()
    if no_bytes is not None:
        codes[no_bytes & ((codes == 0) | (codes == _CODE["no_fastest_bytes"]))] = _CODE["no_bytes"]
    codes[not_shared] = _CODE["not_shared_file"]
    return SignalColumn(column.values, codes)


# ---------------------------------------------------------------- module level


def _module_signals(
    inputs: _Inputs, layout: Layout, io_time: np.ndarray
) -> tuple[dict[str, Value], dict]:
    """The spec's module signals; time = Darshan's agg_time_by_slowest (see README), from
    ``io_time``, the records' read + write + meta time.

    A module sum with a -1 (not monitored) in any record is NA(not_monitored), as a record
    signal is; the job totals (``sums``) add the monitored values only.
    """
    names = {
        "total_reads": layout.reads,
        "total_writes": layout.writes,
        "total_bytes_read": layout.bytes_read,
        "total_bytes_written": layout.bytes_written,
    }
    sums, totals = _totals(inputs, names)
    reads, writes = totals["total_reads"], totals["total_writes"]
    bytes_read, bytes_written = totals["total_bytes_read"], totals["total_bytes_written"]
    agg_time = _agg_time_by_slowest(inputs.table, layout, io_time)
    values: dict[str, Value] = {}
    values["read_bw"] = _scalar_ratio(bytes_read, agg_time, "no_time", 1 / MIB)
    values["write_bw"] = _scalar_ratio(bytes_written, agg_time, "no_time", 1 / MIB)
    values["read_iops"] = _scalar_ratio(reads, agg_time, "no_time")
    values["write_iops"] = _scalar_ratio(writes, agg_time, "no_time")
    values["avg_read_size"] = _scalar_ratio(bytes_read, reads, "no_reads")
    values["avg_write_size"] = _scalar_ratio(bytes_written, writes, "no_writes")
    moved: Value
    if isinstance(bytes_read, NA) or isinstance(bytes_written, NA):
        moved = _first_na(bytes_read, bytes_written)
    else:
        moved = bytes_read + bytes_written
    values["agg_time_by_slowest"] = agg_time
    values["agg_perf_by_slowest"] = _scalar_ratio(moved, agg_time, "no_time", 1 / MIB)
    values["total_bytes_read"] = bytes_read
    values["total_bytes_written"] = bytes_written
    values["total_reads"] = reads
    values["total_writes"] = writes
    return values, sums


def _totals(
    inputs: _Inputs, names: dict[str, tuple[str, ...] | str | None]
) -> tuple[dict[str, int], dict[str, int | NA]]:
    """Each input summed over the records, clipped at 0 (the job totals' share), and as a
    module signal: NA(not_available) when the log lacks a counter, NA(not_monitored) when
    a record has -1."""
    found = {key: inputs.get(counters) for key, counters in names.items()}
    present = {key: item for key, item in found.items() if item is not None}
    if present and all(item.values.dtype.kind == "i" for item in present.values()):  # at once
        clipped = np.maximum(np.array([item.values for item in present.values()]), 0)
        sums = dict(zip(present, clipped.sum(axis=1).tolist(), strict=True))
        any_unmonitored = np.any(np.array([item.unmonitored for item in present.values()]), axis=1)
        unmonitored = dict(zip(present, any_unmonitored.tolist(), strict=True))
    else:
        sums = {key: int(np.maximum(item.values, 0).sum()) for key, item in present.items()}
        unmonitored = {key: bool(item.unmonitored.any()) for key, item in present.items()}
    totals: dict[str, int | NA] = {}
    for key in names:
        if key not in present:
            sums[key] = 0
            totals[key] = NA("not_available")
        else:
            totals[key] = NA("not_monitored") if unmonitored[key] else sums[key]
    return sums, totals


def _first_na(*values: Value) -> NA:
    """The NA an operation on these values (one of them NA, at least) gives: not_available
    first, then the others."""
    missing = [value for value in values if isinstance(value, NA)]
    for value in missing:
        if value.reason == "not_available":
            return value
    return missing[0]


def _agg_time_by_slowest(table: ModuleTable, layout: Layout, io_time: np.ndarray) -> float | NA:
    """darshan-util's accumulator: slowest rank's time on its own files + for each shared file
    its slowest rank's time (``io_time``: each record's read + write + meta time).
    NA(not_available) when the module has no read/write timers."""
    if layout.read_time is None and layout.write_time is None:
        return NA("not_available")
    timers = every_known(
        table.column(name)
        for name in (layout.read_time, layout.write_time, layout.meta_time)
        if name is not None
    )
    if timers is None:
        return NA("not_available")
    shared = table.ranks < 0
    slowest = table.column(layout.slowest_rank_time) if layout.slowest_rank_time else None
    slowest_shared = slowest[shared] if slowest is not None else None
    used = np.concatenate([*timers, slowest_shared] if slowest_shared is not None else timers)
    if not (used.size and 0 <= used.min() and used.max() <= MAX_TIMER_SECONDS):  # usually all fine
        if (used == -1).any():
            return NA("not_monitored")
        if invalid_timer(used).any():
            return NA("invalid_time")
    per_record = io_time  # the timers' sum, none of them garbage or -1 here
    if slowest_shared is not None:
        shared_time = float(slowest_shared.sum())
    else:
        shared_time = float(per_record[shared].sum())
    own = ~shared
    unique_ranks = table.ranks[own]
    if len(unique_ranks):
        # the table is in canonical order: its own files' ranks ascending, one group each
        rank_index = np.cumsum(np.concatenate(([False], unique_ranks[1:] != unique_ranks[:-1])))
        per_rank = np.bincount(rank_index, weights=per_record[own])
        slowest_rank_time = max(0.0, float(per_rank.max()))
    else:
        slowest_rank_time = 0.0
    return slowest_rank_time + shared_time


def _scalar_ratio(numerator: Value, denominator: Value, zero_reason: str, scale=1.0) -> Value:
    if isinstance(numerator, NA) or isinstance(denominator, NA):
        return _first_na(numerator, denominator)
    if denominator <= 0:
        return NA(zero_reason)
    ratio = float(numerator) * scale / float(denominator)
    return ratio if math.isfinite(ratio) else NA("invalid_time")  # as _block_ratios


# ---------------------------------------------------------------- HEATMAP


def heatmap_columns(reads: np.ndarray, writes: np.ndarray, width: float) -> dict[str, SignalColumn]:
    """The 10 HEATMAP signals for many series at once: one row per rank, one column per bin."""
    rows = len(reads)
    # reads over writes as one matrix: each step below is one numpy call for both
    both = np.maximum(np.concatenate((reads, writes)).astype(np.int64, copy=False), 0)
    reads, writes = both[:rows], both[rows:]
    activity = reads + writes
    nbins = activity.shape[1]
    active = activity > 0
    active_bins = active.sum(axis=1)
    both_totals = both.sum(axis=1)
    total_read, total_write = both_totals[:rows], both_totals[rows:]
    total = total_read + total_write  # activity.sum(axis=1): integers
    if nbins:
        first = np.argmax(active, axis=1)
        last = nbins - 1 - np.argmax(active[:, ::-1], axis=1)
        peak_bin, peak_value = np.argmax(activity, axis=1), activity.max(axis=1)
    else:
        first = last = peak_bin = peak_value = np.zeros(rows, dtype=np.int64)
    has_width = width > 0 and math.isfinite(width)
    no_io = np.where(active_bins == 0, np.uint8(_CODE["no_io"]), np.uint8(0))
    valid = np.zeros(rows, np.uint8)
    no_width = valid if has_width else np.full(rows, _CODE["no_bin_width"], np.uint8)
    span = (last - first + 1) * width
    top1 = np.divide(peak_value, total, out=np.zeros(rows), where=total > 0)
    entropy = _entropy_norm(both, both_totals, nbins)
    total_events = both_totals.astype(np.float64)
    return {
        # event totals are floats, as in the spec's output example ("1049304.0")
        "total_read_events": SignalColumn(total_events[:rows], valid),
        "total_write_events": SignalColumn(total_events[rows:], valid),
        "active_bins": SignalColumn(active_bins.astype(np.int64, copy=False), valid),
        "active_time": SignalColumn(active_bins * float(width), no_width),
        "activity_span": SignalColumn(
            span.astype(np.float64, copy=False), no_io if has_width else no_width
        ),
        "peak_activity_bin": SignalColumn(peak_bin.astype(np.int64, copy=False), no_io),
        "peak_activity_value": SignalColumn(peak_value.astype(np.float64), valid),
        "read_activity_entropy_norm": SignalColumn(entropy[:rows], valid),
        "write_activity_entropy_norm": SignalColumn(entropy[rows:], valid),
        "top1_share": SignalColumn(top1, valid),
    }


def _entropy_norm(bins: np.ndarray, totals: np.ndarray, nbins: int) -> np.ndarray:
    """Normalised Shannon entropy per row; 0 for rows with no bytes, and for a single bin."""
    if nbins <= 1:
        return np.zeros(len(bins))
    shares = bins / np.maximum(totals, 1)[:, None]  # floats; rows with no bytes: all 0
    logs = np.log(np.where(shares > 0, shares, 1.0))
    entropy = (shares * logs).sum(axis=1) / -math.log(nbins)
    return np.where(totals > 0, entropy, 0.0)


def _heatmap_signals(log: DarshanLog, problems: list[str]):
    """Per-rank signals, and job signals on each submodule's bins summed over ranks."""
    groups_out: list[HeatmapRankSignals] = []
    job_series = []  # (submodule, record id, bin width, read bins, write bins) per submodule
    by_submodule: dict[str, list[HeatmapRecord]] = {}
    for record in sorted(log.heatmaps, key=lambda r: (r.submodule, r.rank)):
        by_submodule.setdefault(record.submodule, []).append(record)
    for submodule, records in by_submodule.items():
        # ranks of one submodule share the bin layout: compute each layout as one matrix
        groups: dict[tuple[int, float], list[HeatmapRecord]] = {}
        for record in records:
            groups.setdefault((len(record.read_bins), record.bin_width), []).append(record)
        nbins = max(length for length, _ in groups)
        job_bins = np.zeros((2, nbins), dtype=np.int64)  # reads, writes: summed over ranks
        for (length, width), group in groups.items():
            # reads over writes, ranks x bins each: one numpy call for both
            bins = np.array(
                [r.read_bins for r in group] + [r.write_bins for r in group], dtype=np.int64
            ).reshape(2, len(group), length)
            job_bins[:, :length] += bins.sum(axis=1)
            groups_out.append(HeatmapRankSignals(submodule, group, width, bins[0], bins[1]))
        widths = sorted({width for _, width in groups})
        width = widths[-1]
        if len(widths) > 1:
            problems.append(
                f"{log.source}: HEATMAP {submodule} ranks disagree on the bin width "
                f"{widths}; the job series uses {width}"
            )
        job_series.append((submodule, records[0].record_id, width, job_bins[0], job_bins[1]))
    return groups_out, _job_heatmaps(job_series)


def _job_heatmaps(series: list[tuple[str, int, float, np.ndarray, np.ndarray]]):
    """The job signals of each submodule's series, the series of one bin layout (nearly
    always all of them) as one matrix."""
    layouts: dict[tuple[int, str], list[int]] = {}
    for i, (_, _, width, reads, _) in enumerate(series):
        layouts.setdefault((len(reads), repr(width)), []).append(i)  # repr: 0.0 is not -0.0
    values: dict[int, dict[str, Value]] = {}
    for members in layouts.values():
        _, _, width, first, _ = series[members[0]]
        reads = np.array([series[i][3] for i in members]).reshape(len(members), len(first))
        writes = np.array([series[i][4] for i in members]).reshape(len(members), len(first))
        lists = _lists(heatmap_columns(reads, writes, width))
        for row, i in enumerate(members):
            values[i] = _row(lists, row)
    return [
        HeatmapSignals(submodule, -1, record_id, width, reads, writes, values[i])
        for i, (submodule, record_id, width, reads, writes) in enumerate(series)
    ]
