"""Diagnosis rules: typed records -> insights with a level, evidence numbers and a recommendation.

Each rule is documented in RULES (id, level, threshold, the Drishti code it matches); the
documentation's rule table (docs/reference/diagnosis.md) is generated from it. Rules evaluate
only what the sources could see: a rule whose inputs are unknown is listed as not evaluated,
with the reason, never as passed. Thresholds of the Drishti-compatible rules are Drishti 0.8's
defaults (drishti/includes/config.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hpcmon.common.fields import every_known
from hpcmon.post_job.darshan.record import RANK_IMBALANCE, SLOW_METADATA_SECONDS
from hpcmon.report.model import DarshanData, FileTable, JobData, Series
from hpcmon.report.prometheus import integral

HIGH, WARN, INFO = "high", "warn", "info"
MIB = 1024.0 * 1024.0

# Drishti 0.8 default thresholds
SMALL_REQUESTS = 0.1  # share of requests < 1 MiB
SMALL_REQUESTS_ABSOLUTE = 1000
MISALIGNED_REQUESTS = 0.1
METADATA_TIME_RANK = SLOW_METADATA_SECONDS  # seconds of metadata time on one record
RANDOM_OPERATIONS = 0.2
RANDOM_OPERATIONS_ABSOLUTE = 1000
IMBALANCE_STRAGGLERS = 0.15
IMBALANCE_SIZE = RANK_IMBALANCE
INTERFACE_STDIO = 0.1
COLLECTIVE_OPERATIONS_ABSOLUTE = 1000
# this stack's rules
REDUNDANT_READ_SHARE = 0.1  # bytes read beyond each file's extent / bytes read
REDUNDANT_READ_MIN_BYTES = 1 * MIB
TARGET_SHARE_WARN = 0.5
TARGET_SHARE_HIGH = 0.8
TARGET_MIN_BYTES = 1024 * MIB  # a target that moved less than this is not "dominated"
TARGET_MIN_OPS = 10_000
SPIKE_FACTOR = 3.0  # target rate above 3x its median over the window
IO_BOUND_BIN = 0.1  # a heatmap bin moving >= 10% of the peak bin is an I/O phase
ENERGY_IO_SHARE = 0.2
PYTHON_HOTSPOT_SHARE = 0.3  # one function's self time / traced time
PYTHON_HOTSPOT_HIGH = 0.5


@dataclass
class Insight:
    id: str
    level: str
    title: str
    evidence: dict[str, float | int | str]
    recommendation: str
    drishti: str | None = None
    files: list[str] = field(default_factory=list)


@dataclass
class NotEvaluated:
    id: str
    reason: str


@dataclass(frozen=True)
class Rule:
    id: str
    level: str
    drishti: str | None
    threshold: str
    check: Callable[[JobData], Insight | NotEvaluated | None]


# ---------------------------------------------------------------- helpers


def _posix(job: JobData) -> tuple[DarshanData, FileTable] | NotEvaluated:
    if job.darshan is None:
        return NotEvaluated("", "no Darshan data")
    table = job.darshan.files.get("POSIX")
    if table is None or not len(table):
        return NotEvaluated("", "no POSIX records")
    return job.darshan, table


def _known(values: np.ndarray) -> bool:
    return bool(len(values)) and not np.isnan(values).all()


ALL_RECORDS = "all records"  # the hook folds every record into its module's sums


def _posix_counter(data: DarshanData, name: str) -> float | None:
    """A POSIX counter summed over all records (or a folded rule input); None if unknown."""
    totals = data.modules.get("POSIX")
    return totals.counter(name) if totals else None


def _posix_counters(data: DarshanData, names: list[str]) -> float | None:
    known = every_known(_posix_counter(data, name) for name in names)
    return None if known is None else float(sum(known))


def _nansum(values: np.ndarray) -> float:
    """``np.nansum`` (NaN as 0) without its wrapper's overhead, large on the hook's few rows."""
    return float(np.where(np.isnan(values), 0.0, values).sum())


def _top_files(table: FileTable, weights: np.ndarray, n: int = 5) -> list[str]:
    if not np.isfinite(weights).all():  # nan_to_num copies every time: only when needed
        weights = np.nan_to_num(weights)
    order = np.argsort(-weights, kind="stable")[:n]
    return [table.files[i] or table.record_ids[i] for i in order if weights[i] > 0]


def _ops_total(data: DarshanData, module: str, direction: str) -> float:
    totals = data.modules.get(module)
    return float(getattr(totals, direction)) if totals else 0.0


# ---------------------------------------------------------------- Drishti-compatible rules


def _stdio(job: JobData):
    if job.darshan is None:
        return NotEvaluated("stdio_heavy", "no Darshan data")
    data = job.darshan
    moved = {
        name: totals.bytes_read + totals.bytes_written
        for name, totals in data.modules.items()
        if totals.records
    }
    stdio_bytes = moved.get("STDIO", 0.0)
    # Drishti's interfaces: POSIX and STDIO, MPI-IO when no POSIX (DAOS/DFS bytes not counted)
    total = stdio_bytes + moved.get("POSIX", moved.get("MPI-IO", 0.0))
    if total and stdio_bytes / total > INTERFACE_STDIO:
        return Insight(
            "stdio_heavy",
            HIGH,
            f"STDIO moves {stdio_bytes / total:.0%} of the job's bytes",
            {"stdio_bytes": stdio_bytes, "total_bytes": total, "share": stdio_bytes / total},
            "Use POSIX or MPI-IO (or HDF5/PnetCDF) for bulk data; keep fprintf/fread for logs.",
            "S01",
        )
    return None


def _no_mpiio(job: JobData):
    if job.darshan is None:
        return NotEvaluated("no_mpiio", "no Darshan data")
    data = job.darshan
    if "MPI-IO" in data.module_names:
        return None
    io = data.total("bytes_read") + data.total("bytes_written")
    level = WARN if data.nprocs > 1 else INFO
    return Insight(
        "no_mpiio",
        level,
        "The job does not use MPI-IO",
        {"nprocs": data.nprocs, "bytes": io},
        "For parallel I/O on shared files consider MPI-IO or a library on it (HDF5, PnetCDF).",
        "M01",
    )


_SMALL_BINS = {"reads": "read", "writes": "write"}
_SMALL = ("0_100", "100_1k", "1k_10k", "10k_100k", "100k_1m")


def _small(direction: str, shared: bool, code: str):
    rid = f"{'shared_' if shared else ''}small_{direction}"
    small_col = "small_reads" if direction == "reads" else "small_writes"
    size_counters = [f"posix_size_{_SMALL_BINS[direction]}_{size}" for size in _SMALL]

    def check(job: JobData):
        found = _posix(job)
        if isinstance(found, NotEvaluated):
            return NotEvaluated(rid, found.reason)
        data, table = found
        if shared:  # every shared record is kept
            rows = table.col("rank") == -1
            if not rows.any():
                return None
            small = table.col(small_col)[rows]
            total = _nansum(table.col(direction)[rows])
            count = _nansum(small) if _known(small) else None
        else:
            total = _ops_total(data, "POSIX", direction)
            count = _posix_counters(data, size_counters)
        if count is None:
            return NotEvaluated(rid, "request size counts unknown")
        if total and count / total > SMALL_REQUESTS and count > SMALL_REQUESTS_ABSOLUTE:
            where = "shared files" if shared else "the job"
            return Insight(
                rid,
                HIGH,
                f"{count / total:.0%} of {direction} on {where} are smaller than 1 MiB",
                {
                    f"small_{direction}": count,
                    direction: total,
                    "share": count / total,
                    "evaluated_on": "all shared records" if shared else ALL_RECORDS,
                },
                "Aggregate requests into larger ones (buffering, MPI-IO collective buffering,"
                " HDF5 chunking/caching); align to the stripe size.",
                code,
                _top_files(
                    table,
                    np.where(rows, table.col(small_col), 0) if shared else table.col(small_col),
                ),
            )
        return None

    return check


def _misaligned(kind: str, code: str):
    rid = f"misaligned_{kind}"
    column = "mem_not_aligned" if kind == "memory" else "file_not_aligned"

    def check(job: JobData):
        found = _posix(job)
        if isinstance(found, NotEvaluated):
            return NotEvaluated(rid, found.reason)
        data, table = found
        count = _posix_counter(data, f"posix_{column}")
        if count is None:
            return NotEvaluated(rid, f"POSIX_{column.upper()} is not in the Darshan data")
        ops = _ops_total(data, "POSIX", "reads") + _ops_total(data, "POSIX", "writes")
        if ops and count / ops > MISALIGNED_REQUESTS:
            return Insight(
                rid,
                HIGH,
                f"{count / ops:.0%} of POSIX requests are not {kind}-aligned",
                {
                    "not_aligned": count,
                    "operations": ops,
                    "share": count / ops,
                    "evaluated_on": ALL_RECORDS,
                },
                "Align buffers (posix_memalign)"
                if kind == "memory"
                else "Align file offsets and request sizes to the file system block/stripe size.",
                code,
                _top_files(table, table.col(column)),
            )
        return None

    return check


def _random(direction: str, code: str):
    rid = f"random_{direction}"
    seq_col = "seq_reads" if direction == "reads" else "seq_writes"

    def check(job: JobData):
        found = _posix(job)
        if isinstance(found, NotEvaluated):
            return NotEvaluated(rid, found.reason)
        data, table = found
        random = _posix_counter(data, rid)
        if random is None:
            return NotEvaluated(rid, "sequential counts unknown")
        total = _ops_total(data, "POSIX", direction)
        if total and random / total > RANDOM_OPERATIONS and random > RANDOM_OPERATIONS_ABSOLUTE:
            per_file = np.nan_to_num(table.col(direction) - table.col(seq_col))
            return Insight(
                rid,
                HIGH,
                f"{random / total:.0%} of POSIX {direction} are random (not sequential)",
                {
                    f"random_{direction}": random,
                    direction: total,
                    "share": random / total,
                    "evaluated_on": ALL_RECORDS,
                },
                "Access files sequentially, or gather requests (MPI-IO collective, sorted"
                " offsets, larger contiguous blocks).",
                code,
                _top_files(table, per_file),
            )
        return None

    return check


def _metadata_time(job: JobData):
    found = _posix(job)
    if isinstance(found, NotEvaluated):
        return NotEvaluated("metadata_time", found.reason)
    data, table = found
    records = _posix_counter(data, "slow_meta_records")
    longest = _posix_counter(data, "max_record_meta_time")
    if records is None or longest is None:
        return NotEvaluated("metadata_time", "metadata time unknown")
    if records > 0:
        meta = table.col("meta_time")
        slow = np.nan_to_num(meta) > METADATA_TIME_RANK
        return Insight(
            "metadata_time",
            HIGH,
            f"{int(records)} file record(s) spent more than {METADATA_TIME_RANK:.0f} s in"
            " metadata operations",
            {"records": int(records), "max_metadata_seconds": float(longest)},
            "Open/stat/seek less (open once, cache attributes, fewer files per rank); on Lustre"
            " avoid many small files in one directory.",
            "P17",
            _top_files(table, np.where(slow, meta, 0)),
        )
    return None


def _shared_imbalance(kind: str, code: str):
    rid = f"shared_{kind}_imbalance"

    def check(job: JobData):
        found = _posix(job)
        if isinstance(found, NotEvaluated):
            return NotEvaluated(rid, found.reason)
        _, table = found
        shared = table.col("rank") == -1
        if not shared.any():
            return None
        if kind == "data":
            slow, fast = table.col("slowest_rank_bytes"), table.col("fastest_rank_bytes")
            total = table.col("bytes_read") + table.col("bytes_written")
        else:
            slow, fast = table.col("slowest_rank_time"), table.col("fastest_rank_time")
            total = table.col("read_time") + table.col("write_time") + table.col("meta_time")
        if not _known(slow[shared]) or not _known(fast[shared]):
            return NotEvaluated(rid, f"per-rank {kind} extremes are not in the Darshan data")
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.where(shared & (total > 0), np.abs(slow - fast) / total, 0.0)
        hit = spread > IMBALANCE_STRAGGLERS  # NaN is no hit, as nan_to_num's 0 would be
        if hit.any():
            spread = np.nan_to_num(spread)
            what = "bytes" if kind == "data" else "I/O time"
            return Insight(
                rid,
                HIGH,
                f"{int(hit.sum())} shared file(s) where the slowest and fastest rank differ by"
                f" more than {IMBALANCE_STRAGGLERS:.0%} of the file's {what} (stragglers)",
                {"files": int(hit.sum()), "max_spread": float(spread.max())},
                "Balance the work per rank on shared files; with MPI-IO use collective I/O so"
                " aggregators even out the load.",
                code,
                _top_files(table, spread),
            )
        return None

    return check


def _rank_imbalance(direction: str, code: str):
    rid = f"rank_{direction}_imbalance"
    moved = "read" if direction == "read" else "written"

    def check(job: JobData):
        found = _posix(job)
        if isinstance(found, NotEvaluated):
            return NotEvaluated(rid, found.reason)
        data, _ = found
        files = _posix_counter(data, f"{rid}_files")  # folded by the hook over all records
        spread = _posix_counter(data, f"max_{rid}")
        if files is None or spread is None:
            return NotEvaluated(rid, "bytes per rank and file unknown")
        if files > 0:
            return Insight(
                rid,
                HIGH,
                f"{int(files)} file(s) accessed by several ranks with more than"
                f" {IMBALANCE_SIZE:.0%} difference in bytes {moved} per rank",
                {"files": int(files), "max_spread": float(spread), "evaluated_on": ALL_RECORDS},
                "Distribute the data evenly over ranks, or let fewer aggregator ranks do the"
                " I/O (MPI-IO collective buffering).",
                code,
            )
        return None

    return check


def _collective(direction: str, code: str):
    rid = f"mpiio_no_collective_{direction}"

    def check(job: JobData):
        if job.darshan is None or "MPI-IO" not in job.darshan.module_names:
            return None
        totals = job.darshan.modules.get("MPI-IO")
        if totals is None or not totals.records:
            return None
        n_coll = totals.counter(f"mpiio_coll_{direction}")
        n_indep = totals.counter(f"mpiio_indep_{direction}")
        if n_coll is None or n_indep is None:
            return NotEvaluated(rid, "collective/independent counts are not in the Darshan data")
        if n_coll == 0 and n_indep + n_coll > COLLECTIVE_OPERATIONS_ABSOLUTE:
            table = job.darshan.files.get("MPI-IO") or FileTable.empty("MPI-IO", 0)
            indep = table.col(f"indep_{direction}")
            return Insight(
                rid,
                HIGH,
                f"MPI-IO {direction} are all independent ({n_indep:.0f} calls), none collective",
                {f"independent_{direction}": n_indep, f"collective_{direction}": n_coll},
                f"Use collective calls (MPI_File_{direction[:-1]}_all / _at_all) on shared"
                " files so MPI-IO can aggregate requests.",
                code,
                _top_files(table, indep),
            )
        return None

    return check


# ---------------------------------------------------------------- this stack's rules


def _redundant_reads(job: JobData):
    found = _posix(job)
    if isinstance(found, NotEvaluated):
        return NotEvaluated("redundant_reads", found.reason)
    data, table = found
    amount = _posix_counter(data, "redundant_read_bytes")
    if amount is None:
        return NotEvaluated("redundant_reads", "file extents unknown")
    total = _ops_total(data, "POSIX", "bytes_read")
    if total and amount / total > REDUNDANT_READ_SHARE and amount > REDUNDANT_READ_MIN_BYTES:
        extent = np.fmax(table.col("max_byte_read"), table.col("max_byte_written")) + 1
        extra = np.clip(np.nan_to_num(table.col("bytes_read") - extent), 0, None)
        return Insight(
            "redundant_reads",
            WARN,
            f"{amount / total:.0%} of the bytes read were read more than once",
            {
                "redundant_bytes": amount,
                "bytes_read": total,
                "share": amount / total,
                "evaluated_on": ALL_RECORDS,
            },
            "Read each file once (cache it in memory, or read on one rank and broadcast).",
            None,
            _top_files(table, extra),
        )
    return None


def _windowed(series: Series | None, start: float, end: float) -> np.ndarray:
    if series is None:
        return np.zeros(0)
    mask = (series.times >= start) & (series.times < end)
    return series.values[mask]


def _io_bins(job: JobData) -> list[tuple[float, float, float]]:
    """(start, end, bytes) of the heatmap bins that are I/O phases (>= 10% of the peak bin)."""
    out = []
    if job.darshan is None:
        return out
    for heatmap in job.darshan.heatmaps:
        moved = heatmap.read_bytes + heatmap.write_bytes
        if not len(moved) or moved.max() <= 0:
            continue
        for k in np.flatnonzero(moved >= IO_BOUND_BIN * moved.max()):
            begin = heatmap.start + k * heatmap.width
            out.append((begin, begin + heatmap.width, float(moved[k])))
    return out


def _overlapping_bins(job: JobData, rule: str):
    """I/O-phase bins inside the Prometheus window, or why the rule cannot look at them."""
    bins = _io_bins(job)
    if not bins:
        return NotEvaluated(rule, "no Darshan heatmap")
    if job.window is not None:
        bins = [b for b in bins if b[1] > job.window[0] and b[0] < job.window[1]]
        if not bins:
            return NotEvaluated(rule, "the Darshan heatmap lies outside the Prometheus window")
    return bins


def _target_dominated(job: JobData):
    if job.prometheus is None:
        return NotEvaluated("target_dominated", "no Prometheus data")
    worst = None
    for target in job.prometheus.targets:
        if target.component == "mdt":
            big = target.all_metadata_ops >= TARGET_MIN_OPS
        else:
            big = target.all_read_bytes + target.all_write_bytes >= TARGET_MIN_BYTES
        better = worst is None or target.share > worst.share
        if big and target.share > TARGET_SHARE_WARN and better:
            worst = target
    if worst is None:
        return None
    return Insight(
        "target_dominated",
        HIGH if worst.share > TARGET_SHARE_HIGH else WARN,
        f"The job took {worst.share:.0%} of {worst.target}'s traffic during its run",
        {
            "target": worst.target,
            "component": worst.component,
            "share": worst.share,
            "job_bytes": worst.read_bytes + worst.write_bytes,
            "job_metadata_ops": worst.metadata_ops,
        },
        "Spread files over more OSTs (lfs setstripe -c), or spread metadata over MDTs (DNE);"
        " schedule heavy phases apart from other jobs.",
    )


def _phase_spike(job: JobData):
    if job.prometheus is None or job.darshan is None:
        return NotEvaluated("io_phase_target_spike", "needs Darshan heatmap and Prometheus")
    bins = _overlapping_bins(job, "io_phase_target_spike")
    if isinstance(bins, NotEvaluated):
        return bins
    hits = []
    for target in job.prometheus.targets:
        rate = target.all_rate
        if rate is None or len(rate.values) < 3:
            continue
        median = float(np.median(rate.values))
        for begin, end, _ in bins:
            inside = _windowed(rate, begin, end)
            mine = _windowed(target.job_rate, begin, end)
            if (
                len(inside)
                and inside.max() > SPIKE_FACTOR * max(median, 1.0)
                and mine.max(initial=0) > 0
            ):
                hits.append((target.target, begin, float(inside.max()), median))
                break
    if not hits:
        return None
    name, begin, peak, median = max(hits, key=lambda h: h[2] / max(h[3], 1.0))
    return Insight(
        "io_phase_target_spike",
        WARN,
        f"An I/O phase of the job coincided with a spike on {name} ({len(hits)} target(s) in all)",
        {
            "target": name,
            "phase_start": begin,
            "target_peak_rate": peak,
            "target_median_rate": median,
            "targets": len(hits),
        },
        "The job's I/O burst pushed targets well above their usual load: stagger checkpoints"
        " across ranks or time, or stripe wider.",
    )


def _energy_io(job: JobData):
    power = job.prometheus.power if job.prometheus else None
    if power is None or len(power.times) < 2:
        return NotEvaluated("energy_waiting_io", "no power series for the job's nodes")
    bins = _overlapping_bins(job, "energy_waiting_io")
    if isinstance(bins, NotEvaluated):
        return bins
    total = integral(power)
    if total <= 0:
        return None
    during = 0.0
    first, last = power.times[0], power.times[-1]
    for begin, end, _ in bins:
        begin, end = max(begin, first), min(end, last)
        if end > begin:  # power interpolated between samples: bins need not match the step
            grid = np.linspace(begin, end, 32)
            during += float(np.trapezoid(np.interp(grid, power.times, power.values), grid))
    share = during / total
    if share > ENERGY_IO_SHARE:
        return Insight(
            "energy_waiting_io",
            WARN,
            f"{share:.0%} of the job's energy ({during / 1000:.1f} kJ) was spent in I/O phases",
            {"energy_io_joules": during, "energy_joules": total, "share": share},
            "Overlap I/O with computation (asynchronous I/O, a dedicated I/O rank), or write"
            " less often.",
        )
    return None


def _python_hotspot(job: JobData):
    functions = [f for f in job.functions if f.source == "viztracer" and f.self_time]
    if not functions:
        return NotEvaluated("python_hotspot", "no VizTracer trace")
    traced = sum(f.self_time or 0.0 for f in functions)
    top = max(functions, key=lambda f: f.self_time or 0.0)
    share = (top.self_time or 0.0) / traced if traced else 0.0
    if share > PYTHON_HOTSPOT_SHARE:
        return Insight(
            "python_hotspot",
            HIGH if share > PYTHON_HOTSPOT_HIGH else INFO,
            f"{top.name} takes {share:.0%} of the traced Python time",
            {
                "function": top.name,
                "self_seconds": top.self_time or 0.0,
                "calls": top.calls,
                "share": share,
            },
            "Look at this function first: vectorise it, move it out of the loop, or cache its"
            " result.",
        )
    return None


RULES: tuple[Rule, ...] = (
    Rule("stdio_heavy", HIGH, "S01", f"STDIO bytes / all bytes > {INTERFACE_STDIO}", _stdio),
    Rule("no_mpiio", WARN, "M01", "MPI-IO module absent (info when nprocs = 1)", _no_mpiio),
    Rule(
        "small_reads",
        HIGH,
        "P05",
        f"reads < 1 MiB / reads > {SMALL_REQUESTS} and > {SMALL_REQUESTS_ABSOLUTE}",
        _small("reads", False, "P05"),
    ),
    Rule(
        "small_writes",
        HIGH,
        "P06",
        f"writes < 1 MiB / writes > {SMALL_REQUESTS} and > {SMALL_REQUESTS_ABSOLUTE}",
        _small("writes", False, "P06"),
    ),
    Rule(
        "misaligned_memory",
        HIGH,
        "P07",
        f"POSIX_MEM_NOT_ALIGNED / requests > {MISALIGNED_REQUESTS}",
        _misaligned("memory", "P07"),
    ),
    Rule(
        "misaligned_file",
        HIGH,
        "P08",
        f"POSIX_FILE_NOT_ALIGNED / requests > {MISALIGNED_REQUESTS}",
        _misaligned("file", "P08"),
    ),
    Rule(
        "random_reads",
        HIGH,
        "P11",
        f"(reads - sequential reads) / reads > {RANDOM_OPERATIONS} and > "
        f"{RANDOM_OPERATIONS_ABSOLUTE}",
        _random("reads", "P11"),
    ),
    Rule(
        "random_writes",
        HIGH,
        "P13",
        f"(writes - sequential writes) / writes > {RANDOM_OPERATIONS} and > "
        f"{RANDOM_OPERATIONS_ABSOLUTE}",
        _random("writes", "P13"),
    ),
    Rule(
        "shared_small_reads",
        HIGH,
        "P15",
        f"on shared files: reads < 1 MiB / reads > {SMALL_REQUESTS} and > "
        f"{SMALL_REQUESTS_ABSOLUTE}",
        _small("reads", True, "P15"),
    ),
    Rule(
        "shared_small_writes",
        HIGH,
        "P16",
        f"on shared files: writes < 1 MiB / writes > {SMALL_REQUESTS} and > "
        f"{SMALL_REQUESTS_ABSOLUTE}",
        _small("writes", True, "P16"),
    ),
    Rule(
        "metadata_time",
        HIGH,
        "P17",
        f"a file record with POSIX_F_META_TIME > {METADATA_TIME_RANK:.0f} s",
        _metadata_time,
    ),
    Rule(
        "shared_data_imbalance",
        HIGH,
        "P18",
        f"shared file: abs(slowest - fastest rank bytes) / bytes > {IMBALANCE_STRAGGLERS}",
        _shared_imbalance("data", "P18"),
    ),
    Rule(
        "shared_time_imbalance",
        HIGH,
        "P19",
        f"shared file: abs(slowest - fastest rank time) / I/O time > {IMBALANCE_STRAGGLERS}",
        _shared_imbalance("time", "P19"),
    ),
    Rule(
        "rank_write_imbalance",
        HIGH,
        "P21",
        f"file written by several ranks: (max - min bytes) / max > {IMBALANCE_SIZE}",
        _rank_imbalance("write", "P21"),
    ),
    Rule(
        "rank_read_imbalance",
        HIGH,
        "P22",
        f"file read by several ranks: (max - min bytes) / max > {IMBALANCE_SIZE}",
        _rank_imbalance("read", "P22"),
    ),
    Rule(
        "mpiio_no_collective_reads",
        HIGH,
        "M02",
        f"MPI-IO: no collective read and independent reads > {COLLECTIVE_OPERATIONS_ABSOLUTE}",
        _collective("reads", "M02"),
    ),
    Rule(
        "mpiio_no_collective_writes",
        HIGH,
        "M03",
        f"MPI-IO: no collective write and independent writes > {COLLECTIVE_OPERATIONS_ABSOLUTE}",
        _collective("writes", "M03"),
    ),
    Rule(
        "redundant_reads",
        WARN,
        None,
        f"bytes read beyond each file's extent / bytes read > {REDUNDANT_READ_SHARE} and"
        f" > {REDUNDANT_READ_MIN_BYTES / MIB:.0f} MiB",
        _redundant_reads,
    ),
    Rule(
        "target_dominated",
        WARN,
        None,
        f"job's share of an OST's bytes (MDT's operations) > {TARGET_SHARE_WARN}"
        f" (high > {TARGET_SHARE_HIGH}), target moved >= {TARGET_MIN_BYTES / MIB / 1024:.0f}"
        f" GiB (>= {TARGET_MIN_OPS} ops)",
        _target_dominated,
    ),
    Rule(
        "io_phase_target_spike",
        WARN,
        None,
        f"a heatmap I/O phase (bin >= {IO_BOUND_BIN:.0%} of the peak bin) where a target the"
        f" job used ran above {SPIKE_FACTOR:g}x its median rate",
        _phase_spike,
    ),
    Rule(
        "energy_waiting_io",
        WARN,
        None,
        f"energy in heatmap I/O phases / job energy > {ENERGY_IO_SHARE}",
        _energy_io,
    ),
    Rule(
        "python_hotspot",
        INFO,
        None,
        f"one VizTracer function's self time / traced time > {PYTHON_HOTSPOT_SHARE}"
        f" (high > {PYTHON_HOTSPOT_HIGH})",
        _python_hotspot,
    ),
)

_ORDER = {HIGH: 0, WARN: 1, INFO: 2}


def diagnose(job: JobData) -> tuple[list[Insight], list[NotEvaluated]]:
    """Every rule on the job: raised insights (most severe first) and rules not evaluated."""
    raised, skipped = [], []
    for rule in RULES:
        outcome = rule.check(job)
        if isinstance(outcome, Insight):
            raised.append(outcome)
        elif isinstance(outcome, NotEvaluated):
            skipped.append(NotEvaluated(rule.id, outcome.reason))
    raised.sort(key=lambda i: _ORDER[i.level])
    return raised, skipped
