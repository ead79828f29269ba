"""Darshan signals (spec v2.2) on real logs, against values computed independently here:
raw counters read off the darshan-parser text with a naive reader, darshan-parser's own --perf
figures, darshan-util's C accumulator, and PyDarshan's heatmap frames."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcmon.post_job.darshan import read_log, read_text
from hpcmon.post_job.darshan.signals import NA, NA_REASONS, compute_signals
from hpcmon.post_job.darshan.signals_text import signal_lines
from tests.post_job.darshan_helpers import (
    DIAGONAL,
    E3SM,
    GZIPPED_PAIRS,
    IMBALANCED,
    INACTIVE,
    IOR_DFS,
    IOR_HDF5,
    IOR_POSIX,
    LOGS,
    MPI_IO_TEST,
    PAIRS,
    SKEW,
    TEXTS,
    as_parser_prints,
    log_path,
    perf_by_module,
    raw_records,
    text_path,
    unzipped_text,
)

MIB = 1048576.0


@pytest.fixture(scope="module")
def binary_signals():
    cache = {}

    def get(stem):
        if stem not in cache:
            log = read_log(log_path(stem))
            cache[stem] = (log, compute_signals(log))
        return cache[stem]

    return get


def record_signals(signals, module):
    """{(rank, record_id): {signal: value}} for one module."""
    for records in signals.records:
        if records.module == module:
            return {
                (int(records.ranks[i]), int(records.record_ids[i])): records.row(i)
                for i in range(len(records))
            }
    return {}


# ---- expected values, written straight from the spec's formula table -------------------


def ratio(num, den, zero_reason, inputs):
    if any(v == -1 for v in inputs):
        return NA("not_monitored")
    if den <= 0:
        return NA(zero_reason)
    return num / den


def expected_posix(c: dict[str, float], rank: int) -> dict[str, object]:
    def g(name):
        return c["POSIX_" + name]

    reads, writes = g("READS"), g("WRITES")
    small = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
    small_r = sum(g(f"SIZE_READ_{s}") for s in small)
    small_w = sum(g(f"SIZE_WRITE_{s}") for s in small)
    meta_ops = g("OPENS") + g("STATS") + g("SEEKS") + g("FSYNCS") + g("FDSYNCS")
    total_time = g("F_READ_TIME") + g("F_WRITE_TIME") + g("F_META_TIME")
    moved = g("BYTES_READ") + g("BYTES_WRITTEN")
    max_byte = max(g("MAX_BYTE_READ"), g("MAX_BYTE_WRITTEN"))
    out = {
        "read_bw": ratio(g("BYTES_READ") / MIB, g("F_READ_TIME"), "no_read_time", []),
        "write_bw": ratio(g("BYTES_WRITTEN") / MIB, g("F_WRITE_TIME"), "no_write_time", []),
        "read_iops": ratio(reads, g("F_READ_TIME"), "no_read_time", []),
        "write_iops": ratio(writes, g("F_WRITE_TIME"), "no_write_time", []),
        "avg_read_size": ratio(g("BYTES_READ"), reads, "no_reads", []),
        "avg_write_size": ratio(g("BYTES_WRITTEN"), writes, "no_writes", []),
        "seq_read_ratio": ratio(g("SEQ_READS"), reads, "no_reads", []),
        "seq_write_ratio": ratio(g("SEQ_WRITES"), writes, "no_writes", []),
        "consec_read_ratio": ratio(g("CONSEC_READS"), reads, "no_reads", []),
        "consec_write_ratio": ratio(g("CONSEC_WRITES"), writes, "no_writes", []),
        "seq_ratio": ratio(g("SEQ_READS") + g("SEQ_WRITES"), reads + writes, "no_io", []),
        "consec_ratio": ratio(g("CONSEC_READS") + g("CONSEC_WRITES"), reads + writes, "no_io", []),
        "meta_ops": int(meta_ops),
        "meta_intensity": ratio(meta_ops, reads + writes, "no_io", []),
        "meta_fraction": ratio(g("F_META_TIME"), total_time, "no_time", []),
        "unaligned_read_ratio": ratio(g("FILE_NOT_ALIGNED"), reads, "no_reads", []),
        "unaligned_write_ratio": ratio(g("FILE_NOT_ALIGNED"), writes, "no_writes", []),
        "small_read_ratio": ratio(small_r, reads, "no_reads", []),
        "small_write_ratio": ratio(small_w, writes, "no_writes", []),
        "reuse_proxy": (
            g("BYTES_READ") / (max_byte + 1) if moved > 0 and max_byte >= 0 else NA("no_file_size")
        ),
        "is_shared": 1 if rank == -1 else 0,
    }
    if rank != -1:
        out["rank_imbalance_ratio"] = NA("not_shared_file")
        out["bw_variance_proxy"] = NA("not_shared_file")
    elif moved <= 0:
        out["rank_imbalance_ratio"] = NA("no_bytes")
        out["bw_variance_proxy"] = NA("no_bytes")
    else:
        out["rank_imbalance_ratio"] = ratio(
            g("SLOWEST_RANK_BYTES"), g("FASTEST_RANK_BYTES"), "no_fastest_bytes", []
        )
        out["bw_variance_proxy"] = g("F_VARIANCE_RANK_BYTES")
    return out


def assert_same(actual: dict, expected: dict, where: str) -> None:
    for name, want in expected.items():
        got = actual[name]
        if isinstance(want, NA):
            assert got == want, f"{where} {name}: {got} != {want}"
        else:
            assert not isinstance(got, NA), f"{where} {name}: {got}, expected {want}"
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15), f"{where} {name}"


@pytest.mark.parametrize("stem", [MPI_IO_TEST, SKEW, IOR_POSIX, IOR_HDF5, INACTIVE, IOR_DFS])
def test_every_posix_record_of_a_text_log_matches_the_spec_formulas(stem):
    # the text reader against the raw text; binary logs are checked against PyDarshan's own
    # records at full precision in test_darshan_pydarshan.py
    signals = compute_signals(read_text(text_path(stem)))
    actual = record_signals(signals, "POSIX")
    raw = {k: v for k, v in raw_records(text_path(stem)).items() if k[0] == "POSIX"}
    assert set(actual) == {(rank, rid) for _, rank, rid in raw}
    for (_, rank, record_id), counters in raw.items():
        assert_same(
            actual[(rank, record_id)],
            expected_posix(counters, rank),
            f"{stem} POSIX {rank} {record_id}",
        )


def test_hand_checked_values_of_the_mpi_io_test_shared_file(binary_signals):
    # read off mpi-io-test-x86_64-3.5.0.txt by eye: 4 reads + 4 writes of 16 MiB each,
    # 3 sequential of each, 16 opens and nothing else, max byte 67108863.
    _, signals = binary_signals(MPI_IO_TEST)
    row = record_signals(signals, "POSIX")[(-1, 9347516096890457488)]
    assert row["avg_read_size"] == 16777216.0
    assert row["seq_read_ratio"] == 0.75
    assert row["meta_ops"] == 16
    assert row["meta_intensity"] == 2.0
    assert row["reuse_proxy"] == 1.0
    assert row["is_shared"] == 1
    assert row["small_write_ratio"] == 0.0
    # STDIO <STDOUT> on rank 0: 6 writes of 322 bytes in total, no reads
    stdio = record_signals(signals, "STDIO")[(0, 15920181672442173319)]
    assert stdio["avg_read_size"] == NA("no_reads")
    assert stdio["read_bw"] == NA("no_read_time")
    assert stdio["avg_write_size"] == pytest.approx(322 / 6)


def test_skew_log_shared_file_whose_fastest_rank_moved_nothing(binary_signals):
    # skew-autobench-ior.txt: the shared file was read by 2048 ranks; POSIX_FASTEST_RANK_BYTES
    # is 0, POSIX_SLOWEST_RANK_BYTES 9816768512, POSIX_F_VARIANCE_RANK_BYTES 2563191565484818432
    raw = raw_records(text_path(SKEW))
    (key,) = [k for k in raw if k[0] == "POSIX" and k[1] == -1]
    assert raw[key]["POSIX_FASTEST_RANK_BYTES"] == 0
    _, signals = binary_signals(SKEW)
    row = record_signals(signals, "POSIX")[(key[1], key[2])]
    assert row["rank_imbalance_ratio"] == NA("no_fastest_bytes")
    assert row["bw_variance_proxy"] == 2563191565484818432.0
    assert row["write_bw"] == NA("no_write_time")
    assert row["read_bw"] == pytest.approx(549755813888 / MIB / 9033.427584)


@pytest.mark.parametrize("stem", [MPI_IO_TEST, SKEW, IMBALANCED])
def test_module_bandwidth_is_darshan_parsers_agg_perf_by_slowest(binary_signals, stem):
    perf = perf_by_module(TEXTS / f"{stem}.perf_file_total.txt")
    _, signals = binary_signals(stem)
    modules = {m.module: m.values for m in signals.modules}
    for module, figures in perf.items():
        values = modules[module]
        # times are kept at darshan-parser's printed microsecond resolution, hence rel=1e-3
        assert values["agg_time_by_slowest"] == pytest.approx(
            figures["agg_time_by_slowest"], rel=1e-3, abs=2e-6
        )
        moved = values["total_bytes_read"] + values["total_bytes_written"]
        assert moved == figures["total_bytes"]
        # below 1 ms the microsecond rounding of darshan-parser's text dominates the ratio
        if figures["agg_time_by_slowest"] > 1e-3:
            assert values["agg_perf_by_slowest"] == pytest.approx(
                figures["agg_perf_by_slowest"], rel=1e-3
            )
            assert values["read_bw"] + values["write_bw"] == pytest.approx(
                figures["agg_perf_by_slowest"], rel=1e-3
            )


ALL_STEMS = sorted(p.stem for p in LOGS.glob("*.darshan"))


@pytest.mark.parametrize("stem", ALL_STEMS, ids=[s[:40] for s in ALL_STEMS])
def test_module_time_matches_darshan_utils_c_accumulator(binary_signals, stem):
    import darshan
    from darshan.backend.cffi_backend import accumulate_records

    _, signals = binary_signals(stem)
    report = darshan.DarshanReport(str(log_path(stem)), read_all=False)
    nprocs = report.metadata["job"]["nprocs"]
    checked = 0
    for module in signals.modules:
        if module.module not in ("POSIX", "MPI-IO", "STDIO", "DFS", "DAOS"):
            continue
        report.mod_read_all_records(module.module, dtype="pandas", warnings=False)
        derived = accumulate_records(
            report.records[module.module][0], module.module, nprocs
        ).derived_metrics
        values = module.values
        if values["agg_time_by_slowest"] == NA("invalid_time"):
            # garbage timers (negative, not -1): darshan-util adds them up regardless
            continue
        # full precision on both sides: only the order of the sums differs
        assert values["agg_time_by_slowest"] == pytest.approx(
            derived.agg_time_by_slowest, rel=1e-12, abs=1e-15
        )
        moved = values["total_bytes_read"] + values["total_bytes_written"]
        assert moved == derived.total_bytes
        if derived.agg_time_by_slowest > 0:
            assert values["agg_perf_by_slowest"] == pytest.approx(
                derived.agg_perf_by_slowest, rel=1e-12
            )
        checked += 1
    assert checked or not any(
        m.module in ("POSIX", "MPI-IO", "STDIO", "DFS", "DAOS") for m in signals.modules
    )


def test_module_signals_and_job_totals_without_double_counting(binary_signals):
    raw = raw_records(text_path(MPI_IO_TEST))
    _, signals = binary_signals(MPI_IO_TEST)
    modules = {m.module: m.values for m in signals.modules}
    posix_read = sum(c["POSIX_BYTES_READ"] for k, c in raw.items() if k[0] == "POSIX")
    stdio_written = sum(c["STDIO_BYTES_WRITTEN"] for k, c in raw.items() if k[0] == "STDIO")
    posix_written = sum(c["POSIX_BYTES_WRITTEN"] for k, c in raw.items() if k[0] == "POSIX")
    # MPI-IO moves the same bytes through POSIX: counted once
    assert signals.job["total_bytes_read"] == posix_read
    assert signals.job["total_bytes_written"] == posix_written + stdio_written
    assert signals.counted_modules == ("POSIX", "STDIO")
    posix = modules["POSIX"]
    assert posix["avg_read_size"] == posix_read / 4
    assert posix["read_iops"] == pytest.approx(4 / posix["agg_time_by_slowest"])
    assert posix["read_bw"] == pytest.approx(posix_read / MIB / posix["agg_time_by_slowest"])
    assert modules["STDIO"]["avg_read_size"] == NA("no_reads")
    # DFS sits on DAOS: the job counts DAOS and not DFS
    _, dfs = binary_signals(IOR_DFS)
    assert "DAOS" in dfs.counted_modules and "DFS" not in dfs.counted_modules


# ---- HEATMAP -----------------------------------------------------------------------------


def spec_heatmap(reads: np.ndarray, writes: np.ndarray, width: float) -> dict[str, object]:
    activity = [r + w for r, w in zip(reads.tolist(), writes.tolist(), strict=True)]
    n = len(activity)
    active = [k for k, a in enumerate(activity) if a > 0]
    tr, tw, ta = sum(reads.tolist()), sum(writes.tolist()), sum(activity)

    def entropy(values, total):
        if total <= 0 or n <= 1:  # spec: no bytes, or a single bin (log N = 0): 0
            return 0.0
        h = -sum((v / total) * math.log(v / total) for v in values if v > 0)
        return h / math.log(n)

    return {
        "total_read_events": tr,
        "total_write_events": tw,
        "active_bins": len(active),
        "active_time": len(active) * width,
        "activity_span": (active[-1] - active[0] + 1) * width,
        "peak_activity_bin": activity.index(max(activity)),
        "peak_activity_value": max(activity),
        "read_activity_entropy_norm": entropy(reads.tolist(), tr),
        "write_activity_entropy_norm": entropy(writes.tolist(), tw),
        "top1_share": max(activity) / ta,
    }


def pydarshan_heatmaps(stem):
    import darshan

    report = darshan.DarshanReport(str(log_path(stem)), read_all=False)
    if "HEATMAP" not in report.modules:
        return {}
    report.read_all_heatmap_records()
    return report.heatmaps


@pytest.mark.parametrize("stem", ALL_STEMS, ids=[s[:40] for s in ALL_STEMS])
def test_job_level_heatmap_signals(binary_signals, stem):
    _, signals = binary_signals(stem)
    totals = {h.submodule: h for h in signals.heatmap_totals}
    heatmaps = pydarshan_heatmaps(stem)
    assert set(totals) == set(heatmaps)
    for submodule, heatmap in heatmaps.items():
        reads = heatmap.to_df(ops=["read"], interval_index=False).sum(axis=0).to_numpy()
        writes = heatmap.to_df(ops=["write"], interval_index=False).sum(axis=0).to_numpy()
        if reads.sum() + writes.sum() == 0:
            continue
        expected = spec_heatmap(reads, writes, heatmap._bin_width_seconds)
        got = totals[submodule].values
        for name, want in expected.items():
            assert got[name] == pytest.approx(want, rel=1e-9, abs=1e-9), (submodule, name)


def test_e3sm_heatmap_has_512_ranks_per_submodule_and_a_real_timeline(binary_signals):
    _, signals = binary_signals(E3SM)
    per_rank = [h for h in signals.heatmaps if h.submodule == "POSIX"]
    assert len(per_rank) == 512 and {h.rank for h in per_rank} == set(range(512))
    job = {h.submodule: h for h in signals.heatmap_totals}["POSIX"]
    assert len(job.read_bins) == 114 and job.bin_width == pytest.approx(6.4, abs=1e-6)
    assert job.values["active_time"] <= 114 * 6.4 + 1e-9
    assert 0 < job.values["top1_share"] <= 1
    assert 0 <= job.values["write_activity_entropy_norm"] <= 1


def test_inactive_ranks_heatmap_only_has_active_ranks_and_is_read_off_the_text(binary_signals):
    raw = raw_records(text_path(INACTIVE))
    heat = {k: v for k, v in raw.items() if k[0] == "HEATMAP"}
    ranks = {rank for _, rank, _ in heat}
    assert len(ranks) == 20
    _, signals = binary_signals(INACTIVE)
    assert {h.rank for h in signals.heatmaps} == ranks
    for (_, rank, record_id), counters in heat.items():
        nbins = 1 + max(
            int(n.rsplit("_", 1)[1]) for n in counters if "_BIN_" in n and "SECONDS" not in n
        )
        reads = np.array([counters.get(f"HEATMAP_READ_BIN_{k}", 0) for k in range(nbins)])
        writes = np.array([counters.get(f"HEATMAP_WRITE_BIN_{k}", 0) for k in range(nbins)])
        (mine,) = [h for h in signals.heatmaps if h.rank == rank and h.record_id == record_id]
        if reads.sum() + writes.sum() == 0:
            assert mine.values["peak_activity_bin"] == NA("no_io")
            assert mine.values["top1_share"] == 0.0
            continue
        expected = spec_heatmap(reads, writes, counters["HEATMAP_F_BIN_WIDTH_SECONDS"])
        for name, want in expected.items():
            assert mine.values[name] == pytest.approx(want, rel=1e-9), (rank, name)


# ---- binary and text inputs agree; NA reasons are the spec's ----------------------------


def signal_body(log, signals):
    """The signal lines, without the header block (a binary log has it only when asked)."""
    return [line for line in signal_lines(log.job, signals) if line and not line.startswith("#")]


@pytest.mark.parametrize("stem", PAIRS)
def test_text_and_binary_inputs_give_identical_signals(binary_signals, stem):
    """Binary logs are read at full precision; rounded as darshan-parser prints them, they
    give the text's signals bit for bit."""
    log, _ = binary_signals(stem)
    rounded = as_parser_prints(log)
    text_log = read_text(text_path(stem))
    text_signals = compute_signals(text_log)
    assert signal_body(text_log, text_signals) == signal_body(rounded, compute_signals(rounded))
    assert text_log.job.start_time == log.job.start_time
    assert text_log.job.run_time == round(log.job.run_time, 4)
    assert text_log.job.nprocs == log.job.nprocs


def test_na_values_only_use_the_spec_reason_codes(binary_signals):
    seen = set()
    for stem in PAIRS:
        _, signals = binary_signals(stem)
        for line in signal_body(*binary_signals(stem)):
            if not line:
                continue
            value = line.rsplit("\t", 1)[1]
            if value.startswith("NA("):
                seen.add(value[3:-1])
        del signals
    assert seen and seen <= set(NA_REASONS)
    assert {"no_reads", "no_writes", "not_shared_file", "no_read_time"} <= seen


def test_counters_of_minus_one_give_not_monitored(tmp_path):
    # darshan writes -1 for a counter it did not monitor; set POSIX_READS and
    # POSIX_F_WRITE_TIME of the shared IOR file to -1 and check every signal built on them.
    source = text_path(IOR_POSIX)
    raw = raw_records(source)
    ((_, rank, record_id),) = [k for k in raw if k[0] == "POSIX"]
    lines = []
    for line in source.read_text().splitlines():
        fields = line.split("\t")
        if (
            len(fields) > 4
            and fields[0] == "POSIX"
            and fields[3]
            in (
                "POSIX_READS",
                "POSIX_F_WRITE_TIME",
            )
        ):
            fields[4] = "-1" if fields[3] == "POSIX_READS" else "-1.000000"
            line = "\t".join(fields)
        lines.append(line)
    path = tmp_path / "minus_one.txt"
    path.write_text("\n".join(lines) + "\n")
    signals = compute_signals(read_text(path))
    row = record_signals(signals, "POSIX")[(rank, record_id)]
    for name in (
        "read_iops",
        "avg_read_size",
        "seq_read_ratio",
        "consec_read_ratio",
        "seq_ratio",
        "consec_ratio",
        "meta_intensity",
        "unaligned_read_ratio",
        "small_read_ratio",
        "write_bw",
        "write_iops",
        "meta_fraction",
    ):
        assert row[name] == NA("not_monitored"), name
    # signals that use neither counter keep their values
    counters = raw[("POSIX", rank, record_id)]
    assert row["avg_write_size"] == counters["POSIX_BYTES_WRITTEN"] / counters["POSIX_WRITES"]
    assert row["read_bw"] == pytest.approx(
        counters["POSIX_BYTES_READ"] / MIB / counters["POSIX_F_READ_TIME"], rel=1e-12
    )
    # module level: a sum over records with a -1 is not monitored either; the module time
    # (agg_time_by_slowest) uses F_WRITE_TIME, so every time-based module signal is NA too
    posix = {m.module: m.values for m in signals.modules}["POSIX"]
    for name in ("total_reads", "avg_read_size", "agg_time_by_slowest", "read_bw", "write_iops"):
        assert posix[name] == NA("not_monitored"), name
    assert posix["total_bytes_read"] == counters["POSIX_BYTES_READ"]
    assert posix["avg_write_size"] == counters["POSIX_BYTES_WRITTEN"] / counters["POSIX_WRITES"]
    # job totals add what was monitored: POSIX reads count as 0, STDIO's are kept
    stdio_reads = sum(c["STDIO_READS"] for k, c in raw.items() if k[0] == "STDIO")
    assert signals.job["total_reads"] == stdio_reads
    assert signals.job["total_bytes_read"] == sum(
        c[f"{k[0]}_BYTES_READ"] for k, c in raw.items() if k[0] in ("POSIX", "STDIO")
    )


@pytest.mark.parametrize("stem", GZIPPED_PAIRS)
def test_text_and_binary_inputs_agree_on_the_big_text_pairs(binary_signals, tmp_path, stem):
    log, _ = binary_signals(stem)
    rounded = as_parser_prints(log)
    text_log = read_text(unzipped_text(stem, tmp_path))
    assert signal_body(text_log, compute_signals(text_log)) == signal_body(
        rounded, compute_signals(rounded)
    )


def test_diagonal_heatmap_signals_worked_out_by_hand(binary_signals, tmp_path):
    # runtime_and_dxt_heatmaps_diagonal_write_only (its README): 32 ranks, rank r writes one
    # byte in bin r of 34 bins of 0.1 s. Checked against the text: each rank has one non-zero
    # bin, HEATMAP_WRITE_BIN_<rank> = 1, and bins 0..33.
    raw = raw_records(unzipped_text(DIAGONAL, tmp_path))
    for (module, rank, _), counters in raw.items():
        if module == "HEATMAP":
            nonzero = {k: v for k, v in counters.items() if v and "SECONDS" not in k}
            assert nonzero == {f"HEATMAP_WRITE_BIN_{rank}": 1}
            assert "HEATMAP_WRITE_BIN_33" in counters and "HEATMAP_WRITE_BIN_34" not in counters
    _, signals = binary_signals(DIAGONAL)
    per_rank = [h for h in signals.heatmaps if h.submodule == "POSIX"]
    assert sorted(h.rank for h in per_rank) == list(range(32))
    for h in per_rank:
        assert h.values["total_write_events"] == 1.0 and h.values["total_read_events"] == 0.0
        assert h.values["active_bins"] == 1 and h.values["peak_activity_bin"] == h.rank
        assert h.values["peak_activity_value"] == 1.0 and h.values["top1_share"] == 1.0
        assert h.values["active_time"] == pytest.approx(0.1)
        assert h.values["activity_span"] == pytest.approx(0.1)
        assert h.values["write_activity_entropy_norm"] == 0.0
        assert h.values["read_activity_entropy_norm"] == 0.0
    (job,) = [h for h in signals.heatmap_totals if h.submodule == "POSIX"]
    assert job.rank == -1 and len(job.write_bins) == 34
    expected = {
        "total_read_events": 0.0,
        "total_write_events": 32.0,
        "active_bins": 32,
        "active_time": 3.2,
        "activity_span": 3.2,  # bins 0..31
        "peak_activity_bin": 0,  # 32 bins tie at 1 byte: the first
        "peak_activity_value": 1.0,
        "read_activity_entropy_norm": 0.0,  # no reads
        "write_activity_entropy_norm": math.log(32) / math.log(34),  # uniform on 32 of 34
        "top1_share": 1 / 32,
    }
    for name, want in expected.items():
        assert job.values[name] == pytest.approx(want, rel=1e-12), name
