"""Reading real VizTracer traces, and hostile input that must give clear errors, not crashes."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.viztracer import collect_viztracer
from hpcmon.post_job.viztracer.reader import read_trace
from tests.post_job.test_viztracer_support import DATA, complete_events, load_document

# Phase counts as listed in tests/data/viztracer/SOURCES.md (read off the fixture files).
PHASES = {
    "recursive.json": {"M": 2, "X": 1977},
    "threaded.json": {"M": 4, "X": 4113},
    "multiproc.json.gz": {"M": 14, "X": 19954},
    "tiny_calls.json.gz": {"M": 2, "X": 20028},
    "deep_maxdepth10.json": {"M": 2, "X": 24},
    "features.json.gz": {"C": 8, "D": 1, "M": 7, "N": 1, "O": 1, "X": 1096, "i": 6},
    "unfinished_inline.json": {"B": 2, "M": 2},
}


@pytest.mark.parametrize("name", sorted(PHASES))
def test_phase_counts_match_the_sources_table(name: str) -> None:
    trace = read_trace(DATA / name)
    assert dict(trace.phase_counts) == PHASES[name]
    assert trace.event_count == sum(PHASES[name].values())
    assert trace.errors == []
    assert trace.version == "1.1.1" and trace.overflow is False


def test_features_ignored_events_are_counted_not_kept() -> None:
    trace = read_trace(DATA / "features.json.gz")
    assert trace.ignored_count == 8 + 1 + 1 + 1 + 6  # C, D, N, O, i
    assert trace.call_count == 1096
    assert len(trace.threads) == 6  # main thread + 5 asyncio tasks on fake tids


def test_forked_processes_reusing_a_tid_stay_apart() -> None:
    events = complete_events("multiproc.json.gz")
    expected = Counter((e["pid"], e["tid"]) for e in events)
    trace = read_trace(DATA / "multiproc.json.gz")
    assert {key: len(t.calls) for key, t in trace.threads.items()} == dict(expected)
    pids_per_tid = Counter(tid for _, tid in expected)
    assert max(pids_per_tid.values()) > 1  # the fork case really is in this trace
    assert len({pid for pid, _ in expected}) == 4
    names = {
        e["args"]["name"]
        for e in load_document("multiproc.json.gz")["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert set(trace.process_names.values()) == names


def test_thread_names_from_metadata() -> None:
    trace = read_trace(DATA / "threaded.json")
    assert sorted(trace.thread_names.values()) == ["MainThread", "worker-0", "worker-1"]


def test_unfinished_b_events_and_base_time() -> None:
    trace = read_trace(DATA / "unfinished_inline.json")
    (thread,) = trace.threads.values()
    assert thread.calls == []
    assert sorted(thread.unfinished) == [
        (1111279085.163, "outer (/scratch/demo/unfinished.py:5)"),
        (1111279085.473, "inner (/scratch/demo/unfinished.py:3)"),
    ]
    assert trace.base_time_ns == 1795264277305412806


def test_gzip_and_plain_json_read_the_same(tmp_path) -> None:
    plain = tmp_path / "tiny_calls.json"
    plain.write_bytes(gzip.decompress((DATA / "tiny_calls.json.gz").read_bytes()))
    from_gzip = read_trace(DATA / "tiny_calls.json.gz")
    from_plain = read_trace(plain)
    assert from_gzip.json_bytes == plain.stat().st_size == 2800995
    assert {k: t.calls for k, t in from_gzip.threads.items()} == {
        k: t.calls for k, t in from_plain.threads.items()
    }


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.93])
def test_truncated_json_keeps_the_complete_events(tmp_path, fraction: float) -> None:
    text = (DATA / "recursive.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: int(len(text) * fraction)])
    trace = read_trace(cut)
    assert len(trace.errors) == 1 and str(cut) in trace.errors[0]
    assert "truncated" in trace.errors[0]
    kept = [c for t in trace.threads.values() for c in t.calls]
    full = [(e["ts"], -e["dur"], e["name"]) for e in complete_events("recursive.json")]
    assert 0 < len(kept) < len(full)
    assert kept == full[: len(kept)]
    # at most the event being written when the file broke off is lost
    assert text[: int(len(text) * fraction)].count('"ph": "X"') - len(kept) <= 1


def test_truncated_gzip_keeps_what_decompresses(tmp_path) -> None:
    data = (DATA / "tiny_calls.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    trace = read_trace(cut)
    assert any("gzip stream is truncated" in e and str(cut) in e for e in trace.errors)
    kept = [c for t in trace.threads.values() for c in t.calls]
    full = [(e["ts"], -e["dur"], e["name"]) for e in complete_events("tiny_calls.json.gz")]
    assert 0 < len(kept) < len(full) and kept == full[: len(kept)]


def test_corrupt_gzip_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate" * 3)
    with pytest.raises(SourceError, match="bad.json.gz: corrupt gzip"):
        read_trace(bad)


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "invalid JSON"),
        (b"[1, 2", "invalid JSON"),
        (b'"just a string"', "top level is str"),
        (b'{"traceEvents": 5}', "no traceEvents array"),
        (b"\xff\xfe\x00garbage", "not UTF-8|invalid JSON"),
    ],
)
def test_unreadable_files_name_the_file_and_problem(tmp_path, content, problem) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=f"broken.json: .*({problem})"):
        read_trace(path)


def test_overflow_is_reported(tmp_path) -> None:
    document = load_document("recursive.json")
    document["viztracer_metadata"]["overflow"] = True
    path = tmp_path / "overflowed.json"
    path.write_text(json.dumps(document))
    trace = read_trace(path)
    assert trace.overflow is True
    assert any("overflow" in e and "overflowed.json" in e for e in trace.errors)


def test_malformed_events_are_skipped_and_counted(tmp_path) -> None:
    good = {"ph": "X", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0, "name": "ok"}
    events = [
        good,
        {"ph": "X", "pid": 1, "tid": 1, "ts": "soon", "dur": 1, "name": "a"},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": -3.0, "name": "b"},
        {"ph": "X", "pid": [1], "tid": 1, "ts": 1.0, "dur": 3.0, "name": "c"},
        {"ph": "X", "tid": 1, "ts": 1.0, "dur": 3.0, "name": "d"},
        17,
        None,
        {"ph": "E", "pid": 1, "tid": 1, "ts": 30.0},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_trace(path)
    assert [c for t in trace.threads.values() for c in t.calls] == [(10.0, -5.0, "ok")]
    text = "\n".join(trace.errors)
    assert text.count("odd.json") == len(trace.errors)
    assert "missing field 'pid'" in text and "event is a int" in text
    assert "E event(s) without a B" in text


# --- hostile input, generated ---------------------------------------------------------------

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)
events = st.one_of(
    st.fixed_dictionaries(
        {
            "ph": st.sampled_from(["X", "B", "E", "M", "i", "C", "N", "O", "D"]),
            "pid": st.one_of(st.integers(0, 3), st.text(max_size=2)),
            "tid": st.integers(0, 3),
            "ts": numbers,
            "dur": numbers,
            "name": st.one_of(st.text(max_size=5), st.integers()),
            "args": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        }
    ),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_list=st.lists(events, max_size=30))
def test_collect_never_raises_on_generated_events(tmp_path_factory, event_list) -> None:
    path = tmp_path_factory.mktemp("hostile") / "trace.json"
    path.write_text(json.dumps({"traceEvents": event_list}))
    out_path = path.with_name("cleaned.json")
    output = collect_viztracer([path], JobContext("1"), cleaned_out=out_path)
    assert all("trace.json" in e for e in output.errors)
    assert not any("unexpected error" in e for e in output.errors)  # the catch-all for bugs
    summary = [p for p in output.points if p.measurement == "viztracer_summary"]
    assert len(summary) == 1
    well_formed = sum(
        1
        for e in event_list
        if isinstance(e, dict)
        and e["ph"] == "X"
        and _sane(e["ts"])
        and _sane(e["dur"])
        and float(e["dur"]) >= 0
    )
    calls_in = summary[0].fields["calls_in"]
    assert isinstance(calls_in, int) and calls_in >= well_formed
    json.loads(out_path.read_text())  # the cleaned file is valid JSON whatever came in


def _sane(value) -> bool:
    """A real JSON number in range (the reader does not parse numbers out of strings)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return -1e15 < value < 1e15


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_collect_never_raises_on_damaged_files(tmp_path_factory, data) -> None:
    original = (DATA / "deep.json").read_bytes()
    if data.draw(st.booleans()):
        original = gzip.compress(original)
    cut = data.draw(st.integers(0, len(original)))
    damaged = bytearray(original[:cut])
    for _ in range(data.draw(st.integers(0, 3))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("damaged") / "deep.json"
    path.write_bytes(bytes(damaged))
    good = DATA / "threaded.json"
    output = collect_viztracer([path, good], JobContext("1"))
    assert all(str(path) in e for e in output.errors)
    assert not any("unexpected error" in e for e in output.errors)
    traces = {p.tags["trace"] for p in output.points if p.measurement == "viztracer_summary"}
    assert "threaded.json" in traces  # the good trace is never lost


def test_many_kinds_of_malformed_events_give_few_error_lines(tmp_path) -> None:
    good = {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, "name": "x"}
    events = [{"ph": f"weird{i}"} for i in range(30)]  # unknown phases: counted, not errors
    for field in ("ts", "dur", "name", "pid", "tid"):  # 5 kinds, 2 events each
        events += [{k: v for k, v in good.items() if k != field}] * 2
    events += [dict(good, ts=f"bad{i}") for i in range(30)]  # 1 kind, whatever the value
    events += [17, "text", [1], 2.5, None, True, {"no": "phase"}]  # 7 kinds
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_trace(path)
    assert trace.ignored_count == 30
    assert len(trace.errors) == 11  # the 10 commonest kinds, then one line for the rest
    assert "skipped 30 malformed event(s): non-numeric" in trace.errors[0]
    assert trace.errors[-1].endswith("skipped 3 more malformed event(s) of 3 other kinds")


@pytest.mark.parametrize(
    "bad",
    ['{"ph": "i", "args": {"n": ' + "9" * 5000 + "}}", '{"args": ' + "[" * 5000 + "]" * 5000 + "}"],
    ids=["5000-digit number", "nesting 5000 deep"],
)
def test_a_value_no_json_reader_takes_keeps_the_events_before_it(tmp_path, bad: str) -> None:
    # json raised ValueError (digits) or RecursionError: every event was lost, the error vague
    good = {"ph": "X", "pid": 1, "tid": 1, "dur": 0.5, "name": "f"}
    events = [json.dumps(good | {"ts": float(i)}) for i in range(1000)]
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": [' + ",".join([*events, bad]) + "]}")
    trace = read_trace(path)
    assert trace.event_count == 1000
    assert trace.errors == [
        f"{path}: a number too long or nesting too deep for JSON readers"
        f" ({'ValueError' if '999' in bad else 'RecursionError'});"
        " kept the 1,000 complete events before it"
    ]


def test_a_pid_that_is_the_files_text_is_never_quoted(tmp_path) -> None:
    secret = "root:$6$QUOTED-FILE-BYTES" + "A" * 5000
    events = [{"ph": "E", "pid": secret, "tid": 1, "ts": 1.0}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_trace(path)
    assert trace.errors and not any("QUOTED" in error for error in trace.errors)
