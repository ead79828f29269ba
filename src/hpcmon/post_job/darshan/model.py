"""Typed records both Darshan readers produce, so binary and text input give identical signals.

Records are kept column-wise (one numpy array per counter, one row per record) because a job
can have 100,000 records and the signals are computed with array arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Darshan modules whose records carry I/O counters; the others (LUSTRE, APMPI, APXC, DXT_*)
# are known to Darshan but give no signal, so readers skip them without an error.
IO_MODULES = (
    "POSIX",
    "MPI-IO",
    "STDIO",
    "H5F",
    "H5D",
    "PNETCDF_FILE",
    "PNETCDF_VAR",
    "DFS",
    "DAOS",
)
SKIPPED_MODULES = (
    "LUSTRE",
    "APMPI",
    "APXC",
    "DXT_POSIX",
    "DXT_MPIIO",
    "MDHIM",
    "BG/Q",
    "NULL",
    "PNETCDF",
)
HEATMAP = "HEATMAP"


@dataclass
class JobInfo:
    """The job header of one Darshan log."""

    log_jobid: str = ""
    uid: int | None = None
    nprocs: int = 0
    start_time: int = 0  # epoch seconds
    end_time: int = 0  # epoch seconds
    run_time: float = 0.0  # seconds, full precision (darshan-parser text prints 4 decimals)
    exe: str = ""
    log_version: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    # darshan-parser's header block (binary logs: only when asked, for the signals file)
    header_lines: list[str] = field(default_factory=list)

    @property
    def exe_name(self) -> str:
        """Base name of the executable (first word of the command line)."""
        first = self.exe.split(" ", 1)[0] if self.exe else ""
        return first.rsplit("/", 1)[-1]


# Header sanity bounds: beyond them a value is damage, not a fact about the job.
EARLIEST_START = 946_684_800  # 2000-01-01, before any Darshan release
MAX_NPROCS = 100_000_000
MAX_RUN_TIME = 10 * 365 * 86_400  # ten years, in seconds
MAX_UID = 2**32 - 1


def header_problems(job: JobInfo, now: float) -> tuple[str | None, dict[str, str]]:
    """Check a log's header: (why the whole log must be refused, or None; {field: value as
    read} for implausible values that are left out of the points instead of written)."""
    start, end = job.start_time, job.end_time
    if start < 0 or start > now + 86_400:
        return f"start_time {start} is not a plausible epoch time (the points need it)", {}
    flagged: dict[str, str] = {}
    if 0 < start < EARLIEST_START:
        flagged["start_time"] = str(start)
    if not 1 <= job.nprocs <= MAX_NPROCS:
        flagged["nprocs"] = f"{job.nprocs:g}" if isinstance(job.nprocs, float) else str(job.nprocs)
    if not (job.run_time == job.run_time and 0 <= job.run_time <= MAX_RUN_TIME):
        flagged["runtime"] = f"{job.run_time:g}"
    if (start and end < start) or end < 0 or end > now + 86_400:
        flagged["end_time"] = str(end)
    if job.uid is not None and not 0 <= job.uid <= MAX_UID:
        flagged["uid"] = str(job.uid)
    return None, flagged


@dataclass
class ModuleTable:
    """All records of one Darshan module, one row per (rank, record_id)."""

    module: str
    record_ids: np.ndarray  # uint64
    ranks: np.ndarray  # int64, -1 = shared file
    counters: dict[str, np.ndarray]  # name -> int64 column
    fcounters: dict[str, np.ndarray]  # name -> float64 column
    partial: bool = False

    def __len__(self) -> int:
        return len(self.record_ids)

    def column(self, name: str) -> np.ndarray | None:
        """A counter column by its Darshan name, or None when this log lacks it."""
        found = self.counters.get(name)
        if found is None:
            found = self.fcounters.get(name)
        return found


@dataclass(slots=True)
class HeatmapRecord:
    """One rank's HEATMAP record for one submodule (POSIX, MPIIO, STDIO, DFS, DAOS).

    Bins hold bytes read/written during each bin (Darshan's heatmap module), not operations.
    """

    submodule: str
    rank: int
    record_id: int
    bin_width: float  # seconds; 0 when the log lacks it
    read_bins: np.ndarray  # int64
    write_bins: np.ndarray  # int64


@dataclass
class DarshanLog:
    """Everything the signals need from one log, whatever the reader."""

    source: str  # the file it came from, for messages
    job: JobInfo
    modules: dict[str, ModuleTable] = field(default_factory=dict)
    heatmaps: list[HeatmapRecord] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # record_id -> file name
    skipped_modules: list[str] = field(default_factory=list)  # in the log, no signal in them
    problems: list[str] = field(default_factory=list)  # "<file>: <problem>" messages
    # modules Darshan flagged partial (ran out of record or trace memory), DXT_* included:
    # normal for long jobs, so a warning and a field, not an error
    partial_modules: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def partial_warning(path: object, module: str) -> str:
    what = "trace buffer" if module.startswith("DXT_") else "memory for records"
    return (
        f"{path}: module {module} is partial (Darshan ran out of {what}; its data covers"
        " only what was kept); listed in darshan_job's partial_modules"
    )


# Known HEATMAP record ids (hash of "heatmap:<SUBMODULE>"), used when no name is available.
HEATMAP_IDS = {
    16592106915301738621: "POSIX",
    3989511027826779520: "STDIO",
    3668870418325792824: "MPIIO",
    1597927878319380788: "DFS",
    4131494093108637317: "DAOS",
}


def heatmap_submodule(record_id: int, name: str | None) -> str:
    """Submodule of a HEATMAP record from its name ("heatmap:POSIX") or its well-known id."""
    if name and name.startswith("heatmap:"):
        return name.split(":", 1)[1]
    return HEATMAP_IDS.get(record_id, str(record_id))


def is_record_id_counter(name: str) -> bool:
    """Counters holding another record's id (a hash, not a count): no signal uses them."""
    return name.endswith(("_REC_ID", "_RENAMED_FROM"))
