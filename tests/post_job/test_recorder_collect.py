"""collect_recorder: points from real traces, and hostile traces never raising out."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, to_lines
from hpcmon.post_job.recorder import collect_recorder
from tests.post_job.test_recorder_reader import DATA, TRACES, copy_trace

JOB = JobContext("4242", cluster="demo")


def by_measurement(points, name):
    return [p for p in points if p.measurement == name]


def number(value: FieldValue) -> float:
    """A numeric field's value (a text one fails the test)."""
    assert isinstance(value, int | float), value
    return value


def test_points_from_each_trace() -> None:
    out = collect_recorder(TRACES, JOB, top_files=3)
    assert out.errors == []
    for trace_dir in TRACES:
        counts = json.loads((trace_dir / "py_counts.json").read_text())
        mine = [p for p in out.points if p.tags["trace"] == trace_dir.name]
        expected_time = round(counts["start_ts_epoch"] * 1e9)
        assert all(abs(p.time_ns - expected_time) < 1000 for p in mine)
        assert all(p.tags["jobid"] == "4242" and p.tags["cluster"] == "demo" for p in mine)

        calls: dict[str, int] = {}
        times: dict[str, float] = {}
        for per_rank in counts["per_rank"].values():
            for name, count in per_rank["calls"].items():
                calls[name] = calls.get(name, 0) + count
                times[name] = times.get(name, 0.0) + per_rank["time_s"][name]
        functions = {
            p.tags["function"]: p.fields for p in by_measurement(mine, "recorder_function")
        }
        assert {name: f["count"] for name, f in functions.items()} == calls
        for name, fields in functions.items():
            assert abs(number(fields["total_time_seconds"]) - times[name]) < 1e-9
            assert fields["ranks"] == sum(name in p["calls"] for p in counts["per_rank"].values())

        ranks = {p.tags["rank"]: p.fields for p in by_measurement(mine, "recorder_rank")}
        assert set(ranks) == set(counts["per_rank"])
        for rank, per_rank in counts["per_rank"].items():
            assert ranks[rank]["records"] == sum(per_rank["calls"].values())
            assert ranks[rank]["files"] == len(per_rank["files"])
            assert ranks[rank]["file_accesses"] == sum(per_rank["files"].values())
            assert (
                abs(number(ranks[rank]["function_time_seconds"]) - sum(per_rank["time_s"].values()))
                < 1e-9
            )

        accesses: dict[str, int] = {}
        for per_rank in counts["per_rank"].values():
            for name, count in per_rank["files"].items():
                accesses[name] = accesses.get(name, 0) + count
        top = sorted(accesses.items(), key=lambda item: (-item[1], item[0]))[:3]
        files = by_measurement(mine, "recorder_file")
        assert [(p.tags["file"], p.fields["accesses"]) for p in files] == top

        (summary,) = by_measurement(mine, "recorder_trace")
        assert summary.fields["records"] == sum(number(ranks[r]["records"]) for r in ranks)
        assert summary.fields["ranks"] == counts["ranks"]
        assert not by_measurement(mine, "recorder_rank_function")


def test_per_rank_functions_only_when_asked() -> None:
    trace_dir = DATA / "v2.4.0/tiny_loop_np2"
    out = collect_recorder([trace_dir], JOB, per_rank_functions=True)
    detail = by_measurement(out.points, "recorder_rank_function")
    counts = json.loads((trace_dir / "py_counts.json").read_text())["per_rank"]
    got = {(p.tags["rank"], p.tags["function"]): p.fields["count"] for p in detail}
    assert got == {(r, name): c for r, per in counts.items() for name, c in per["calls"].items()}


def test_idempotent_line_protocol() -> None:
    first = to_lines(collect_recorder(TRACES, JOB).points)
    second = to_lines(collect_recorder(TRACES, JOB).points)
    assert first == second and first.count("\n") > 20


def test_bad_trace_does_not_cost_the_good_ones(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "VERSION").write_text("2.2.1")
    out = collect_recorder([bad, tmp_path / "missing", TRACES[0]], JOB)
    assert len(out.errors) == 2
    assert str(bad) in out.errors[0] and "2.2.1" in out.errors[0]
    assert "missing" in out.errors[1]
    assert {p.tags["trace"] for p in out.points} == {TRACES[0].name}


def _mutated_copy(src: Path, dst: Path, name: str, mode: str, where: float, value: int) -> Path:
    copy_trace(src, dst)
    target = dst / name
    data = bytearray(target.read_bytes())
    pos = int(where * len(data)) if data else 0
    if mode == "truncate":
        data = data[:pos]
    elif mode == "flip" and data:
        data[min(pos, len(data) - 1)] = value
    elif mode == "huge" and len(data) >= 4:
        start = min(pos, len(data) - 4)
        data[start : start + 4] = b"\xff\xff\xff\x7f"
    elif mode == "garbage":
        data += bytes([value]) * 64
    elif mode == "delete":
        target.unlink()
        return dst
    target.write_bytes(bytes(data))
    return dst


@settings(max_examples=60, deadline=None)
@given(
    trace=st.sampled_from(TRACES),
    pick=st.integers(0, 100),
    mode=st.sampled_from(["truncate", "flip", "huge", "garbage", "delete"]),
    where=st.floats(0, 1),
    value=st.integers(0, 255),
)
def test_hostile_traces_never_raise(tmp_path_factory, trace, pick, mode, where, value) -> None:
    files = sorted(
        p.name
        for p in trace.iterdir()
        if p.is_file() and not p.suffix == ".json" and p.name != "summary.txt"
    )
    name = files[pick % len(files)]
    copy = _mutated_copy(
        trace, tmp_path_factory.mktemp("hostile") / trace.name, name, mode, where, value
    )
    out = collect_recorder([copy], JOB)
    assert all(str(copy) in e for e in out.errors), out.errors
    to_lines(out.points)  # still valid line protocol
    if out.errors and not out.points:
        return
    assert by_measurement(out.points, "recorder_trace")
