"""Run the real VizTracer on small programs and check what the cleaning makes of its traces."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.viztracer import collect_viztracer
from hpcmon.post_job.viztracer.cleaning import CleaningOptions, FunctionCall, clean_trace
from hpcmon.post_job.viztracer.reader import read_trace

VIZTRACER = Path(sys.executable).with_name("viztracer")

PROGRAM = """\
import threading, time

def tiny(i):
    return i + 1

def pause():
    time.sleep(0.003)

def worker():
    for _ in range(3):
        pause()

def main():
    for i in range(20000):
        tiny(i)
    for _ in range(4):
        pause()
    thread = threading.Thread(target=worker, name="fresh-worker")
    thread.start()
    thread.join()

if __name__ == "__main__":
    main()
"""

DEEP_PROGRAM = """\
def level(n):
    if n == 0:
        return sum(range(20000))
    return level(n - 1)

level(14)
"""


def run_viztracer(tmp_path: Path, source: str, output: str, *options: str) -> Path:
    program = tmp_path / "program.py"
    program.write_text(source)
    out = tmp_path / output
    subprocess.run(
        [str(VIZTRACER), "--quiet", *options, "-o", str(out), str(program)],
        cwd=tmp_path,
        check=True,
        timeout=120,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def fresh_trace(tmp_path_factory) -> Path:
    assert VIZTRACER.exists(), "viztracer (the test extra) is not installed"
    return run_viztracer(tmp_path_factory.mktemp("fresh"), PROGRAM, "trace.json.gz")


def ancestors(call: FunctionCall, by_id: dict[str, FunctionCall]) -> list[str]:
    names = []
    while call.parent_id is not None:
        call = by_id[call.parent_id]
        names.append(call.name.split(" (")[0])
    return names


def test_fresh_trace_is_cleaned_into_the_program_structure(fresh_trace) -> None:
    trace = read_trace(fresh_trace)
    assert trace.errors == [] and trace.overflow is False
    assert "fresh-worker" in trace.thread_names.values()
    data = clean_trace(trace).data
    by_id = {call.id: call for call in data.function_calls}
    by_name: dict[str, list[FunctionCall]] = {}
    for call in data.function_calls:
        by_name.setdefault(call.name.split(" (")[0], []).append(call)
    # the loop is one call, split only where the machine paused it for more than 500 us:
    # between two calls (a gap), or inside one (that call is too long to merge, so it stays
    # on its own); on an idle machine neither happens and the loop is exactly one call
    raw_tiny = sorted(
        c for t in trace.threads.values() for c in t.calls if c[2].startswith("tiny (")
    )
    breaks = sum(
        1
        for (start, negative_duration, _), (next_start, next_negative, _) in zip(
            raw_tiny, raw_tiny[1:], strict=False
        )
        if next_start - (start - negative_duration) > 500
        or -negative_duration > 500
        or -next_negative > 500
    )
    unfiltered = clean_trace(trace, CleaningOptions(min_duration_us=0)).data
    unfiltered_by_id = {call.id: call for call in unfiltered.function_calls}
    tiny_runs = [c for c in unfiltered.function_calls if c.name.startswith("tiny (")]
    assert len(tiny_runs) == 1 + breaks
    assert sum(run.call_count for run in tiny_runs) == 20000
    for tiny in tiny_runs:
        assert tiny.depth == 3
        assert ancestors(tiny, unfiltered_by_id) == ["main", "<module>", "builtins.exec"]
    assert sum(run.duration for run in by_name.get("tiny", [])) >= 100  # survives the filter
    # the 3 ms pauses are longer than the 500 us threshold: each stays a call of its own
    pauses = by_name["pause"]
    assert [p.call_count for p in pauses] == [1] * 7
    main_pauses = [p for p in pauses if ancestors(p, by_id)[0] == "main"]
    worker_pauses = [p for p in pauses if ancestors(p, by_id)[0] == "worker"]
    assert len(main_pauses) == 4 and len(worker_pauses) == 3
    assert {p.thread_id for p in main_pauses}.isdisjoint(p.thread_id for p in worker_pauses)
    assert all(p.duration >= 3000 for p in pauses)
    for pause in pauses:
        sleeps = [by_id[c] for c in pause.children_ids]
        assert [(s.name, s.call_count) for s in sleeps] == [("time.sleep", 1)]


def test_fresh_trace_filter_and_points(fresh_trace) -> None:
    raw = [
        (start, -negative_duration, name)
        for thread in read_trace(fresh_trace).threads.values()
        for start, negative_duration, name in thread.calls
    ]
    data = clean_trace(
        read_trace(fresh_trace),
        CleaningOptions(min_duration_us=100, max_depth=0, enable_aggregation=False),
    ).data
    assert Counter(c.name for c in data.function_calls) == Counter(
        name for _, duration, name in raw if duration >= 100
    )
    output = collect_viztracer([fresh_trace], JobContext("7"), top_functions=200)
    assert output.errors == []
    tiny = next(p for p in output.points if p.tags.get("function", "").startswith("tiny ("))
    assert tiny.fields["calls"] == 20000 and tiny.fields["max_depth"] == 3
    tiny_total = sum(duration for _, duration, name in raw if name.startswith("tiny ("))
    assert tiny.fields["total_time_seconds"] == pytest.approx(tiny_total / 1e6)


def test_pruning_matches_viztracer_max_stack_depth(tmp_path) -> None:
    """Our maxDepth on a full trace keeps the frames VizTracer's --max_stack_depth keeps."""
    assert VIZTRACER.exists(), "viztracer (the test extra) is not installed"
    full = run_viztracer(tmp_path, DEEP_PROGRAM, "full.json")
    limited = run_viztracer(tmp_path, DEEP_PROGRAM, "limited.json", "--max_stack_depth", "10")
    ours = clean_trace(
        read_trace(full), CleaningOptions(min_duration_us=0, max_depth=10, enable_aggregation=False)
    ).data
    theirs = [name for t in read_trace(limited).threads.values() for _, _, name in t.calls]
    assert Counter(c.name for c in ours.function_calls) == Counter(theirs)


OVERFLOW_PROGRAM = """\
def f(i):
    return i

def main():
    for i in range(5000):
        f(i)

main()
"""


def test_buffer_overflow_is_honoured(tmp_path) -> None:
    """A 1,000-entry ring buffer for 5,000 calls: VizTracer drops the calls that ended first."""
    assert VIZTRACER.exists(), "viztracer (the test extra) is not installed"
    path = run_viztracer(tmp_path, OVERFLOW_PROGRAM, "small.json", "--tracer_entries", "1000")
    document = json.loads(path.read_text())
    assert document["viztracer_metadata"]["overflow"] is True
    complete = [e for e in document["traceEvents"] if e["ph"] == "X"]
    earliest_end = min(e["ts"] + e["dur"] for e in complete)
    out = tmp_path / "cleaned.json"
    output = collect_viztracer([path], JobContext("8"), cleaned_out=out)
    assert len(output.errors) == 1 and "overflow" in output.errors[0]
    (summary,) = [p for p in output.points if p.measurement == "viztracer_summary"]
    assert summary.fields["overflow"] is True
    assert summary.fields["calls_in"] == len(complete)
    cleaned = json.loads(out.read_text())
    assert cleaned["overflow"] is True
    assert cleaned["completeFrom"] == pytest.approx(earliest_end)
    # the f calls that survived are a contiguous tail of the loop
    kept_f = sum(1 for e in complete if e["name"].startswith("f ("))
    f_point = next(p for p in output.points if p.tags.get("function", "").startswith("f ("))
    assert f_point.fields["calls"] == kept_f < 5000
