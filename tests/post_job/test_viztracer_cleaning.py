"""Cleaning rules on real VizTracer traces, checked against values computed from the raw JSON."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.viztracer.cleaning import (
    FILTER_FIRST,
    CleanedViztracerData,
    CleaningOptions,
    clean_trace,
    function_totals,
)
from hpcmon.post_job.viztracer.reader import read_trace
from tests.post_job.test_viztracer_support import DATA, brute_force_nesting, complete_events

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
    # the five 2 ms calls of slow() are each longer than the 500 us threshold: kept one by one
    raw_slow = sorted(e["ts"] for e in events if e["name"].startswith("slow ("))
    assert len(raw_slow) == 5
    assert all(e["dur"] > 500 for e in events if e["name"].startswith("slow ("))
    slow = [call for call in data.function_calls if call.name.startswith("slow (")]
    assert [(call.start_time, call.call_count) for call in slow] == [(ts, 1) for ts in raw_slow]


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
    # each thread once (ids are ints or texts, as the trace has them: no order among them)
    assert Counter(data.threads) == Counter({tid for _, tid in raw_threads})


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
    assert document["totalDuration"] == pytest.approx(
        document["endTime"] - document["startTime"], abs=2e-3
    )
    assert sorted(document["threads"]) == sorted({e["tid"] for e in events})
    # the spec's FunctionCall interface: name -> JSON type; "?" marks the optional ones
    interface = {
        "id": str,
        "name": str,
        "startTime": (int, float),
        "endTime": (int, float),
        "duration": (int, float),
        "depth": int,
        "threadId": int,
        "processId": int,
        "parentId?": str,
        "childrenIds": list,
        "isActive": bool,
        "lineNumber?": int,
    }
    required = {key for key in interface if not key.endswith("?")}
    known = {key.rstrip("?") for key in interface} | {"callCount"}  # callCount: our addition
    ids = {call["id"] for call in document["functionCalls"]}
    for call in document["functionCalls"]:
        assert required <= set(call) <= known, set(call) ^ known
        for key, kind in interface.items():
            if key.rstrip("?") in call:
                assert isinstance(call[key.rstrip("?")], kind), (key, call)
        assert set(call["childrenIds"]) <= ids and call.get("parentId", call["id"]) in ids
        assert call["endTime"] >= call["startTime"] and call["isActive"] is False
        if call["name"].endswith(")"):  # "func (/path/file.py:LINE)"
            assert call["lineNumber"] == int(call["name"].rsplit(":", 1)[1][:-1])
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
    # merged runs are made of short calls, and no two adjacent short same-name calls are left
    by_id = {call.id: call for call in merged.function_calls}
    roots: dict[tuple, list] = defaultdict(list)  # siblings at the top: one list per thread
    for call in merged.function_calls:
        if call.parent_id is None:
            roots[call.process_id, call.thread_id].append(call)
    for siblings in [*roots.values()] + [
        [by_id[c] for c in call.children_ids] for call in merged.function_calls
    ]:
        for call in siblings:
            if call.call_count > 1:
                assert call.duration <= 500 * call.call_count
        for left, right in zip(siblings, siblings[1:], strict=False):
            assert not (
                left.name == right.name
                and right.start_time - left.end_time <= 500
                and (left.call_count > 1 or left.duration <= 500)
                and (right.call_count > 1 or right.duration <= 500)
            )


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


def _x(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": dur, "name": name}


def test_aggregation_rule_by_hand(tmp_path) -> None:
    """Which repeated calls merge (times in us; threshold 500, no filter, no depth limit)."""
    events = [
        _x("main", 0.0, 100_000.0),
        # three short f calls, 10 us apart, each with a child g: one f run, one g run
        _x("f", 10.0, 40.0),
        _x("g", 20.0, 5.0),
        _x("f", 60.0, 40.0),
        _x("g", 70.0, 5.0),
        _x("f", 110.0, 40.0),
        _x("g", 120.0, 5.0),
        # a pause longer than the threshold starts a new run
        _x("f", 700.0, 40.0),
        # something else in between: no merging across it
        _x("h", 750.0, 1.0),
        _x("f", 760.0, 40.0),
        # two long calls (over the threshold) back to back stay two calls
        _x("slow", 1_000.0, 2_000.0),
        _x("slow", 3_001.0, 2_000.0),
        # a short call right after a long one of the same function is not merged into it
        _x("slow", 5_002.0, 10.0),
        _x("slow", 5_013.0, 10.0),
    ]
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({"traceEvents": events}))
    options = CleaningOptions(min_duration_us=0, max_depth=0)
    data = clean_trace(read_trace(path), options).data
    by_id = {call.id: call for call in data.function_calls}
    (main,) = [call for call in data.function_calls if call.parent_id is None]
    got = [
        (c.name, c.call_count, c.start_time, c.end_time, c.duration)
        for c in (by_id[i] for i in main.children_ids)
    ]
    assert got == [
        ("f", 3, 10.0, 150.0, 120.0),  # duration = 3 x 40, not the 140 us span
        ("f", 1, 700.0, 740.0, 40.0),
        ("h", 1, 750.0, 751.0, 1.0),
        ("f", 1, 760.0, 800.0, 40.0),
        ("slow", 1, 1_000.0, 3_000.0, 2_000.0),
        ("slow", 1, 3_001.0, 5_001.0, 2_000.0),
        ("slow", 2, 5_002.0, 5_023.0, 20.0),
    ]
    first_f = by_id[main.children_ids[0]]
    (g,) = [by_id[i] for i in first_f.children_ids]  # the children of the merged calls, merged
    assert (g.name, g.call_count, g.duration, g.depth, g.parent_id) == ("g", 3, 15.0, 2, first_f.id)
    # with aggregation off nothing is merged
    unmerged = clean_trace(
        read_trace(path), CleaningOptions(min_duration_us=0, max_depth=0, enable_aggregation=False)
    ).data
    assert len(unmerged.function_calls) == len(events)
    # the filter then judges a merged run by its total: 3 x 40 us survives 100 us, 40 us does not
    filtered = clean_trace(read_trace(path), CleaningOptions(max_depth=0)).data
    assert [(c.name, c.call_count) for c in filtered.function_calls] == [
        ("main", 1),
        ("f", 3),
        ("slow", 1),
        ("slow", 1),
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
