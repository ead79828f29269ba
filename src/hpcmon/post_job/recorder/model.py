"""What a Recorder trace holds once read: metadata, call signatures and per-rank arrays.

Per-rank arrays (numpy) carry the bulk data so counting a million calls never builds a
million Python objects; ``RecorderTrace.records()`` yields typed ``Record`` s on demand.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class TraceMetadata:
    version: str
    layout: str  # "3.0", "2.5" or "2.4"
    total_ranks: int
    start_ts: float  # epoch seconds of the trace start (rank 0's logger start)
    time_resolution: float  # seconds per tick of the stored deltas
    ts_compression: bool
    interprocess_compression: bool
    store_tid: bool
    store_call_depth: bool
    function_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallSignature:
    """One entry of the call-signature table: everything about a call except its times."""

    terminal_id: int
    func_id: int
    function: str
    func_type: str  # POSIX, MPIIO, MPI, HDF5, PNETCDF, NETCDF, USER
    thread_id: int
    call_depth: int
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One traced call; times are seconds since the trace start (``start_ts``)."""

    rank: int
    thread_id: int
    func_id: int
    function: str
    func_type: str
    call_depth: int
    args: tuple[str, ...]
    tstart: float
    tend: float


@dataclass(slots=True)
class RankTrace:
    """One rank's calls in program order: signature ids and start/end seconds (NaN = lost)."""

    rank: int
    terminals: np.ndarray  # int64 terminal ids, one per call
    tstart: np.ndarray  # float64 seconds since start_ts
    tend: np.ndarray


@dataclass(slots=True)
class RecorderTrace:
    path: Path
    metadata: TraceMetadata
    signatures: dict[int, CallSignature]
    ranks: list[RankTrace]
    errors: list[str] = field(default_factory=list)

    @property
    def record_count(self) -> int:
        return sum(len(rank.terminals) for rank in self.ranks)

    def records(self, rank: int | None = None) -> Iterator[Record]:
        """Typed records in program order, rank by rank (or only ``rank``)."""
        for trace in self.ranks:
            if rank is not None and trace.rank != rank:
                continue
            starts = trace.tstart.tolist()
            ends = trace.tend.tolist()
            for terminal, tstart, tend in zip(trace.terminals.tolist(), starts, ends, strict=True):
                sig = self.signatures[terminal]
                yield Record(
                    trace.rank,
                    sig.thread_id,
                    sig.func_id,
                    sig.function,
                    sig.func_type,
                    sig.call_depth,
                    sig.args,
                    tstart,
                    tend,
                )

    def function_counts(self, rank: RankTrace) -> dict[str, int]:
        """Calls per function name on one rank, straight from the terminal ids (no records)."""
        counts: dict[str, int] = {}
        if len(rank.terminals) == 0:
            return counts
        ids, per_id = np.unique(rank.terminals, return_counts=True)
        for terminal, count in zip(ids.tolist(), per_id.tolist(), strict=True):
            name = self.signatures[terminal].function
            counts[name] = counts.get(name, 0) + count
        return counts


def function_type(name: str) -> str:
    """The layer a function belongs to, from its name (Recorder's own ranges, by prefix)."""
    if name.startswith("MPI_File"):
        return "MPIIO"
    if name.startswith("MPI_"):
        return "MPI"
    if name.startswith("H5"):
        return "HDF5"
    if name.startswith("ncmpi"):
        return "PNETCDF"
    if name.startswith(("nc_", "nc__", "NC_", "nctypelen")):
        return "NETCDF"
    if name == "user_function":
        return "USER"
    return "POSIX"
