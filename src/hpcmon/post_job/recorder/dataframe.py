"""Recorder traces as pandas structures (shared/specs/recorder-dataframe-design.rst).

One row per traced call. ``RecorderDataReader`` builds the frame from ``reader.py``'s typed
trace, ``RecorderDataFrame`` answers count/time/file questions for one run, and
``MultiRecorderDFHandler`` lines several runs up side by side.

File names. Recorder 2.4 and later resolve a POSIX file descriptor or ``FILE*`` to its path
when they record the call, so POSIX rows carry the path in a known argument. What still
needs a map is MPI-IO: ``MPI_File_open`` records the file name and the handle it returns
(e.g. ``0-0``), later ``MPI_File_*`` calls only the handle. ``get_fd_to_file_name`` walks each
rank's calls in start order and fills that map (fds 0/1/2 start as stdin/stdout/stderr).
File *accesses* are counted at the POSIX layer only, where every operation reaches the
file system; MPI-IO rows get their file name but are not counted a second time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd

from hpcmon.post_job.recorder.model import CallSignature, RecorderTrace
from hpcmon.post_job.recorder.reader import read_recorder_trace

# Argument that names the file, for POSIX calls (path already resolved by Recorder).
_POSIX_FILE_ARG: dict[str, int] = {
    **dict.fromkeys(
        """
        creat creat64 open open64 close write read lseek lseek64 pread pread64 pwrite pwrite64
        readv writev fopen fopen64 fdopen fclose ftell ftello fseek fseeko fsync fdatasync
        fprintf vfprintf fileno fcntl dup dup2 mkdir rmdir chdir link unlink symlink readlink
        rename chmod fchmod chown fchown lchown utime opendir readdir closedir rewinddir mknod
        mkfifo access remove truncate ftruncate stat stat64 lstat lstat64 fstat fstat64 statfs
        fstatfs fflush feof ferror rewind getc fgetc fgets fputs fputc putc ungetc msync lockf
        flock posix_fadvise fallocate posix_fallocate
        """.split(),
        0,
    ),
    **dict.fromkeys(
        """
        __xstat __xstat64 __lxstat __lxstat64 __fxstat __fxstat64 openat openat64 faccessat
        linkat mknodat readlinkat unlinkat fstatat mkdirat symlinkat
        """.split(),
        1,
    ),
    "fwrite": 3,
    "fread": 3,
    "mmap": 4,
    "mmap64": 4,
}
_STANDARD_STREAMS = {"0": "stdin", "1": "stdout", "2": "stderr"}
FILE_ACCESS_LAYER = "POSIX"
COLUMNS = [
    "rank",
    "thread_id",
    "function_id",
    "function_name",
    "func_type",
    "call_depth",
    "tstart",
    "tend",
    "time",
    "arg_count",
    "args",
    "file_name",
    "fd",
]


def _static_file_name(sig: CallSignature) -> str | None:
    """The file a call names by itself (no map needed), or None."""
    if sig.func_type == "POSIX":
        index = _POSIX_FILE_ARG.get(sig.function)
        if index is None or index >= len(sig.args):
            return None
        value = sig.args[index]
        if value.isdigit():
            return _STANDARD_STREAMS.get(value)
        if value in ("%p", "???", "") or value.startswith("0x"):
            return None
        return value
    if sig.function == "MPI_File_open" and len(sig.args) > 1:
        return sig.args[1]
    if sig.function in ("H5Fcreate", "H5Fopen") and sig.args:
        return sig.args[0]
    return None


class RecorderDataReader:
    """Reads one trace directory into a RecorderDataFrame (one row per call)."""

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self.trace: RecorderTrace = read_recorder_trace(self.log_dir)

    def sort_records(self) -> list[np.ndarray]:
        """Per rank, the order of the rank's calls by start time (stable; ties keep program
        order, calls without a time go last)."""
        return [np.argsort(rank.tstart, kind="stable") for rank in self.trace.ranks]

    def get_fd_to_file_name(
        self, records: pd.DataFrame, np_: int, func_id_to_name: Sequence[str]
    ) -> list[dict[str, str]]:
        """Fill ``records.file_name`` for calls that only carry a handle; returns the
        handle -> file name map of each of the ``np_`` ranks."""
        maps: list[dict[str, str]] = [dict(_STANDARD_STREAMS) for _ in range(np_)]
        function_ids = records["function_id"].to_numpy(dtype=np.int64)
        names = np.asarray(func_id_to_name, dtype=object)[function_ids]
        is_mpiio = (records["func_type"] == "MPIIO").to_numpy()
        if not is_mpiio.any():
            return maps
        file_names = records["file_name"].to_numpy(dtype=object).copy()
        rows = np.flatnonzero(is_mpiio)
        ranks = records["rank"].to_numpy()[rows]
        args = records["args"].to_numpy()[rows]
        for row, rank, name, call_args in zip(
            rows.tolist(), ranks.tolist(), names[rows].tolist(), args.tolist(), strict=True
        ):
            if not 0 <= rank < np_ or not call_args:
                continue
            if name == "MPI_File_open":
                if len(call_args) > 4:
                    maps[rank][call_args[4]] = call_args[1]
            elif pd.isna(file_names[row]):
                file_names[row] = maps[rank].get(call_args[0])
        records["file_name"] = file_names
        return maps

    def add_rows(self, df: pd.DataFrame | None, records: list[np.ndarray]) -> pd.DataFrame:
        """Rows for every call (``records`` = each rank's sort order), appended to ``df``."""
        sigs = self.trace.signatures
        terminal_ids = np.fromiter(sigs, dtype=np.int64, count=len(sigs))
        order = np.argsort(terminal_ids)
        terminal_ids = terminal_ids[order]
        table = [sigs[t] for t in terminal_ids.tolist()]
        columns = {
            "thread_id": np.array([s.thread_id for s in table], dtype=np.uint64),
            "function_id": np.array([s.func_id for s in table], dtype=np.int64),
            "function_name": np.array([s.function for s in table], dtype=object),
            "func_type": np.array([s.func_type for s in table], dtype=object),
            "call_depth": np.array([s.call_depth for s in table], dtype=np.int64),
            "arg_count": np.array([len(s.args) for s in table], dtype=np.int64),
            "args": _object_array([s.args for s in table]),
            "file_name": np.array([_static_file_name(s) for s in table], dtype=object),
            "fd": np.array(
                [
                    s.args[4] if s.function == "MPI_File_open" and len(s.args) > 4 else None
                    for s in table
                ],
                dtype=object,
            ),
        }
        parts = []
        for rank, sort_order in zip(self.trace.ranks, records, strict=True):
            index = np.searchsorted(terminal_ids, rank.terminals[sort_order])
            part = {name: values[index] for name, values in columns.items()}
            part["rank"] = np.full(len(index), rank.rank, dtype=np.int64)
            part["tstart"] = rank.tstart[sort_order]
            part["tend"] = rank.tend[sort_order]
            parts.append(part)
        if parts:
            merged = {
                name: np.concatenate([p[name] for p in parts]) for name in COLUMNS if name != "time"
            }
        else:
            merged = {name: np.array([], dtype=object) for name in COLUMNS if name != "time"}
            merged["tstart"] = merged["tend"] = np.array([], dtype=float)
        merged["time"] = merged["tend"] - merged["tstart"]
        new = pd.DataFrame({name: merged[name] for name in COLUMNS})
        if df is None or df.empty:
            return new
        return pd.concat([df, new], ignore_index=True)

    def read(self) -> RecorderDataFrame:
        meta = self.trace.metadata
        df = self.add_rows(None, self.sort_records())
        read_ranks = [rank.rank for rank in self.trace.ranks]
        # maps up to the highest rank read, not the announced count (rows hold no other rank)
        self.get_fd_to_file_name(df, max(read_ranks, default=-1) + 1, meta.function_names)
        return RecorderDataFrame(
            df,
            self.log_dir,
            meta.total_ranks,
            meta.function_names,
            meta.start_ts,
            list(self.trace.errors),
            read_ranks,
        )


def _object_array(items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


class RecorderDataFrame:
    """One run's calls plus the questions asked about them (design doc names).

    ``total_ranks`` is what the trace announces; ``read_ranks`` the ranks actually decoded
    (default: those with rows). Ranks that could not be read are in neither ``df`` nor
    ``read_ranks``, so nothing per rank can pass them off as idle.
    """

    def __init__(
        self,
        df: pd.DataFrame,
        log_dir: str | Path,
        total_ranks: int,
        function_names: Sequence[str],
        start_ts: float = 0.0,
        errors: list[str] | None = None,
        read_ranks: Sequence[int] | None = None,
    ) -> None:
        self.df = df
        self.log_dir = str(log_dir)
        self.total_ranks = total_ranks
        self.function_names = tuple(function_names)
        self.start_ts = start_ts
        self.errors = errors or []
        if read_ranks is None:
            self.read_ranks: list[int] = np.unique(df["rank"].to_numpy(dtype=np.int64)).tolist()
        else:
            self.read_ranks = sorted(read_ranks)

    @classmethod
    def from_recorder(cls, log_dir: str | Path) -> RecorderDataFrame:
        return RecorderDataReader(log_dir).read()

    def _with(self, df: pd.DataFrame) -> RecorderDataFrame:
        return RecorderDataFrame(
            df,
            self.log_dir,
            self.total_ranks,
            self.function_names,
            self.start_ts,
            list(self.errors),
            self.read_ranks,
        )

    def filter(self, my_lambda: Callable) -> RecorderDataFrame:
        """Rows for which ``my_lambda`` holds. The lambda is first tried on the whole frame
        (fast, e.g. ``lambda r: r["rank"] == 0``) and else applied row by row."""
        if self.df.empty:
            return self._with(self.df)
        try:
            mask = my_lambda(self.df)
            if not (
                isinstance(mask, pd.Series)
                and mask.dtype == bool
                and mask.index.equals(self.df.index)
            ):
                raise TypeError("not a row mask")
        except Exception:  # the lambda is meant for one row at a time
            mask = self.df.apply(my_lambda, axis=1).astype(bool)
        rows = self.df[mask]
        assert isinstance(rows, pd.DataFrame)  # a mask selects rows, never a column
        return self._with(rows.reset_index(drop=True))

    # --- records
    def get_record_count(self) -> int:
        return len(self.df)

    def get_record_count_each_rank(self) -> list[int]:
        counts = np.bincount(self.df["rank"].to_numpy(dtype=np.int64), minlength=self.total_ranks)
        return counts[: self.total_ranks].tolist()

    # --- function counts
    def get_function_count(self) -> list[int]:
        counts = np.bincount(
            self.df["function_id"].to_numpy(dtype=np.int64), minlength=len(self.function_names)
        )
        return counts.tolist()

    def get_nonzero_function_count(self) -> dict[int, int]:
        return {i: c for i, c in enumerate(self.get_function_count()) if c}

    def get_function_count_each_rank(self) -> list[list[int]]:
        return [self._rank(r).get_function_count() for r in range(self.total_ranks)]

    def get_nonzero_function_count_each_rank(self) -> list[dict[int, int]]:
        return [self._rank(r).get_nonzero_function_count() for r in range(self.total_ranks)]

    # --- files
    def file_accesses(self) -> pd.DataFrame:
        """The rows that count as file accesses: POSIX calls that name a file."""
        if not hasattr(self, "_access_rows"):
            df = self.df
            rows = df[(df["func_type"] == FILE_ACCESS_LAYER) & df["file_name"].notna()]
            assert isinstance(rows, pd.DataFrame)  # a mask selects rows, never a column
            self._access_rows = rows
        return self._access_rows

    def get_file_access_count(self) -> dict[str, int]:
        """File name -> number of POSIX calls on it (see module docstring)."""
        counts = self.file_accesses()["file_name"].value_counts(sort=False)
        return {str(name): int(count) for name, count in counts.items()}

    def get_total_file_access_count(self) -> int:
        return len(self.file_accesses())

    def get_file_access_count_each_rank(self) -> list[dict[str, int]]:
        return [self._rank(r).get_file_access_count() for r in range(self.total_ranks)]

    def get_total_file_access_count_each_rank(self) -> list[int]:
        return [self._rank(r).get_total_file_access_count() for r in range(self.total_ranks)]

    def get_files(self) -> list[str]:
        return sorted(self.get_file_access_count())

    def get_files_each_ranks(self) -> list[list[str]]:
        return [self._rank(r).get_files() for r in range(self.total_ranks)]

    def get_total_file_count(self) -> int:
        return len(self.get_files())

    def get_total_file_count_each_rank(self) -> list[int]:
        return [len(files) for files in self.get_files_each_ranks()]

    # --- function time (seconds, calls without timestamps count as 0)
    def get_total_function_time(self) -> float:
        return float(np.nansum(self.df["time"].to_numpy(dtype=float)))

    def get_function_time(self) -> list[float]:
        times = np.bincount(
            self.df["function_id"].to_numpy(dtype=np.int64),
            weights=np.nan_to_num(self.df["time"].to_numpy(dtype=float)),
            minlength=len(self.function_names),
        )
        return times.tolist()

    def get_nonzero_function_time(self) -> dict[int, float]:
        """Function id -> time, for every function called (even if its calls took 0 s)."""
        times = self.get_function_time()
        return {i: times[i] for i in self.get_nonzero_function_count()}

    def get_total_function_time_each_rank(self) -> list[float]:
        return [self._rank(r).get_total_function_time() for r in range(self.total_ranks)]

    def get_nonzero_function_time_each_rank(self) -> list[dict[int, float]]:
        return [self._rank(r).get_nonzero_function_time() for r in range(self.total_ranks)]

    def get_function_time_each_rank(self) -> list[list[float]]:
        return [self._rank(r).get_function_time() for r in range(self.total_ranks)]

    # --- per-rank tables: work follows the rows, never ``total_ranks`` (a header may claim
    # a million ranks beside two that hold data)
    def rank_summary(self) -> pd.DataFrame:
        """One row per read rank, in rank order (index ``rank``): ``records``, ``files``,
        ``file_accesses``, ``function_time_seconds``; a read rank without calls has zeros."""
        ranks = self.df["rank"].to_numpy(dtype=np.int64)
        order = np.argsort(ranks, kind="stable")
        present, starts, records = np.unique(ranks[order], return_index=True, return_counts=True)
        times = self.df["time"].to_numpy(dtype=float)[order]
        # np.nansum per rank, as get_total_function_time sums (pairwise): same figures
        bounds = [*starts.tolist(), len(times)]
        function_time = [float(np.nansum(times[start:end])) for start, end in pairwise(bounds)]
        accesses = self.file_accesses().groupby("rank")["file_name"]
        summary = pd.DataFrame(
            {
                "records": pd.Series(records, index=present, dtype=np.int64),
                "files": accesses.nunique(),
                "file_accesses": accesses.size(),
                "function_time_seconds": pd.Series(function_time, index=present, dtype=float),
            }
        )
        return (
            summary.reindex(self.read_ranks)
            .fillna(0)
            .astype({"records": np.int64, "files": np.int64, "file_accesses": np.int64})
        )

    def rank_function_summary(self) -> pd.DataFrame:
        """One row per (rank, function id) called, sorted by both: ``rank``, ``function_id``,
        ``count``, ``total_time_seconds`` (summed in row order, as get_function_time does)."""
        keys = np.stack(
            [
                self.df["rank"].to_numpy(dtype=np.int64),
                self.df["function_id"].to_numpy(dtype=np.int64),
            ],
            axis=1,
        )
        pairs, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        times = np.bincount(
            inverse.ravel(),
            weights=np.nan_to_num(self.df["time"].to_numpy(dtype=float)),
            minlength=len(pairs),
        )
        return pd.DataFrame(
            {
                "rank": pairs[:, 0],
                "function_id": pairs[:, 1],
                "count": counts,
                "total_time_seconds": times,
            }
        )

    def _rank(self, rank: int) -> RecorderDataFrame:
        if not hasattr(self, "_by_rank"):
            groups = dict(tuple(self.df.groupby("rank", sort=False)))
            self._by_rank = {r: self._with(group) for r, group in groups.items()}
            self._no_rows = self._with(self.df.iloc[0:0])
        return self._by_rank.get(rank) or self._no_rows


class MultiRecorderDFHandler:
    """Several runs side by side: rows = runs (log_dir), columns = ranks or functions."""

    def __init__(self, frames: Sequence[RecorderDataFrame]) -> None:
        self.frames = list(frames)

    def _logs(self) -> list[str]:
        return [frame.log_dir for frame in self.frames]

    def _names(self, nonzero: bool) -> list[str]:
        names: dict[str, None] = {}
        for frame in self.frames:
            if nonzero:
                names.update(dict.fromkeys(frame.df["function_name"].unique().tolist()))
            else:
                names.update(dict.fromkeys(frame.function_names))
        return list(names)

    def _by_function(
        self, values: Callable[[RecorderDataFrame], list], nonzero: bool, dtype: type
    ) -> pd.DataFrame:
        columns = self._names(nonzero)
        rows = []
        for frame in self.frames:
            per_name: dict[str, float] = {}
            for name, value in zip(frame.function_names, values(frame), strict=True):
                per_name[name] = per_name.get(name, 0) + value
            rows.append([per_name.get(name, 0) for name in columns])
        return pd.DataFrame(rows, index=self._logs(), columns=columns, dtype=dtype)

    def _by_rank(self, values: Callable[[RecorderDataFrame], list[int]]) -> pd.DataFrame:
        rows = {frame.log_dir: pd.Series(values(frame), dtype="Int64") for frame in self.frames}
        return pd.DataFrame(rows).T.reindex(self._logs())

    def get_record_count_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_rank(RecorderDataFrame.get_record_count_each_rank)

    def get_record_count_aggregated_by_ranks(self) -> pd.DataFrame:
        return self.get_record_count_aggregated_by_logs().T

    def get_average_record_count_each_rank(self) -> list[float]:
        """Mean over the runs that have the rank (runs may differ in rank count)."""
        return self.get_record_count_aggregated_by_logs().astype(float).mean(axis=0).tolist()

    def get_file_count_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_rank(RecorderDataFrame.get_total_file_count_each_rank)

    def get_file_count_aggregated_by_ranks(self) -> pd.DataFrame:
        return self.get_file_count_aggregated_by_logs().T

    def get_function_count_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_function(RecorderDataFrame.get_function_count, False, int)

    def get_function_count_aggregated_by_functions(self) -> pd.DataFrame:
        return self.get_function_count_aggregated_by_logs().T

    def get_nonzero_function_count_aggregated_by_functions(self) -> pd.DataFrame:
        return self.get_nonzero_function_count_aggregated_by_logs().T

    def get_nonzero_function_count_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_function(RecorderDataFrame.get_function_count, True, int)

    def get_function_time_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_function(RecorderDataFrame.get_function_time, False, float)

    def get_function_time_aggregated_by_functions(self) -> pd.DataFrame:
        return self.get_function_time_aggregated_by_logs().T

    def get_nonzero_function_time_aggregated_by_functions(self) -> pd.DataFrame:
        return self.get_nonzero_function_time_aggregated_by_logs().T

    def get_nonzero_function_time_aggregated_by_logs(self) -> pd.DataFrame:
        return self._by_function(RecorderDataFrame.get_function_time, True, float)
