"""Recorder ranks a trace announces but does not hold: no work for them, and no point that
passes an unread rank off as an idle one."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines
from hpcmon.post_job.recorder import RecorderDataFrame, collect_recorder
from hpcmon.post_job.recorder.binary import MAX_RANKS
from tests.post_job.test_recorder_reader import DATA, copy_trace

JOB = JobContext(job_id="1")
# Per-rank layouts: every rank has its own .cst, so the files present bound the real ranks.
PER_RANK_TRACES = [DATA / "v2.4.0/tiny_loop_np2", DATA / "v3.0.0/tiny_mpi_np2_noipc_tid"]


def _announce_ranks(trace: Path, ranks: int) -> None:
    """total_ranks is the first field of recorder.mt (an int32 at byte 0) in 2.4, 2.5 and
    3.0 alike (layouts.py: _MT_24, _MT_25, _MT_30)."""
    mt = trace / "recorder.mt"
    data = bytearray(mt.read_bytes())
    data[0:4] = struct.pack("<i", ranks)
    mt.write_bytes(bytes(data))


def _points(points: list[Point], measurement: str) -> dict[str, dict]:
    """measurement's points by their rank or function tag (the trace point under '')."""
    return {
        p.tags.get("rank", p.tags.get("function", "")): p.fields
        for p in points
        if p.measurement == measurement
    }


@pytest.mark.parametrize("source", PER_RANK_TRACES, ids=lambda p: p.parent.name)
def test_huge_announced_rank_count_is_one_problem_not_work(tmp_path: Path, source: Path) -> None:
    good = collect_recorder([source], JOB, per_rank_functions=True)
    trace = copy_trace(source, tmp_path / source.name)
    _announce_ranks(trace, 100_000)

    out = collect_recorder([trace], JOB, per_rank_functions=True)
    assert len(out.points) == len(good.points)
    # the ranks read keep every field, their times included (3.0's one recorder.ts is laid
    # out by rank count: it is read with the count it adds up with, not the announced one)
    assert _points(out.points, "recorder_rank") == _points(good.points, "recorder_rank")
    assert {k: f["count"] for k, f in _points(out.points, "recorder_function").items()} == {
        k: f["count"] for k, f in _points(good.points, "recorder_function").items()
    }
    summary = _points(out.points, "recorder_trace")[""]
    assert summary["ranks"] == 100_000
    expected = _points(good.points, "recorder_trace")[""]
    for name in ("records", "function_time_seconds", "duration_seconds"):
        assert summary[name] == expected[name]
    assert summary["problems"] == len(out.errors) >= 2
    assert out.errors[0] == (
        f"{trace}: 99,998 of the 100,000 ranks recorder.mt announces could not be read "
        "(left out: no per-rank data)"
    )

    frame = RecorderDataFrame.from_recorder(trace)
    assert frame.total_ranks == 100_000
    assert frame.read_ranks == [0, 1]
    assert len(frame.rank_summary()) == 2


@settings(max_examples=20, deadline=None)
@given(announced=st.integers(2, MAX_RANKS), source=st.sampled_from(PER_RANK_TRACES))
def test_any_announced_rank_count_gives_points_for_read_ranks_only(
    tmp_path_factory, announced: int, source: Path
) -> None:
    trace = copy_trace(source, tmp_path_factory.mktemp("ranks") / source.name)
    _announce_ranks(trace, announced)
    out = collect_recorder([trace], JOB, per_rank_functions=True)
    assert _points(out.points, "recorder_rank") == _points(
        collect_recorder([source], JOB).points, "recorder_rank"
    )
    assert {p.tags["rank"] for p in out.points if p.measurement == "recorder_rank_function"} == {
        "0",
        "1",
    }
    assert bool(out.errors) == (announced > 2)
    to_lines(out.points)


def _drop_cst(trace: Path) -> None:
    (trace / "1.cst").unlink()


def _break_grammar(trace: Path) -> None:
    (trace / "1.cfg").write_bytes(b"\x10\x00\x00")


def _bad_grammar_id(trace: Path) -> None:
    """ug.mt: one int32 grammar id per rank, then the count; rank 1 points past the table."""
    data = bytearray((trace / "ug.mt").read_bytes())
    data[4:8] = struct.pack("<i", 99)
    (trace / "ug.mt").write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("v2.4.0/tiny_loop_np2", _drop_cst),
        ("v2.4.0/tiny_loop_np2", _break_grammar),
        ("v3.0.0/tiny_mpi_np2_noipc_tid", _drop_cst),
        ("v3.0.0/tiny_mpi_np2_noipc_tid", _break_grammar),
        ("v3.0.0/tiny_mpi_np2_ipc", _bad_grammar_id),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_unreadable_rank_gets_no_rank_point(tmp_path: Path, name: str, damage) -> None:
    good = collect_recorder([DATA / name], JOB)
    trace = copy_trace(DATA / name, tmp_path / "t")
    damage(trace)
    out = collect_recorder([trace], JOB, per_rank_functions=True)
    ranks = _points(out.points, "recorder_rank")
    assert ranks == {"0": _points(good.points, "recorder_rank")["0"]}
    assert {p.tags["rank"] for p in out.points if p.measurement == "recorder_rank_function"} == {
        "0"
    }
    assert out.errors[0] == (
        f"{trace}: 1 of the 2 ranks recorder.mt announces could not be read "
        "(left out: no per-rank data)"
    )


def test_read_rank_without_calls_keeps_its_zero_row() -> None:
    """An idle rank is data (zeros); only an unread rank is left out."""
    frame = RecorderDataFrame.from_recorder(PER_RANK_TRACES[1])
    rank0 = frame.filter(lambda df: df["rank"] == 0)
    summary = rank0.rank_summary()
    assert summary.index.tolist() == [0, 1]
    assert summary.loc[1].tolist() == [0, 0, 0, 0.0]
    assert summary.loc[0, "records"] == 52


def test_read_ranks_without_any_call_all_keep_zero_rows() -> None:
    frame = RecorderDataFrame.from_recorder(PER_RANK_TRACES[0]).filter(lambda df: df["rank"] < 0)
    assert frame.rank_summary().to_dict("index") == {
        rank: {"records": 0, "files": 0, "file_accesses": 0, "function_time_seconds": 0.0}
        for rank in (0, 1)
    }
    assert frame.rank_function_summary().empty


@given(
    sizes=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=12),
    tail=st.binary(max_size=200),
    announced=st.integers(1, MAX_RANKS),
    least=st.integers(0, 14),
)
def test_the_rank_count_recorder_ts_is_read_with_adds_up_or_is_the_announced_one(
    sizes: list[int], tail: bytes, announced: int, least: int
) -> None:
    from hpcmon.post_job.recorder.layouts import _timestamp_ranks

    data = b"".join(size.to_bytes(8, "little") for size in sizes) + tail
    held = _timestamp_ranks(data, announced, least)
    words = [int.from_bytes(data[8 * i : 8 * i + 8], "little") for i in range(len(data) // 8)]
    adds_up = [n for n in range(1, len(words) + 1) if 8 * n + sum(words[:n]) == len(data)]
    if announced in adds_up or not adds_up or adds_up[0] < least:
        assert held == announced
    else:
        assert held == adds_up[0]


def test_a_recorder_ts_cut_where_it_adds_up_for_fewer_ranks_is_read_as_truncated(
    tmp_path: Path,
) -> None:
    """Cut 8 bytes short of rank 0's end, a 2-rank recorder.ts adds up for 1 rank: read so,
    rank 0's times would start at the wrong byte. The trace has files for 2 ranks, so it is
    read as the 2 ranks announced, and says both are truncated."""
    source = PER_RANK_TRACES[1]
    trace = copy_trace(source, tmp_path / source.name)
    data = (trace / "recorder.ts").read_bytes()
    (trace / "recorder.ts").write_bytes(data[: 8 + struct.unpack_from("<Q", data)[0]])
    out = collect_recorder([trace], JOB, per_rank_functions=True)
    assert not any("holds the timestamps of" in error for error in out.errors)
    for rank in (0, 1):
        assert any(f"rank {rank} timestamps truncated" in error for error in out.errors)


def test_time_fields_that_would_sum_calls_without_timestamps_are_left_out(tmp_path: Path) -> None:
    """recorder.ts cut after rank 0's timestamps: rank 1's calls have no times. A time field
    that sums any of them is left out (a smaller sum, 0 for rank 1, would look complete);
    rank 0's own figures are kept. (Unknown is NaN in a point, which line protocol leaves
    out.)"""

    def known(fields: dict) -> dict:
        return {name: value for name, value in fields.items() if value == value}

    source = PER_RANK_TRACES[1]
    good = collect_recorder([source], JOB, per_rank_functions=True)
    trace = copy_trace(source, tmp_path / source.name)
    data = (trace / "recorder.ts").read_bytes()
    first = struct.unpack_from("<Q", data)[0]
    (trace / "recorder.ts").write_bytes(data[: 16 + first])  # two sizes, rank 0's blob

    out = collect_recorder([trace], JOB, per_rank_functions=True)
    assert any("rank 1 timestamps truncated" in error for error in out.errors)
    ranks, good_ranks = _points(out.points, "recorder_rank"), _points(good.points, "recorder_rank")
    assert known(ranks["0"]) == good_ranks["0"]
    assert known(ranks["1"]) == {
        k: v for k, v in good_ranks["1"].items() if k != "function_time_seconds"
    }
    assert "function_time_seconds" not in known(_points(out.points, "recorder_trace")[""])
    by_rank = {
        (p.tags["rank"], p.tags["function"]): known(p.fields)
        for p in out.points
        if p.measurement == "recorder_rank_function"
    }
    assert by_rank and all(
        ("total_time_seconds" in f) == (r == "0") for (r, _), f in by_rank.items()
    )
    called_by_1 = {name for rank, name in by_rank if rank == "1"}
    functions = {
        p.tags["function"]: known(p.fields)
        for p in out.points
        if p.measurement == "recorder_function"
    }
    assert called_by_1 and all(
        ("total_time_seconds" in fields) == (name not in called_by_1)
        for name, fields in functions.items()
    )
    files = [known(p.fields) for p in out.points if p.measurement == "recorder_file"]
    assert any("time_seconds" in f for f in files) and not all("time_seconds" in f for f in files)
    assert "nan" not in to_lines(out.points)


def test_an_ipc_recorder_ts_cut_where_it_adds_up_for_fewer_ranks_is_read_as_truncated(
    tmp_path: Path,
) -> None:
    """The same cut in the interprocess layout, with rank 1's grammar id out of range: ug.mt
    still lists 2 ranks, so recorder.ts is read as 2 ranks, not as the 1 it adds up for."""
    trace = copy_trace(DATA / "v3.0.0/tiny_mpi_np2_ipc", tmp_path / "ipc")
    _bad_grammar_id(trace)
    data = (trace / "recorder.ts").read_bytes()
    (trace / "recorder.ts").write_bytes(data[: 8 + struct.unpack_from("<Q", data)[0]])
    out = collect_recorder([trace], JOB, per_rank_functions=True)
    assert not any("holds the timestamps of" in error for error in out.errors)
    assert any("rank 0 timestamps truncated" in error for error in out.errors)
