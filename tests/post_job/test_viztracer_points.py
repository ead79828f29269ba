"""collect_viztracer: points and cleaned files from real traces, values computed independently."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections import defaultdict

import pytest

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines
from hpcmon.post_job.viztracer import collect_viztracer
from tests.post_job.test_viztracer_support import DATA, brute_force_nesting, complete_events

JOB = JobContext("4242", cluster="alpha")
FIXED_MTIME_NS = 1_795_000_000_123_456_789


@pytest.fixture
def traces(tmp_path):
    """Copies with a known modification time (the time used when a trace has no epoch)."""
    paths = []
    for name in ["recursive.json", "tiny_calls.json.gz", "unfinished_inline.json"]:
        path = tmp_path / name
        shutil.copy(DATA / name, path)
        os.utime(path, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))
        paths.append(path)
    return paths


def summaries(points: list[Point]) -> dict[str, Point]:
    return {p.tags["trace"]: p for p in points if p.measurement == "viztracer_summary"}


def test_summary_points_and_cleaned_files(traces, tmp_path) -> None:
    out = tmp_path / "cleaned.json"
    output = collect_viztracer(traces, JOB, cleaned_out=out)
    assert output.errors == []
    by_trace = summaries(output.points)
    assert set(by_trace) == {"recursive.json", "tiny_calls.json.gz", "unfinished_inline.json"}
    for index, (path, events_in, calls) in enumerate(
        [(traces[0], 1979, 1977), (traces[1], 20030, 20028), (traces[2], 4, 2)], start=1
    ):
        point = by_trace[path.name]
        written = tmp_path / f"cleaned.{index}.json"
        document = json.loads(written.read_text())
        assert point.tags == {"jobid": "4242", "cluster": "alpha", "trace": path.name}
        assert point.fields["events_in"] == events_in
        assert point.fields["calls_in"] == calls
        assert point.fields["file_bytes"] == path.stat().st_size
        assert point.fields["bytes_out"] == written.stat().st_size
        assert point.fields["events_out"] == len(document["functionCalls"])
        assert point.fields["reduction_ratio"] == pytest.approx(
            1 - written.stat().st_size / point.fields["bytes_in"]
        )
        assert document["source"] == path.name
    recursive = complete_events("recursive.json")
    span = max(e["ts"] + e["dur"] for e in recursive) - min(e["ts"] for e in recursive)
    assert by_trace["recursive.json"].fields["total_duration_seconds"] == pytest.approx(span / 1e6)
    assert by_trace["recursive.json"].fields["bytes_in"] == 269943
    assert by_trace["tiny_calls.json.gz"].fields["bytes_in"] == 2800995
    ratio = by_trace["recursive.json"].fields["reduction_ratio"]
    assert isinstance(ratio, float) and ratio >= 0.3  # the spec's target
    assert by_trace["tiny_calls.json.gz"].fields["unfinished_calls"] == 0
    assert by_trace["unfinished_inline.json"].fields["unfinished_calls"] == 2


def test_point_times_come_from_the_trace(traces) -> None:
    by_trace = summaries(collect_viztracer(traces, JOB).points)
    assert by_trace["recursive.json"].time_ns == FIXED_MTIME_NS
    # inline-API trace: baseTimeNanoseconds + the last timestamp (inner's B at 1111279085.473 us)
    assert by_trace["unfinished_inline.json"].time_ns == 1795264277305412806 + 1111279085473


def test_rerun_writes_identical_points(traces) -> None:
    first = to_lines(collect_viztracer(traces, JOB).points)
    second = to_lines(collect_viztracer(traces, JOB).points)
    assert first == second and first


def expected_function_totals(name: str) -> dict[str, list[float]]:
    """name -> [calls, total (outermost calls only), self time], by brute-force nesting."""
    events = complete_events(name)
    nesting = brute_force_nesting(events)
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for index, event in enumerate(events):
        entry = totals[event["name"]]
        entry[0] += 1
        entry[2] += event["dur"]
        parent = nesting[index][1]
        if parent is not None:
            totals[events[parent]["name"]][2] -= event["dur"]
        ancestor, recursive = parent, False
        while ancestor is not None:
            recursive = recursive or events[ancestor]["name"] == event["name"]
            ancestor = nesting[ancestor][1]
        if not recursive:
            entry[1] += event["dur"]
    return dict(totals)


def test_top_functions_match_brute_force_totals(tmp_path) -> None:
    path = tmp_path / "recursive.json"
    shutil.copy(DATA / "recursive.json", path)
    output = collect_viztracer([path], JOB, top_functions=3)
    functions = [p for p in output.points if p.measurement == "viztracer_function"]
    expected = expected_function_totals("recursive.json")
    events = complete_events("recursive.json")
    deepest: dict[str, int] = defaultdict(int)
    for event, (depth, _) in zip(events, brute_force_nesting(events), strict=True):
        deepest[event["name"]] = max(deepest[event["name"]], depth)
    ranked = sorted(expected, key=lambda n: (-expected[n][1], n))[:3]
    assert [p.tags["function"] for p in functions] == ranked
    for rank, point in enumerate(functions, start=1):
        calls, total, self_time = expected[point.tags["function"]]
        assert point.tags["jobid"] == "4242" and point.tags["cluster"] == "alpha"
        assert point.fields["rank"] == rank
        assert point.fields["calls"] == calls
        assert point.fields["total_time_seconds"] == pytest.approx(total / 1e6)
        assert point.fields["self_time_seconds"] == pytest.approx(max(self_time, 0) / 1e6, abs=1e-9)
        assert point.fields["max_depth"] == deepest[point.tags["function"]]


def test_functions_add_up_over_several_traces(tmp_path) -> None:
    first, second = tmp_path / "a" / "recursive.json", tmp_path / "b" / "recursive.json"
    for path in (first, second):
        path.parent.mkdir()
        shutil.copy(DATA / "recursive.json", path)
    output = collect_viztracer([first, second], JOB, top_functions=100)
    fib = next(p for p in output.points if p.tags.get("function", "").startswith("fib ("))
    expected = expected_function_totals("recursive.json")[fib.tags["function"]]
    assert fib.fields["calls"] == 2 * expected[0]
    assert fib.fields["total_time_seconds"] == pytest.approx(2 * expected[1] / 1e6)
    # same file name twice: the full paths tell the summaries apart
    assert set(summaries(output.points)) == {str(first), str(second)}


def test_bad_trace_does_not_cost_the_good_ones(tmp_path) -> None:
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"\x1f\x8b not gzip at all")
    missing = tmp_path / "missing.json"
    output = collect_viztracer([broken, missing, DATA / "threaded.json"], JOB)
    assert len(output.errors) == 2
    assert "broken.json.gz" in output.errors[0] and "gzip" in output.errors[0]
    assert "missing.json" in output.errors[1] and "cannot read" in output.errors[1]
    assert set(summaries(output.points)) == {"threaded.json"}
    assert any(p.measurement == "viztracer_function" for p in output.points)


def test_unwritable_cleaned_output_is_an_error_not_a_crash(tmp_path) -> None:
    output = collect_viztracer(
        [DATA / "deep.json"], JOB, cleaned_out=tmp_path / "no-such-dir" / "out.json"
    )
    assert len(output.errors) == 1 and "cannot write the cleaned trace" in output.errors[0]
    assert len(summaries(output.points)) == 1


@pytest.mark.integration
def test_points_are_accepted_by_influxdb(influxdb1, traces) -> None:
    output = collect_viztracer(traces, JOB, top_functions=5)
    influxdb1.create_database("viztracer")
    request = urllib.request.Request(
        f"{influxdb1.url}/write?db=viztracer", data=to_lines(output.points).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
    [series] = influxdb1.series(
        "SELECT count(calls) FROM viztracer_function WHERE jobid='4242'", db="viztracer"
    )
    assert series["values"][0][1] == 5
    [series] = influxdb1.series(
        "SELECT events_in FROM viztracer_summary WHERE \"trace\"='recursive.json'", db="viztracer"
    )
    assert series["values"] == [[FIXED_MTIME_NS, 1979]]


def test_time_error_ratio_from_the_cleaned_file(tmp_path) -> None:
    """Per-function totals of the written cleaned JSON against brute-force raw totals."""
    out = tmp_path / "cleaned.json"
    output = collect_viztracer([DATA / "threaded.json"], JOB, cleaned_out=out)
    calls = {c["id"]: c for c in json.loads(out.read_text())["functionCalls"]}
    cleaned: dict[str, float] = defaultdict(float)
    for call in calls.values():
        ancestor, recursive = call.get("parentId"), False
        while ancestor is not None:
            recursive = recursive or calls[ancestor]["name"] == call["name"]
            ancestor = calls[ancestor].get("parentId")
        if not recursive:
            cleaned[call["name"]] += call["duration"]
    raw = {name: values[1] for name, values in expected_function_totals("threaded.json").items()}
    expected = sum(abs(cleaned.get(n, 0.0) - t) for n, t in raw.items()) / sum(raw.values())
    (summary,) = summaries(output.points).values()
    assert 0 < expected < 0.05
    assert summary.fields["time_error_ratio"] == pytest.approx(expected, rel=1e-4)


def test_same_trace_twice_keeps_two_summaries() -> None:
    output = collect_viztracer([DATA / "deep.json", DATA / "deep.json"], JOB)
    assert set(summaries(output.points)) == {f"{DATA / 'deep.json'}#1", f"{DATA / 'deep.json'}#2"}
