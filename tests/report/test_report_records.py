"""Reading post-job points back (report/records.py): the details that make it cheap must not
change what it reads. Columns of a small table are made all at once, a large table's one at a
time; rows from points merge tags and fields whole unless a tag is empty or named like a
field; heatmaps and bytes per rank are made when first read."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.points import Point
from hpcmon.report import records
from hpcmon.report.influx import index_of, job_queries
from hpcmon.report.model import FILE_COLUMNS, HeatmapSeries
from hpcmon.report.records import darshan_from_rows, rows_from_points
from tests.report.field_values import field_values

_value = field_values(text_size=4) | st.sampled_from(
    ["1", "-2.5", "nan", "inf"]  # text that float() would read
)
_record = st.dictionaries(st.sampled_from([*FILE_COLUMNS, "log", "time"]), _value, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(_record, min_size=1, max_size=records.FEW_RECORDS))
def test_a_small_table_reads_the_columns_one_at_a_time_would(rows) -> None:
    at_once = records._read_columns(rows, "rank")
    assert list(at_once) == list(FILE_COLUMNS)
    for name in FILE_COLUMNS:
        # the same records as a large table (over FEW_RECORDS): this column alone
        many = rows * (records.FEW_RECORDS // len(rows) + 1)
        (alone,) = records._read_columns(many, name).values()
        assert at_once[name].dtype == alone.dtype == np.float64
        assert at_once[name].flags.c_contiguous
        np.testing.assert_array_equal(np.tile(at_once[name], len(many) // len(rows)), alone)
        # absent, text and bool values are NaN; numbers are kept
        expected = [float(r[name]) if type(r.get(name)) in (int, float) else np.nan for r in rows]
        np.testing.assert_array_equal(at_once[name], np.array(expected))


def test_rows_merge_tags_and_fields_as_influxdb_returns_them() -> None:
    plain = Point("darshan_rank", {"jobid": "7", "log": "a"}, {"rank": 3, "io_time": 1.5}, 10)
    none_tag: dict[str, Any] = {"jobid": "7", "log": "", "cluster": None}  # None: no tag either
    empty_tag = Point("darshan_rank", none_tag, {"rank": 1}, 11)
    clash = Point("darshan_rank", {"jobid": "7", "rank": "tag"}, {"rank": 2}, 12)
    rows = rows_from_points([plain, empty_tag, clash])["darshan_rank"]
    assert rows == [
        {"jobid": "7", "log": "a", "rank": 3, "io_time": 1.5, "time": 10},
        {"jobid": "7", "rank": 1, "time": 11},  # InfluxDB stores no empty tag
        {"jobid": "7", "rank": 2, "time": 12},  # the field wins over the tag of its name
    ]


def _job_rows() -> dict[str, list[dict]]:
    start = 1_700_000_000_000_000_000
    return {
        "darshan_job": [{"log": "a", "time": start, "start_time": 1.7e9, "end_time": 1.7e9 + 9}],
        "darshan_heatmap": [
            {"log": "a", "module": "POSIX", "time": start, "bin_width": 1.0, "nbins": 2}
        ],
        "darshan_heatmap_bin": [
            {"log": "a", "module": "POSIX", "time": start + 10**9, "bin": 1, "read_bytes": 5}
        ],
        "darshan_rank": [{"log": "a", "time": start, "rank": 4, "bytes_read": 8.0}],
    }


def test_heatmaps_and_ranks_are_read_when_asked_for_and_can_be_replaced() -> None:
    data = darshan_from_rows(_job_rows())
    assert data is not None
    (heatmap,) = data.heatmaps
    assert heatmap.module == "POSIX" and heatmap.width == 1.0
    np.testing.assert_array_equal(heatmap.read_bytes, [0.0, 5.0])
    assert data.heatmaps is data.heatmaps  # made once
    assert data.ranks == {4: (8.0, 0.0, 0.0)}
    # the report puts the database's heatmaps on the data from a log that has none
    other = HeatmapSeries("STDIO", 1.0, 2.0, np.zeros(1), np.zeros(1))
    data.heatmaps = [other]
    assert data.heatmaps == [other]


@pytest.mark.parametrize("measurement", ["darshan_heatmap", "darshan_rank"])
def test_without_heatmap_or_rank_rows_there_are_none(measurement: str) -> None:
    rows = _job_rows()
    del rows[measurement]
    data = darshan_from_rows(rows)
    assert data is not None
    assert (data.heatmaps if measurement == "darshan_heatmap" else data.ranks) in ([], {})


def test_record_rows_are_ordered_by_their_exact_time_in_ns() -> None:
    # the hook stamps record k of a module at start + k ns: a float cannot tell those apart
    start = 1_651_867_655_000_000_000
    rows = [{"log": "a", "time": start + k} for k in (3, 0, 2, 1)]
    assert [row["time"] - start for row in records._in_order(rows)] == [0, 1, 2, 3]
    assert records._int(start + 1) == start + 1
    assert records._int(2**62 + 1) == 0 and records._int(True) == 0


def test_heatmap_bins_are_placed_by_their_bin_not_their_nanoseconds() -> None:
    """Stored times keep their second only (post_job/layout.py): two logs of one job in one
    second share the heatmap series, so log b's heatmap may be stamped after its own first
    bin; every bin still comes back, and the series starts at the heatmap's second."""
    second = 1_700_000_000 * 10**9
    slot = 4242 * 10_000
    heatmaps = [
        {"log": log, "module": "POSIX", "time": second + slot + place, "bin_width": 0.5, "nbins": 4}
        for place, log in enumerate(("a", "b"))
    ]
    bins = [
        {"log": log, "module": "POSIX", "time": second + k * 5 * 10**8 // 10**9 * 10**9 + slot + p,
         "bin": k, "read_bytes": 10 * k + p}
        for p, log in enumerate(("b", "a")) for k in range(4)
    ]  # fmt: skip
    data = darshan_from_rows({"darshan_job": [{"log": "a", "time": second}], **{
        "darshan_heatmap": heatmaps, "darshan_heatmap_bin": bins}})  # fmt: skip
    assert data is not None
    by_log = dict(zip(("a", "b"), data.heatmaps, strict=True))
    np.testing.assert_array_equal(by_log["a"].read_bytes, [1, 11, 21, 31])
    np.testing.assert_array_equal(by_log["b"].read_bytes, [0, 10, 20, 30])
    assert {h.start for h in data.heatmaps} == {1_700_000_000.0}


def test_the_job_index_gives_the_window_and_measurements() -> None:
    """One index point per hook run: the window spans them all; damaged rows are left out;
    the measurements are read only when every index point names them."""
    runs = [
        {"first": 30, "last": 90, "measurements": "darshan_job,app_run"},
        {"first": 10, "last": 50, "measurements": "geopm_totals"},
        {"first": "x", "last": float("nan")},
    ]
    index = index_of(runs)
    assert index is not None and index.window == (10, 90)
    assert index.measurements is None  # the damaged row names none
    index = index_of(runs[:2])
    assert index is not None
    assert index.measurements == {"darshan_job", "app_run", "geopm_totals"}
    assert index_of([]) is None and index_of(runs[2:]) is None
    assert index_of([{"first": 5, "last": 4}]) is None
    statements = job_queries("42", "c", None, index.window, index.measurements).split(";")
    assert [s.split('"')[1] for s in statements] == ["darshan_job", "geopm_totals", "app_run"]
    assert all(s.endswith("\"jobid\" = '42' AND \"cluster\" = 'c' AND time >= 10 AND time <= 90")
               for s in statements)  # fmt: skip
