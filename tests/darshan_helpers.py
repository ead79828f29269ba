"""Test helpers for the Darshan tests: fixture paths and a deliberately naive reader of
darshan-parser text, independent of post_job.darshan, to compute expected values by hand."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).parent / "data" / "darshan"
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
