"""Darshan points (names, NA handling, timestamps from the log, top-K, idempotency), the
spec's text output, and one round trip through the real InfluxDB 1.6.7."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.common.timeutil import seconds_to_ns
from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.darshan.points import _bin_points
from hpcmon.post_job.darshan.record import RECORD_FIELDS
from hpcmon.post_job.darshan.signals import (
    HEATMAP_SIGNALS,
    NA_REASONS,
    POSIX_SIGNALS,
    RECORD_SIGNALS,
    HeatmapSignals,
)
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines
from hpcmon.report.records import darshan_from_rows, rows_from_points
from tests.post_job.darshan_helpers import (
    E3SM,
    INACTIVE,
    MPI_IO_TEST,
    PAIRS,
    TEXTS,
    log_path,
    raw_records,
    text_path,
)

JOB = JobContext("4242", "clusterA")
POLARIS = TEXTS / "polaris_3124622_1736380575.txt"
RECORD_EXTRAS = {"file", "bytes_read", "bytes_written", "io_time", "na_reasons", "rank"}
RECORD_EXTRAS |= {"record_id", *RECORD_FIELDS}


def header_value(path, key):
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.split(": ", 1)[1]
    raise AssertionError(key)


def by_measurement(output, name):
    return [p for p in output.points if p.measurement == name]


def test_record_points_use_spec_names_and_keep_na_reasons_aside():
    output = collect_darshan([log_path(MPI_IO_TEST)], [], JOB)
    records = by_measurement(output, "darshan_record")
    assert records
    allowed = set(RECORD_SIGNALS) | set(POSIX_SIGNALS) | RECORD_EXTRAS
    for point in records:
        assert set(point.fields) <= allowed
        assert set(point.tags) == {"jobid", "cluster", "log", "module"}
        for item in filter(None, str(point.fields.get("na_reasons", "")).split(",")):
            name, reason = item.split(":")
            assert reason in NA_REASONS and name not in point.fields
    (stdio,) = [p for p in records if p.tags["module"] == "STDIO"]
    na_reasons = stdio.fields["na_reasons"]
    assert isinstance(na_reasons, str)
    assert "avg_read_size:no_reads" in na_reasons
    assert stdio.fields["file"] == "<STDOUT>"
    assert stdio.fields["avg_write_size"] == pytest.approx(322 / 6)


def test_timestamps_come_from_the_log_and_reruns_write_the_same_lines():
    start = int(header_value(text_path(INACTIVE), "start_time"))
    first = collect_darshan([log_path(INACTIVE)], [], JOB)
    second = collect_darshan([log_path(INACTIVE)], [], JOB)
    assert to_lines(first.points) == to_lines(second.points)
    for name in ("darshan_job", "darshan_module", "darshan_heatmap"):
        assert {p.time_ns for p in by_measurement(first, name)} <= {start * 10**9}
    # records fold into their module's series: record k of a module at start + k ns
    for module in ("POSIX", "STDIO"):
        times = [
            p.time_ns for p in by_measurement(first, "darshan_record") if p.tags["module"] == module
        ]
        assert times == [start * 10**9 + k for k in range(len(times))]


def test_heatmap_bin_points_are_the_job_timeline_summed_over_ranks():
    raw = raw_records(text_path(INACTIVE))
    start = int(header_value(text_path(INACTIVE), "start_time"))
    writes: dict[int, float] = {}
    reads: dict[int, float] = {}
    width = None
    for (module, _rank, _rid), counters in raw.items():
        if module != "HEATMAP":
            continue
        width = counters["HEATMAP_F_BIN_WIDTH_SECONDS"]
        for name, value in counters.items():
            for prefix, sums in (("HEATMAP_WRITE_BIN_", writes), ("HEATMAP_READ_BIN_", reads)):
                if name.startswith(prefix):
                    k = int(name.rsplit("_", 1)[1])
                    sums[k] = sums.get(k, 0) + value
    output = collect_darshan([log_path(INACTIVE)], [], JOB)
    bins = [p for p in by_measurement(output, "darshan_heatmap_bin") if p.tags["module"] == "STDIO"]
    # every bin but the zeros between two zeros: a missing bin is 0
    nbins = max(writes) + 1
    busy = [k for k in range(nbins) if writes.get(k, 0) or reads.get(k, 0)]
    near_busy = {j for k in busy for j in (k - 1, k, k + 1) if 0 <= j < nbins}
    assert [p.fields["bin"] for p in bins] == sorted(near_busy | {0, nbins - 1})
    assert len(bins) < nbins  # this log has a zero run to leave out
    assert width is not None
    for point in bins:
        k = point.fields["bin"]
        assert isinstance(k, int)
        assert point.fields["write_bytes"] == writes.get(k, 0)
        assert point.time_ns == round((start + k * width) * 10**9)
    (heatmap,) = [
        p for p in by_measurement(output, "darshan_heatmap") if p.tags["module"] == "STDIO"
    ]
    assert heatmap.fields["total_write_events"] == sum(writes.values())
    assert set(heatmap.fields) <= set(HEATMAP_SIGNALS) | {"bin_width", "nbins", "na_reasons"}


def test_top_k_records_plus_every_shared_file():
    raw = raw_records(POLARIS)
    output = collect_darshan([], [POLARIS], JOB, top_records=1)
    kept = {
        (p.tags["module"], p.fields["rank"], int(p.fields["record_id"]))
        for p in by_measurement(output, "darshan_record")
    }
    for module in ("POSIX", "MPI-IO", "STDIO"):
        prefix = "MPIIO" if module == "MPI-IO" else module
        mine = {k: c for k, c in raw.items() if k[0] == module}
        shared = {k for k in mine if k[1] == -1}
        assert shared <= kept
        biggest = max(
            mine, key=lambda k: mine[k][f"{prefix}_BYTES_READ"] + mine[k][f"{prefix}_BYTES_WRITTEN"]
        )
        assert biggest in kept
        assert len({k for k in kept if k[0] == module} - shared) <= 2
    assert len(by_measurement(output, "darshan_record")) < sum(1 for _ in raw) + 1


def test_job_point_fields():
    output = collect_darshan([], [text_path(MPI_IO_TEST)], JOB)
    (job,) = by_measurement(output, "darshan_job")
    assert job.fields["nprocs"] == int(header_value(text_path(MPI_IO_TEST), "nprocs"))
    assert job.fields["uid"] == 30146 and job.fields["exe"] == "mpi-io-test"
    assert job.fields["runtime"] == float(header_value(text_path(MPI_IO_TEST), "run time"))
    assert job.tags == {"jobid": "4242", "cluster": "clusterA", "log": MPI_IO_TEST}


def test_signals_text_output_preserves_the_header_and_has_five_columns(tmp_path):
    out = tmp_path / "signals.txt"
    collect_darshan([], [text_path(MPI_IO_TEST)], JOB, signals_out=out)
    lines = out.read_text().splitlines()
    assert lines[:3] == ["# " + "=" * 60, "# ORIGINAL DARSHAN LOG HEADER", "# " + "=" * 60]
    original = text_path(MPI_IO_TEST).read_text().splitlines()
    header = original[: original.index("# description of columns:")]
    while header and not header[-1]:
        header.pop()
    assert lines[3 : 3 + len(header)] == header
    body = [ln for ln in lines[3 + len(header) :] if ln]
    assert body and all(len(ln.split("\t")) == 5 for ln in body)
    assert "POSIX\t-1\t9347516096890457488\tSIGNAL_SEQ_READ_RATIO\t0.75" in body
    assert "STDIO\t0\t15920181672442173319\tSIGNAL_AVG_READ_SIZE\tNA(no_reads)" in body


@pytest.mark.integration
def test_points_round_trip_through_influxdb1(influxdb1):
    output = collect_darshan([log_path(E3SM)], [], JOB)
    influxdb1.create_database("darshan_rt")
    body = to_lines(output.points).encode()
    request = urllib.request.Request(
        f"{influxdb1.url}/write?db=darshan_rt", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    (posix,) = [p for p in by_measurement(output, "darshan_module") if p.tags["module"] == "POSIX"]
    series = influxdb1.series(
        "SELECT read_bw, write_bw, total_bytes_written FROM darshan_module "
        "WHERE module='POSIX' AND jobid='4242'",
        db="darshan_rt",
    )
    (row,) = series[0]["values"]
    assert row[0] == posix.time_ns
    assert row[2] == pytest.approx(posix.fields["write_bw"], rel=1e-12)
    assert row[3] == posix.fields["total_bytes_written"]
    bins = influxdb1.series(
        "SELECT count(write_bytes) FROM darshan_heatmap_bin WHERE module='POSIX'", db="darshan_rt"
    )
    assert bins[0]["values"][0][1] == 114


# darshan-parser lines that PyDarshan does not give (how the log's regions are compressed)
UNREAD_HEADER_LINES = ("# compression method:", "# header:", "# job data:", "# record table:")


@pytest.mark.parametrize("stem", PAIRS)
def test_the_signals_file_of_a_binary_log_has_darshan_parsers_header(tmp_path, stem):
    """The mount table is read only for the signals file (it is most of a small log's open):
    asked for, the header block is darshan-parser's, mount entries included."""
    out = tmp_path / "signals.txt"
    collect_darshan([log_path(stem)], [], JOB, signals_out=out)
    lines = out.read_text().splitlines()
    first_signal = next(i for i, line in enumerate(lines) if line.startswith("JOB\t"))
    ours = lines[3:first_signal]
    text = text_path(stem).read_text().splitlines()
    theirs = text[: text.index("# description of columns:")]
    theirs = [line for line in theirs if not line.startswith(UNREAD_HEADER_LINES)]
    assert any(line.startswith("# mount entry:\t") for line in ours)
    assert [line for line in ours if line] == [line for line in theirs if line]


def test_signals_file_heatmap_lines_are_per_rank_and_modules_have_perf_and_agg(tmp_path):
    # HEATMAP records exist per rank only (Darshan never writes rank -1 for them), spec v2.2
    # drops module lines for HEATMAP, and its example prints event totals as floats.
    out = tmp_path / "signals.txt"
    collect_darshan([log_path(INACTIVE)], [], JOB, signals_out=out)
    text = out.read_text()
    assert "### Original Metrics" not in text and "(Preserved)" not in text
    body = [ln.split("\t") for ln in text.splitlines() if ln and not ln.startswith("#")]
    heat = [f for f in body if f[0] == "HEATMAP"]
    raw_keys = {(r, i) for m, r, i in raw_records(text_path(INACTIVE)) if m == "HEATMAP"}
    assert {(int(f[1]), int(f[2])) for f in heat} == raw_keys
    assert len(heat) == 10 * len(raw_keys)
    assert {f[3] for f in heat} == {f"SIGNAL_{n.upper()}" for n in HEATMAP_SIGNALS}
    for f in heat:
        if f[3] in ("SIGNAL_TOTAL_READ_EVENTS", "SIGNAL_PEAK_ACTIVITY_VALUE"):
            assert "." in f[4], f
        if f[3] in ("SIGNAL_ACTIVE_BINS",):
            assert f[4].isdigit(), f
    module_lines = [f for f in body if f[2] in ("MODULE_AGG", "MODULE_PERF")]
    assert module_lines and all(f[0] != "HEATMAP" and f[1] == "-1" for f in module_lines)
    stdio = {f[3]: f[2] for f in module_lines if f[0] == "STDIO"}
    assert stdio["SIGNAL_READ_BW"] == stdio["SIGNAL_WRITE_IOPS"] == "MODULE_PERF"
    assert stdio["SIGNAL_AVG_READ_SIZE"] == stdio["SIGNAL_TOTAL_BYTES_READ"] == "MODULE_AGG"


bin_values = st.integers(-(2**40), 2**40).map(lambda v: 0 if v % 3 else v)  # mostly zeros


@given(
    bins=st.lists(st.tuples(bin_values, bin_values), min_size=1, max_size=60),
    width=st.floats(1e-3, 1e4, allow_nan=False),
    start=st.integers(0, 2**31),
)
def test_heatmap_bins_left_out_are_zeros_between_zeros_and_the_report_gets_them_back(
    bins, width, start
):
    reads = np.array([r for r, _ in bins], dtype=np.int64)
    writes = np.array([w for _, w in bins], dtype=np.int64)
    heatmap = HeatmapSignals("POSIX", -1, 1, width, reads, writes, {})
    tags = {**JOB.base_tags(), "log": "x", "module": "POSIX"}
    start_ns = start * 10**9
    points = _bin_points(heatmap, tags, start_ns)
    kept = [p.fields["bin"] for p in points]
    last = len(bins) - 1
    for k in range(len(bins)):
        near = [bins[j] for j in (k - 1, k, k + 1) if 0 <= j <= last]
        must = k in (0, last) or any(r or w for r, w in near)
        assert (k in kept) == must
    for point in points:
        k = point.fields["bin"]
        assert (point.fields["read_bytes"], point.fields["write_bytes"]) == bins[k]
        assert point.time_ns == start_ns + seconds_to_ns(k * width)
    # the report, reading the points back, has every bin
    log_tags = {**JOB.base_tags(), "log": "x"}
    job = Point("darshan_job", log_tags, {"nprocs": 1}, start_ns)
    fields = {"bin_width": width, "nbins": len(bins)}
    summary = Point("darshan_heatmap", dict(tags), fields, start_ns)
    darshan = darshan_from_rows(rows_from_points([job, summary, *points]))
    assert darshan is not None
    (series,) = darshan.read_heatmaps()
    assert series.read_bytes.tolist() == reads.tolist()
    assert series.write_bytes.tolist() == writes.tolist()
