"""Typed records the report is built from, whatever source filled them.

Darshan file records are column-wise (numpy, one row per (module, rank, record)) because a
1,000-rank job has 100,000 of them. A counter that the source could not give is NaN: the
insights then say what they could not evaluate instead of passing silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hpcmon.report.history import AppHistory

# Columns of FileTable (all float64; NaN = unknown from this source).
FILE_COLUMNS = (
    "rank",
    "bytes_read",
    "bytes_written",
    "reads",
    "writes",
    "small_reads",  # requests < 1 MiB (Darshan size bins 0..100K_1M)
    "small_writes",
    "file_not_aligned",
    "mem_not_aligned",
    "seq_reads",
    "seq_writes",
    "read_time",
    "write_time",
    "meta_time",
    "max_byte_read",
    "max_byte_written",
    "slowest_rank_bytes",
    "fastest_rank_bytes",
    "slowest_rank_time",
    "fastest_rank_time",
    "variance_rank_bytes",
    "variance_rank_time",
    # MPI-IO only
    "indep_reads",
    "indep_writes",
    "coll_reads",
    "coll_writes",
    "nb_reads",
    "nb_writes",
)


@dataclass
class FileTable:
    """Darshan records of one module: ``col(name)[row]``; ``files[row]`` is the path.

    A FILE_COLUMNS column not in ``columns`` is made by ``read_columns`` when first asked
    for (it may make others with it): the rules and the report read a few columns of a few
    tables, and making every column of every table would cost more than the rest of the
    diagnosis."""

    module: str
    record_ids: list[str]
    files: list[str]
    columns: dict[str, np.ndarray]
    total_records: int  # how many records the module has in the logs (>= rows kept)
    read_columns: Callable[[str], dict[str, np.ndarray]] | None = field(
        default=None, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.record_ids)

    @property
    def complete(self) -> bool:
        return len(self) >= self.total_records

    def col(self, name: str) -> np.ndarray:
        if name not in self.columns and self.read_columns is not None and name in FILE_COLUMNS:
            for made, column in self.read_columns(name).items():
                self.columns.setdefault(made, column)
        return self.columns[name]

    @staticmethod
    def empty(module: str, rows: int) -> FileTable:
        return FileTable(
            module,
            [""] * rows,
            [""] * rows,
            {name: np.full(rows, np.nan) for name in FILE_COLUMNS},
            rows,
        )


@dataclass
class ModuleTotals:
    module: str
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    reads: float = 0.0
    writes: float = 0.0
    records: int = 0
    time_by_slowest: float = 0.0  # seconds, Darshan's agg_time_by_slowest
    # every additive counter summed over all records (``posix_size_read_0_100``) and the
    # hook's folded rule inputs (``random_reads``, ``max_record_meta_time``, ...)
    counters: dict[str, float] = field(default_factory=dict)

    def counter(self, name: str) -> float | None:
        """A summed counter or rule input, None when the source lacks it."""
        return self.counters.get(name)


@dataclass
class HeatmapSeries:
    """Bytes moved per bin (summed over ranks) of one heatmap submodule."""

    module: str
    start: float  # epoch seconds of bin 0
    width: float  # seconds
    read_bytes: np.ndarray
    write_bytes: np.ndarray


@dataclass
class DarshanData:
    """The job's Darshan data. ``heatmaps`` and ``ranks`` are made by ``read_heatmaps`` and
    ``read_ranks`` when first read (the job's diagnosis in the post-job hook reads neither:
    they matter for the report's pictures and for rules that need Prometheus data too); both
    can be set like attributes."""

    logs: int = 0
    nprocs: int = 0
    start: float | None = None
    end: float | None = None
    runtime: float = 0.0
    exe: str = ""
    modules: dict[str, ModuleTotals] = field(default_factory=dict)
    module_names: set[str] = field(default_factory=set)  # every module in the logs
    counted_modules: set[str] = field(default_factory=set)  # modules in the job totals
    files: dict[str, FileTable] = field(default_factory=dict)  # POSIX, MPI-IO, STDIO, ...
    source: str = ""  # "influxdb points" or "darshan log"
    read_heatmaps: Callable[[], list[HeatmapSeries]] = field(
        default=list, repr=False, compare=False
    )
    read_ranks: Callable[[], dict[int, tuple[float, float, float]]] = field(
        default=dict, repr=False, compare=False
    )

    @cached_property
    def heatmaps(self) -> list[HeatmapSeries]:
        return self.read_heatmaps()

    @cached_property
    def ranks(self) -> dict[int, tuple[float, float, float]]:
        """rank -> (bytes read, bytes written, I/O seconds) on its own files, job-total
        modules."""
        return self.read_ranks()

    def total(self, attribute: str) -> float:
        return sum(
            getattr(self.modules[m], attribute) for m in self.counted_modules if m in self.modules
        )


@dataclass
class FunctionStat:
    name: str
    calls: float
    total_time: float  # seconds; NaN when some of its calls had no time
    self_time: float | None = None
    source: str = ""  # recorder / viztracer


@dataclass
class TracedFile:
    """A file in a Recorder trace: how often and by how many ranks it was accessed."""

    name: str
    accesses: float
    ranks: float
    time: float  # seconds; NaN when some of its calls had no time


@dataclass
class GeopmEnergy:
    hosts: int = 0
    energy_joules: float = 0.0  # package + dram over the application, all hosts
    runtime: float = 0.0
    start: float | None = None  # epoch seconds, the report's Start Time


@dataclass
class Series:
    """A Prometheus time series over the window: epoch seconds and values."""

    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray

    @property
    def peak(self) -> float:
        return float(np.max(self.values)) if len(self.values) else 0.0


@dataclass
class TargetUse:
    """One Lustre target during the job's window."""

    component: str
    target: str
    read_bytes: float = 0.0  # moved by the job
    write_bytes: float = 0.0
    metadata_ops: float = 0.0
    all_read_bytes: float = 0.0  # moved by every job on the target
    all_write_bytes: float = 0.0
    all_metadata_ops: float = 0.0
    job_rate: Series | None = None  # bytes/s (ost) or ops/s (mdt) of the job
    all_rate: Series | None = None  # same, all jobs

    @property
    def share(self) -> float:
        """The job's share of the target's traffic over the window (bytes, or ops on an MDT)."""
        if self.component == "mdt":
            return self.metadata_ops / self.all_metadata_ops if self.all_metadata_ops else 0.0
        mine = self.read_bytes + self.write_bytes
        every = self.all_read_bytes + self.all_write_bytes
        return mine / every if every else 0.0


@dataclass
class PrometheusData:
    targets: list[TargetUse] = field(default_factory=list)
    power: Series | None = None  # W, the job's nodes summed
    alerts: list[dict[str, str]] = field(default_factory=list)


@dataclass
class SlurmView:
    """Slurm's view of the finished job (its ``slurm_job`` point); None = Slurm did not tell."""

    job_id: str
    job_name: str | None = None  # the user's own text: shown escaped, never interpreted
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    nodelist: str | None = None  # Slurm's compressed form, e.g. n[1-2]
    num_nodes: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None  # 0: not ended by a signal
    start: float | None = None  # epoch seconds
    end: float | None = None

    @property
    def elapsed(self) -> float | None:
        return self.end - self.start if self.start is not None and self.end is not None else None

    @property
    def failed(self) -> bool | None:
        """A non-zero exit status or a signal (Slurm's FAILED, CANCELLED, TIMEOUT, ...)."""
        if self.exit_code is None and self.exit_signal is None:
            return None
        return bool(self.exit_code or self.exit_signal)


@dataclass
class JobData:
    """Everything the report knows about one job, and what it could not see."""

    job_id: str
    cluster: str = ""
    slurm: SlurmView | None = None  # Slurm's view: who ran it, where, how it ended
    darshan: DarshanData | None = None
    functions: list[FunctionStat] = field(default_factory=list)
    traced_files: list[TracedFile] = field(default_factory=list)  # Recorder
    geopm: GeopmEnergy | None = None
    prometheus: PrometheusData | None = None
    window: tuple[float, float] | None = None  # epoch seconds
    missing: list[str] = field(default_factory=list)  # what the report could not see, and why
    unreadable: list[str] = field(default_factory=list)  # sources that failed (not just empty)
    history: AppHistory | None = None  # earlier runs of the same application (history.py)
