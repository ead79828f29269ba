"""Test helpers for the Darshan tests: fixture paths and a deliberately naive reader of
darshan-parser text, independent of post_job.darshan, to compute expected values by hand."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "darshan"
LOGS = DATA / "logs"
TEXTS = DATA / "text"

MPI_IO_TEST = "mpi-io-test-x86_64-3.5.0"
E3SM = "e3sm_io_heatmap_only"
INACTIVE = "treddy_runtime_heatmap_inactive_ranks"
SKEW = "skew-autobench-ior"
EMPTY = "empty_log"
IMBALANCED = "imbalanced-io"
IOR_POSIX = "snyder_ior-POSIX_id1057716-202103_11-8-64415-6936117869459351096_1"
IOR_DFS = "snyder_ior-DFS_id4681120-53379_5-8-15060-3270540599978592154_1"
IOR_HDF5 = "shane_ior-HDF5_id438090-438090_11-9-41522-17417065676046418211_1"
IOR_PNETCDF = "shane_ior-PNETCDF_id438100-438100_11-9-41525-10280033558448664385_1"
HDF5_DXT = "hdf5_diagonal_write_1_byte_dxt"
DRISHTI = "jlbez_8a_benchmark_write_parallel_id1322696_8-21-14519-8141979180909667175_12"

DIAGONAL = "runtime_and_dxt_heatmaps_diagonal_write_only"  # rank r writes 1 byte in bin r
DLIO = "snyder_python3_id3116902-2110365_12-19-66957-188958432683465822_1"

# logs that have a plain darshan-parser text twin in TEXTS
PAIRS = [MPI_IO_TEST, INACTIVE, SKEW, EMPTY, IOR_POSIX, IOR_DFS, IOR_HDF5]
# logs whose (large) darshan-parser text is stored gzipped: see unzipped_text
GZIPPED_PAIRS = [DIAGONAL, DLIO]


def log_path(stem: str) -> Path:
    return LOGS / f"{stem}.darshan"


def text_path(stem: str) -> Path:
    return TEXTS / f"{stem}.txt"


def unzipped_text(stem: str, directory: Path) -> Path:
    """The darshan-parser text of a GZIPPED_PAIRS log, written out plain into directory."""
    import gzip

    path = directory / f"{stem}.txt"
    path.write_bytes(gzip.decompress((TEXTS / f"{stem}.txt.gz").read_bytes()))
    return path


def raw_records(path: Path) -> dict[tuple[str, int, int], dict[str, float]]:
    """(module, rank, record_id) -> {counter: value}, straight from the text lines."""
    records: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        module, rank, record_id, counter, value = line.split("\t")[:5]
        if module in ("LUSTRE",):
            continue
        records[(module, int(rank), int(record_id))][counter] = float(value)
    return dict(records)


def perf_by_module(path: Path) -> dict[str, dict[str, float]]:
    """darshan-parser --perf figures per module section ("# agg_perf_by_slowest: X # MiB/s")."""
    result: dict[str, dict[str, float]] = {}
    module = None
    for line in path.read_text().splitlines():
        if line.startswith("# ") and line.endswith(" module data"):
            module = line[2 : -len(" module data")]
            result[module] = {}
        elif module and line.startswith(
            ("# agg_perf_by_slowest:", "# agg_time_by_slowest:", "# total_bytes:")
        ):
            key, value = line[2:].split(":", 1)
            result[module][key] = float(value.split("#")[0])
    return result


def as_parser_prints(log):
    """A copy of a binary log's records rounded the way darshan-parser prints them (floating
    point counters with 6 decimals, run time with 4): what its text twin must then equal bit
    for bit. The hook itself keeps binary logs at full precision."""
    import copy

    import numpy as np

    def six_decimals(values):
        values = np.asarray(values, dtype=np.float64)
        return np.where(np.abs(values) < 4.0e9, np.rint(values * 1e6) / 1e6, values)

    rounded = copy.deepcopy(log)
    rounded.job.run_time = round(rounded.job.run_time, 4)
    for table in rounded.modules.values():
        table.fcounters = {name: six_decimals(col) for name, col in table.fcounters.items()}
    for record in rounded.heatmaps:
        record.bin_width = float(six_decimals([record.bin_width])[0])
    return rounded


IO_MODULE_NAMES = ("POSIX", "MPI-IO", "STDIO", "H5F", "H5D", "PNETCDF_FILE", "PNETCDF_VAR",
                   "DFS", "DAOS")  # fmt: skip


def pydarshan_records(path: Path) -> dict[tuple[str, int, int], dict[str, float]]:
    """(module, rank, record_id) -> {counter: value} through PyDarshan's documented DataFrame
    API (``records[module].to_df()``), at full precision: independent of post_job's reader."""
    import darshan

    report = darshan.DarshanReport(str(path), read_all=False)
    records: dict[tuple[str, int, int], dict[str, float]] = {}
    for module in report.modules:
        if module not in IO_MODULE_NAMES:
            continue
        report.mod_read_all_records(module, warnings=False)
        frames = report.records[module].to_df()
        for kind in ("counters", "fcounters"):
            frame = frames[kind]
            names = [c for c in frame.columns if c not in ("rank", "id")]
            ranks = frame["rank"].tolist()
            ids = frame["id"].tolist()  # uint64 column: exact Python ints
            columns = {name: frame[name].tolist() for name in names}
            for index, (rank, record_id) in enumerate(zip(ranks, ids, strict=True)):
                target = records.setdefault((module, int(rank), int(record_id)), {})
                for name in names:
                    target[name] = columns[name][index]
    return records
