"""Recorder reader against the real traces and the official tools' text output beside them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.recorder_writer import RankCalls, Signature, run_length_calls, write_trace
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.recorder.reader import read_recorder_trace

DATA = Path(__file__).parents[1] / "data" / "recorder"
TRACES = sorted(p for p in DATA.glob("v*/*") if p.is_dir())
# recorder2text's 5th column: Recorder's func type enum (tools/reader.h: POSIX, MPIIO, MPI, ...)
TEXT_TYPES = {0: "POSIX", 1: "MPIIO", 2: "MPI", 3: "HDF5", 4: "PNETCDF", 5: "NETCDF"}
LINE = re.compile(r"^(\S+) (\S+) (\S+) (\d+)(?: (\d+))? \( ?(.*?) ?\)$")


def parse_text(path: Path) -> list[dict]:
    """recorder2text / prototype lines: tstart tend func depth [type] ( args )."""
    rows = []
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        assert match, f"unparsed line in {path}: {line!r}"
        tstart, tend, func, depth, ftype, args = match.groups()
        rows.append(
            {
                "tstart": float(tstart),
                "tend": float(tend),
                "function": func,
                "depth": int(depth),
                "type": None if ftype is None else int(ftype),
                "args": tuple(args.split(" ")) if args else (),
            }
        )
    return rows


def ticks(seconds: float) -> int:
    return round(seconds * 1e7)


@pytest.mark.parametrize("trace_dir", TRACES, ids=lambda p: p.name)
def test_calls_match_official_text(trace_dir: Path) -> None:
    trace = read_recorder_trace(trace_dir)
    assert trace.errors == []
    assert [r.rank for r in trace.ranks] == list(range(trace.metadata.total_ranks))
    for rank in trace.ranks:
        expected = parse_text(trace_dir / "_text" / f"{rank.rank}.txt")
        got = list(trace.records(rank.rank))
        assert len(got) == len(expected)
        for record, row in zip(got, expected, strict=True):
            assert (record.function, record.args, record.call_depth) == (
                row["function"],
                row["args"],
                row["depth"],
            )
            assert record.func_type == TEXT_TYPES[row["type"]]


@pytest.mark.parametrize("trace_dir", TRACES, ids=lambda p: p.name)
def test_timestamps_match_correct_decoder(trace_dir: Path) -> None:
    """The prototype's times are right for every trace (to the 1e-7 s tick)."""
    trace = read_recorder_trace(trace_dir)
    for rank in trace.ranks:
        expected = parse_text(trace_dir / "_py_text" / f"{rank.rank}.txt")
        assert [ticks(t) for t in rank.tstart] == [ticks(r["tstart"]) for r in expected]
        assert [ticks(t) for t in rank.tend] == [ticks(r["tend"]) for r in expected]


@pytest.mark.parametrize("name", ["v3.0.0/tiny_loop_np2_mpitracing", "v2.4.0/tiny_loop_np2"])
def test_loop_iterations_are_at_least_the_sleep_apart(name: str) -> None:
    """tiny_loop.c sleeps 100 us per iteration: consecutive writes start >= 100 us apart
    (the official 3.0 reader puts them ~47 us apart after the repeated rule)."""
    trace = read_recorder_trace(DATA / name)
    for rank in trace.ranks:
        records = list(trace.records(rank.rank))
        writes = [r.tstart for r in records if r.function == "write"]
        assert len(writes) == 50
        gaps = np.diff(writes)
        assert gaps.min() >= 100e-6
        assert np.median(gaps) < 1e-3
        assert all(r.tend >= r.tstart for r in records)
        assert all(b.tstart >= a.tstart for a, b in zip(records, records[1:], strict=False))


def test_official_3_0_reader_is_wrong_on_the_loop_trace() -> None:
    """Guards the premise of the test above: recorder2text's write gaps are < 100 us."""
    rows = parse_text(DATA / "v3.0.0/tiny_loop_np2_mpitracing/_text/0.txt")
    starts = [r["tstart"] for r in rows if r["function"] == "write"]
    assert min(np.diff(starts)) < 100e-6


@pytest.mark.parametrize(
    "trace_dir", [p for p in TRACES if p.parts[-2] == "v3.0.0"], ids=lambda p: p.name
)
def test_metadata_matches_summary(trace_dir: Path) -> None:
    meta = read_recorder_trace(trace_dir).metadata
    summary = (trace_dir / "summary.txt").read_text()

    def said(label: str) -> str:
        found = re.search(rf"{label}: (\w+)", summary)
        assert found is not None, label
        return found.group(1)

    assert meta.total_ranks == int(said("Total processes"))
    store_tid = said("Store thread id") == "True"
    assert meta.store_tid == store_tid
    ipc = said("Interprocess compression") == "True"
    assert meta.interprocess_compression == ipc
    counts = json.loads((trace_dir / "py_counts.json").read_text())
    assert meta.start_ts == pytest.approx(counts["start_ts_epoch"], abs=1e-6)
    assert meta.time_resolution == pytest.approx(1e-7)
    assert meta.version == (trace_dir / "VERSION").read_text().strip()


@pytest.mark.parametrize(
    "trace_dir", [p for p in TRACES if p.parts[-2] == "v3.0.0"], ids=lambda p: p.name
)
def test_total_call_counts_match_summary(trace_dir: Path) -> None:
    """recorder-summary sums the call-signature table: all ranks when it is merged
    (interprocess compression), rank 0's own table otherwise."""
    trace = read_recorder_trace(trace_dir)
    totals: dict[str, int] = {}
    summed = trace.ranks if trace.metadata.interprocess_compression else trace.ranks[:1]
    for rank in summed:
        for name, count in trace.function_counts(rank).items():
            totals[name] = totals.get(name, 0) + count
    table = (trace_dir / "summary.txt").read_text().split("Total Call Count")[1]
    expected = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+\d+\s+(\d+)$", table, re.M)
    }
    assert totals == expected


def test_thread_ids_are_kept_when_stored() -> None:
    trace = read_recorder_trace(DATA / "v3.0.0/tiny_mpi_np2_noipc_tid")
    assert trace.metadata.store_tid
    tids = {r.thread_id for r in trace.records()}
    assert 0 not in tids and len(tids) >= 2  # one main thread per rank (two processes)
    assert {r.thread_id for r in read_recorder_trace(TRACES[1]).records()} == {0}


# --- unsupported versions and broken directories


def copy_trace(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for path in dst.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def test_recorder_2_2_itf_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "0.itf").write_bytes(b"\x00" * 32)
    (tmp_path / "0.mt").write_bytes(b"\x00" * 32)
    (tmp_path / "recorder.mt").write_bytes(b"\x00" * 32)
    with pytest.raises(SourceError, match=r"\.itf.*2\.2.*not supported"):
        read_recorder_trace(tmp_path)


def test_post_3_0_single_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "recorder.dat").write_bytes(b"RECORDER" + b"\x00" * 16)
    with pytest.raises(SourceError, match="recorder.dat.*not supported"):
        read_recorder_trace(tmp_path)


@pytest.mark.parametrize("version", ["2.3.3", "3.1.0", "2.2.1", "4.0"])
def test_other_versions_are_clear_errors(tmp_path: Path, version: str) -> None:
    trace = copy_trace(TRACES[1], tmp_path / "t")
    (trace / "VERSION").write_text(version)
    with pytest.raises(SourceError, match=f"version {re.escape(version)} is not supported"):
        read_recorder_trace(trace)


def test_garbage_version_and_missing_dir(tmp_path: Path) -> None:
    trace = copy_trace(TRACES[1], tmp_path / "t")
    (trace / "VERSION").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(SourceError, match="VERSION"):
        read_recorder_trace(trace)
    with pytest.raises(SourceError, match="not a Recorder trace directory"):
        read_recorder_trace(tmp_path / "missing")


def test_one_broken_rank_keeps_the_others(tmp_path: Path) -> None:
    trace = copy_trace(DATA / "v3.0.0/tiny_mpi_np2_noipc_tid", tmp_path / "t")
    (trace / "1.cfg").write_bytes(b"\x10\x00\x00")
    result = read_recorder_trace(trace)
    assert [r.rank for r in result.ranks] == [0]
    assert len(result.ranks[0].terminals) == 52
    assert any("1.cfg" in e for e in result.errors)


def test_truncated_timestamps_keep_counts(tmp_path: Path) -> None:
    trace = copy_trace(DATA / "v2.4.0/tiny_loop_np2", tmp_path / "t")
    data = (trace / "0.ts").read_bytes()
    (trace / "0.ts").write_bytes(data[: 8 * 10 + 3])
    result = read_recorder_trace(trace)
    rank0 = result.ranks[0]
    assert len(rank0.terminals) == 105
    assert np.isfinite(rank0.tstart[:10]).all() and np.isnan(rank0.tstart[10:]).all()
    assert any("rank 0 has 10 timestamp pairs for 105 calls" in e for e in result.errors)


# --- round trip through the writer (2.4, 2.5, 3.0; nested, repeated rules)

signature_strategy = st.builds(
    Signature,
    function=st.sampled_from(["open", "write", "read", "close", "MPI_Barrier", "H5Fopen"]),
    args=st.lists(st.text("abc/._-0123456789", min_size=1, max_size=12), max_size=4).map(tuple),
    call_depth=st.integers(0, 3),
    thread_id=st.integers(0, 2**64 - 1),
)


@st.composite
def traces(draw):
    signatures = draw(st.lists(signature_strategy, min_size=1, max_size=6))
    n_sig = len(signatures)
    ranks = []
    for _ in range(draw(st.integers(1, 3))):
        body = draw(
            st.lists(
                st.tuples(st.integers(0, n_sig - 1), st.integers(1, 4)), min_size=1, max_size=4
            )
        )
        start = draw(st.lists(st.tuples(st.integers(0, n_sig - 1), st.integers(1, 3)), max_size=4))
        loop = draw(st.integers(0, 5))
        grammar = {-2: body, -1: [*start, (-2, loop)] if loop else [*start, *body]}
        sequence = [s for s, n in start for _ in range(n)]
        sequence += [s for s, n in body for _ in range(n)] * (loop or 1)
        gaps = draw(st.lists(st.integers(0, 10**6), min_size=len(sequence), max_size=len(sequence)))
        durations = draw(
            st.lists(st.integers(0, 10**6), min_size=len(sequence), max_size=len(sequence))
        )
        tstart = np.cumsum(gaps)
        ranks.append((sequence, RankCalls(grammar, tstart, tstart + np.asarray(durations))))
    layout = draw(st.sampled_from(["2.4", "2.5", "3.0"]))
    return layout, signatures, ranks, draw(st.booleans()), draw(st.booleans())


NAMES = ["open", "write", "read", "close", "MPI_Barrier", "H5Fopen"]


@settings(max_examples=40, deadline=None)
@given(traces())
def test_writer_round_trip(tmp_path_factory, case) -> None:
    layout, signatures, ranks, ipc, ts_zlib = case
    path = tmp_path_factory.mktemp("rt")
    write_trace(
        path,
        layout,
        NAMES,
        signatures,
        [calls for _, calls in ranks],
        interprocess_compression=ipc,
        ts_compression=ts_zlib,
        ts_block_words=6,
    )
    trace = read_recorder_trace(path)
    assert trace.errors == []
    assert len(trace.ranks) == len(ranks)
    for rank, (sequence, calls) in zip(trace.ranks, ranks, strict=True):
        records = list(trace.records(rank.rank))
        expected = [signatures[i] for i in sequence]
        assert [(r.function, r.args, r.call_depth, r.thread_id) for r in records] == [
            (s.function, s.args, s.call_depth, s.thread_id) for s in expected
        ]
        assert [ticks(r.tstart) for r in records] == calls.tstart_ticks.tolist()
        assert [ticks(r.tend) for r in records] == calls.tend_ticks.tolist()


def test_run_length_grammar_counts(tmp_path: Path) -> None:
    sigs = [Signature("write", ("f", "%p", "8")), Signature("lseek", ("f", "0", "0"))]
    sequence = [0] * 7 + [1] * 3 + [0]
    calls = run_length_calls(sequence, range(0, 110, 10), range(5, 115, 10))
    assert calls.grammar == {-1: [(0, 7), (1, 3), (0, 1)]}
    trace = read_recorder_trace(write_trace(tmp_path, "3.0", ["write", "lseek"], sigs, [calls]))
    assert trace.function_counts(trace.ranks[0]) == {"write": 8, "lseek": 3}


def test_more_ranks_announced_than_present(tmp_path: Path) -> None:
    trace = copy_trace(DATA / "v2.4.0/tiny_loop_np2", tmp_path / "t")
    data = bytearray((trace / "recorder.mt").read_bytes())
    data[0:4] = (1000).to_bytes(4, "little")
    (trace / "recorder.mt").write_bytes(bytes(data))
    result = read_recorder_trace(trace)
    assert [len(r.terminals) for r in result.ranks] == [105, 105]
    assert any("998 of 1000 ranks have no .cst file (first: 2, 3, 4" in e for e in result.errors)
    data[0:4] = (2**31 - 1).to_bytes(4, "little")
    (trace / "recorder.mt").write_bytes(bytes(data))
    with pytest.raises(SourceError, match="recorder.mt: implausible rank count"):
        read_recorder_trace(trace)


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        ({-1: [(0, 1), (-2, 1)], -2: [(-1, 1)]}, "cycle|refers to itself"),
        ({-1: [(-2, 2**31 - 1)], -2: [(0, 2**31 - 1)]}, "expands to more than"),
        ({-1: [(0, 1), (-5, 1)]}, "missing rule -5"),
    ],
)
def test_hostile_grammars_are_rank_errors(tmp_path: Path, grammar, message) -> None:
    empty = np.zeros(0, dtype=np.int64)
    good = run_length_calls([0, 0], [1, 2], [1, 3])
    write_trace(
        tmp_path,
        "3.0",
        ["write"],
        [Signature("write")],
        [good, RankCalls(grammar, empty, empty)],
        interprocess_compression=False,
    )
    result = read_recorder_trace(tmp_path)
    assert [r.rank for r in result.ranks] == [0]
    assert any(re.search(message, e) and "1.cfg" in e for e in result.errors), result.errors
