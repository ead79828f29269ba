"""Cleaning rules on real VizTracer traces, checked against values computed from the raw JSON."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from post_job.viztracer.cleaning import (
    FILTER_FIRST,
    CleanedViztracerData,
    CleaningOptions,
    clean_trace,
    function_totals,
)
from post_job.viztracer.reader import read_trace
from tests.test_viztracer_support import DATA, brute_force_nesting, complete_events

NO_RULES = CleaningOptions(min_duration_us=0, max_depth=0, enable_aggregation=False)
TINY = "tiny (/scratch/demo/tiny_calls.py:2)"


def clean(name: str, options: CleaningOptions | None = None) -> CleanedViztracerData:
    return clean_trace(read_trace(DATA / name), options).data


def call_key(pid, tid, start, duration, name) -> tuple:
    return (pid, tid, start, duration, name)


@pytest.mark.parametrize("name", ["recursive.json", "threaded.json", "deep.json"])
def test_nesting_matches_interval_containment(name: str) -> None:
    events = complete_events(name)
    keys = [call_key(e["pid"], e["tid"], e["ts"], e["dur"], e["name"]) for e in events]
    assert len(set(keys)) == len(keys)
    expected = brute_force_nesting(events)
    data = clean(name, NO_RULES)
    assert len(data.function_calls) == len(events)
    by_id = {call.id: call for call in data.function_calls}
    got = {}
    for call in data.function_calls:
        parent = by_id[call.parent_id] if call.parent_id is not None else None
        parent_key = (
            call_key(
                parent.process_id, parent.thread_id, parent.start_time, parent.duration, parent.name
            )
            if parent
            else None
        )
        got[
            call_key(call.process_id, call.thread_id, call.start_time, call.duration, call.name)
        ] = (call.depth, parent_key)
    for key, (depth, parent_index) in zip(keys, expected, strict=True):
        parent_key = keys[parent_index] if parent_index is not None else None
        assert got[key] == (depth, parent_key), key


def test_prune_keeps_what_viztracer_max_stack_depth_keeps() -> None:
    """deep_maxdepth10.json is VizTracer's own --max_stack_depth 10 run of the same program."""
    data = clean(
        "deep.json", CleaningOptions(min_duration_us=0, max_depth=10, enable_aggregation=False)
    )
    viztracer_kept = Counter(e["name"] for e in complete_events("deep_maxdepth10.json"))
    assert Counter(call.name for call in data.function_calls) == viztracer_kept
    assert max(call.depth for call in data.function_calls) == 9


def test_filter_alone_keeps_exactly_the_long_calls() -> None:
    events = complete_events("tiny_calls.json.gz")
    long_calls = Counter(e["name"] for e in events if e["dur"] >= 100)
    data = clean(
        "tiny_calls.json.gz",
        CleaningOptions(min_duration_us=100, max_depth=0, enable_aggregation=False),
    )
    assert Counter(call.name for call in data.function_calls) == long_calls


def test_aggregation_merges_the_tiny_loop_into_one_call() -> None:
    events = complete_events("tiny_calls.json.gz")
    tiny = [e for e in events if e["name"] == TINY]
    assert len(tiny) == 20000  # the program's loop
    data = clean("tiny_calls.json.gz")
    merged = [call for call in data.function_calls if call.name == TINY]
    assert len(merged) == 1
    assert merged[0].call_count == 20000
    assert merged[0].duration == pytest.approx(sum(e["dur"] for e in tiny), abs=1e-6)
    assert merged[0].start_time == min(e["ts"] for e in tiny)
    assert merged[0].end_time == pytest.approx(max(e["ts"] + e["dur"] for e in tiny))
    # the five 2 ms sleeps of slow() are one run too
    slow = [call for call in data.function_calls if call.name.startswith("slow (")]
    assert [call.call_count for call in slow] == [5]


def test_filter_first_loses_the_tiny_loop_that_aggregate_first_keeps() -> None:
    events = complete_events("tiny_calls.json.gz")
    raw_tiny = sum(e["dur"] for e in events if e["name"] == TINY)
    assert raw_tiny >= 100  # the loop as a whole is worth keeping
    default = function_totals(clean("tiny_calls.json.gz"))
    filter_first = function_totals(clean("tiny_calls.json.gz", CleaningOptions(order=FILTER_FIRST)))
    assert default[TINY] == pytest.approx(raw_tiny)
    assert TINY not in filter_first


def test_tree_links_are_consistent_across_processes_and_threads() -> None:
    data = clean("multiproc.json.gz")
    by_id = {call.id: call for call in data.function_calls}
    assert len(by_id) == len(data.function_calls)
    for call in data.function_calls:
        if call.parent_id is None:
            assert call.depth == 0
            continue
        parent = by_id[call.parent_id]
        assert call.id in parent.children_ids
        assert call.depth == parent.depth + 1
        assert (parent.process_id, parent.thread_id) == (call.process_id, call.thread_id)
        assert parent.start_time <= call.start_time
    for call in data.function_calls:
        assert all(by_id[child].parent_id == call.id for child in call.children_ids)
        assert call.depth < 10 and call.duration >= 100
    raw_threads = {(e["pid"], e["tid"]) for e in complete_events("multiproc.json.gz")}
    assert {(i.process_id, i.thread_id) for i in data.thread_info} == raw_threads
    assert sorted(data.threads) == sorted({tid for _, tid in raw_threads})


def test_unfinished_calls_are_active_and_nested() -> None:
    """unfinished_inline.json: outer() then inner() were still running (B events, no E)."""
    data = clean("unfinished_inline.json")
    outer, inner = data.function_calls
    assert outer.name.startswith("outer (") and inner.name.startswith("inner (")
    assert outer.is_active and inner.is_active
    assert inner.parent_id == outer.id and inner.depth == 1
    assert outer.start_time == 1111279085.163 and inner.start_time == 1111279085.473
    assert outer.end_time == inner.end_time == 1111279085.473  # the last moment traced
    assert outer.line_number == 5 and inner.line_number == 3


def test_raw_function_totals_count_recursion_once() -> None:
    events = complete_events("recursive.json")
    fib = [e for e in events if e["name"].startswith("fib (")]
    result = clean_trace(read_trace(DATA / "recursive.json"))
    stats = result.functions[fib[0]["name"]]
    assert stats.calls == len(fib)
    assert stats.total_us == pytest.approx(max(e["dur"] for e in fib))  # only fib(15) itself
    nesting = brute_force_nesting(events)
    child_time: dict[int, float] = defaultdict(float)
    for event, (_, parent) in zip(events, nesting, strict=True):
        if parent is not None:
            child_time[parent] += event["dur"]
    fib_self = sum(e["dur"] - child_time[i] for i, e in enumerate(events) if e in fib)
    assert stats.self_us == pytest.approx(fib_self)
    assert stats.max_depth == max(
        depth for (depth, _), e in zip(nesting, events, strict=True) if e in fib
    )


def test_json_output_has_the_spec_fields() -> None:
    data = clean("threaded.json")
    document = json.loads(data.to_json())
    assert {"functionCalls", "threads", "startTime", "endTime", "totalDuration"} <= set(document)
    events = complete_events("threaded.json")
    assert document["startTime"] == pytest.approx(min(e["ts"] for e in events), abs=1e-3)
    assert document["endTime"] == pytest.approx(max(e["ts"] + e["dur"] for e in events), abs=1e-3)
    for call in document["functionCalls"]:
        assert {
            "id",
            "name",
            "startTime",
            "endTime",
            "duration",
            "depth",
            "threadId",
            "processId",
            "childrenIds",
            "isActive",
        } <= set(call)
    names = {info["threadName"] for info in document["threadInfo"]}
    assert names == {"MainThread", "worker-0", "worker-1"}


# --- property tests on generated call trees -------------------------------------------------


def _tree_events(draw, depth: int, start: float, pid: int, tid: int, out: list) -> float:
    """Emit children from ``start`` in exit order (like VizTracer); return where they end."""
    now = start
    for _ in range(draw(st.integers(0, 3 if depth < 4 else 0))):
        now += draw(st.sampled_from([0.0, 1.0, 50.0, 700.0]))
        name = draw(st.sampled_from(["a", "b", "c"]))
        child_start = now
        now = _tree_events(draw, depth + 1, now, pid, tid, out)
        now += draw(st.sampled_from([1.0, 30.0, 200.0]))
        out.append(
            {
                "ph": "X",
                "name": name,
                "ts": child_start,
                "dur": now - child_start,
                "pid": pid,
                "tid": tid,
                "cat": "fee",
            }
        )
    return now


@st.composite
def generated_traces(draw) -> list[dict]:
    events: list[dict] = []
    for tid in draw(st.lists(st.integers(1, 3), min_size=1, max_size=3, unique=True)):
        _tree_events(draw, 0, 1000.0 * tid, 7, tid, events)
    return events


def _write(tmp_path, events: list[dict]):
    path = tmp_path / "generated.json"
    path.write_text(json.dumps({"traceEvents": events, "viztracer_metadata": {"overflow": False}}))
    return path


@settings(max_examples=40, deadline=None)
@given(events=generated_traces())
def test_generated_nesting_and_aggregation_conserve_time(tmp_path_factory, events) -> None:
    path = _write(tmp_path_factory.mktemp("vz"), events)
    trace = read_trace(path)
    exact = clean_trace(trace, NO_RULES).data
    assert len(exact.function_calls) == len(events)
    expected_depths = Counter(depth for depth, _ in brute_force_nesting(events)) if events else {}
    assert Counter(call.depth for call in exact.function_calls) == expected_depths
    merged = clean_trace(trace, CleaningOptions(min_duration_us=0, max_depth=0)).data
    raw_sums: dict[tuple, float] = defaultdict(float)
    for event in events:
        raw_sums[event["name"], event["tid"]] += event["dur"]
    merged_sums: dict[tuple, float] = defaultdict(float)
    for call in merged.function_calls:
        merged_sums[call.name, call.thread_id] += call.duration
    assert merged_sums.keys() == raw_sums.keys()
    for key, total in raw_sums.items():
        assert math.isclose(merged_sums[key], total, abs_tol=1e-6)
    assert sum(call.call_count for call in merged.function_calls) == len(events)
    # merged siblings never leave two adjacent same-name calls within the threshold
    by_id = {call.id: call for call in merged.function_calls}
    for call in merged.function_calls:
        children = [by_id[c] for c in call.children_ids]
        for left, right in zip(children, children[1:], strict=False):
            assert not (left.name == right.name and right.start_time - left.end_time <= 500)


def test_begin_end_pairs_nest_with_complete_events(tmp_path) -> None:
    events = [
        {"ph": "B", "pid": 1, "tid": 2, "ts": 0.0, "name": "outer"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.0, "name": "inner"},
        {"ph": "B", "pid": 1, "tid": 2, "ts": 4.0, "name": "second"},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 9.0},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 10.0},
    ]
    data = clean_trace(read_trace(_write(tmp_path, events)), NO_RULES).data
    got = [(c.name, c.depth, c.start_time, c.duration, c.is_active) for c in data.function_calls]
    assert got == [
        ("outer", 0, 0.0, 10.0, False),
        ("inner", 1, 1.0, 2.0, False),
        ("second", 1, 4.0, 5.0, False),
    ]


def test_very_deep_recursion_needs_no_python_recursion(tmp_path) -> None:
    depth = 3000
    events = [
        {
            "ph": "X",
            "pid": 1,
            "tid": 1,
            "ts": float(level),
            "dur": float(2 * (depth - level)),
            "name": "r",
        }
        for level in range(depth)
    ]
    result = clean_trace(read_trace(_write(tmp_path, events)), NO_RULES)
    assert [c.depth for c in result.data.function_calls] == list(range(depth))
    assert result.functions["r"].total_us == 2 * depth  # the outermost call only
    assert result.functions["r"].max_depth == depth - 1
    pruned = clean_trace(read_trace(_write(tmp_path, events)), CleaningOptions(min_duration_us=0))
    assert len(pruned.data.function_calls) == 10 and pruned.calls_pruned == depth - 10
