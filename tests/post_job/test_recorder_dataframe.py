"""RecorderDataFrame / MultiRecorderDFHandler against py_counts.json and recorder2text output."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from devtools.recorder_writer import Signature, run_length_calls, write_trace
from hpcmon.post_job.recorder import MultiRecorderDFHandler, RecorderDataFrame
from tests.post_job.test_recorder_reader import DATA, TRACES, parse_text


def py_counts(trace_dir: Path) -> dict:
    return json.loads((trace_dir / "py_counts.json").read_text())


def mt_names(trace_dir: Path) -> list[str]:
    """Function names of recorder.mt, read off the file (names start at 1024, or 40 in 2.4)."""
    data = (trace_dir / "recorder.mt").read_bytes()
    offset = 40 if (trace_dir / "VERSION").read_text().startswith("2.4") else 1024
    return data[offset:].decode().split("\n")[:-1]


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def run(request) -> tuple[Path, RecorderDataFrame]:
    return request.param, RecorderDataFrame.from_recorder(request.param)


def test_records_per_rank(run) -> None:
    trace_dir, frame = run
    expected = [len((trace_dir / "_text" / f"{r}.txt").read_text().splitlines()) for r in range(2)]
    assert frame.get_record_count_each_rank() == expected
    assert frame.get_record_count() == sum(expected)


def test_function_counts_and_times(run) -> None:
    trace_dir, frame = run
    names = mt_names(trace_dir)
    assert len(frame.get_function_count()) == len(names)
    per_rank = py_counts(trace_dir)["per_rank"]
    for rank, expected in per_rank.items():
        counts = frame.get_nonzero_function_count_each_rank()[int(rank)]
        assert {names[i]: c for i, c in counts.items()} == expected["calls"]
        full = frame.get_function_count_each_rank()[int(rank)]
        assert {names[i]: c for i, c in enumerate(full) if c} == expected["calls"]
        times = frame.get_nonzero_function_time_each_rank()[int(rank)]
        got = {names[i]: t for i, t in times.items()}
        assert got == pytest.approx(expected["time_s"], abs=1e-9)
        assert frame.get_total_function_time_each_rank()[int(rank)] == pytest.approx(
            sum(expected["time_s"].values()), abs=1e-9
        )
    totals: dict[str, int] = {}
    for expected in per_rank.values():
        for name, count in expected["calls"].items():
            totals[name] = totals.get(name, 0) + count
    assert {names[i]: c for i, c in frame.get_nonzero_function_count().items()} == totals
    assert sum(frame.get_function_time()) == pytest.approx(frame.get_total_function_time())


def test_file_accesses(run) -> None:
    trace_dir, frame = run
    per_rank = py_counts(trace_dir)["per_rank"]
    union: dict[str, int] = {}
    for rank, expected in per_rank.items():
        r = int(rank)
        assert frame.get_file_access_count_each_rank()[r] == expected["files"]
        assert frame.get_total_file_access_count_each_rank()[r] == sum(expected["files"].values())
        assert frame.get_files_each_ranks()[r] == sorted(expected["files"])
        assert frame.get_total_file_count_each_rank()[r] == len(expected["files"])
        for name, count in expected["files"].items():
            union[name] = union.get(name, 0) + count
    assert frame.get_file_access_count() == union
    assert frame.get_total_file_access_count() == sum(union.values())
    assert frame.get_files() == sorted(union)
    assert frame.get_total_file_count() == len(union)


def test_mpiio_handles_map_to_file_names() -> None:
    """MPI_File_* calls carry only the handle MPI_File_open returned; the frame names the file."""
    trace_dir = DATA / "v3.0.0/tiny_mpi_np2_ipc"
    frame = RecorderDataFrame.from_recorder(trace_dir)
    for rank in range(2):
        rows = parse_text(trace_dir / "_text" / f"{rank}.txt")
        handles = {r["args"][4]: r["args"][1] for r in rows if r["function"] == "MPI_File_open"}
        expected = sorted(
            (
                r["function"],
                handles[r["args"][0]] if r["function"] != "MPI_File_open" else r["args"][1],
            )
            for r in rows
            if r["function"].startswith("MPI_File")
        )
        df = frame.df[(frame.df["rank"] == rank) & (frame.df["func_type"] == "MPIIO")]
        assert sorted(zip(df["function_name"], df["file_name"], strict=True)) == expected
        assert len(expected) == 7
        assert set(df[df["function_name"] == "MPI_File_open"]["fd"]) == {"0-0"}


def test_rows_sorted_by_start_within_rank(run) -> None:
    _, frame = run
    for _, group in frame.df.groupby("rank"):
        assert group["tstart"].is_monotonic_increasing
    assert (frame.df["time"] == frame.df["tend"] - frame.df["tstart"]).all()


def test_filter_vectorised_and_row_wise(run) -> None:
    trace_dir, frame = run
    rank0 = frame.filter(lambda r: r["rank"] == 0)
    assert rank0.get_record_count() == frame.get_record_count_each_rank()[0]
    assert rank0.get_record_count_each_rank() == [frame.get_record_count_each_rank()[0], 0]
    mpi = frame.filter(lambda r: r.function_name.startswith("MPI"))  # row-wise only
    expected = sum(
        1
        for r in range(2)
        for row in parse_text(trace_dir / "_text" / f"{r}.txt")
        if row["function"].startswith("MPI")
    )
    assert mpi.get_record_count() == expected
    assert frame.filter(lambda r: r["rank"] == 99).get_record_count() == 0


def test_multi_run_aggregations() -> None:
    frames = [RecorderDataFrame.from_recorder(t) for t in TRACES]
    handler = MultiRecorderDFHandler(frames)
    logs = [str(t) for t in TRACES]
    lines = {
        str(t): [len((t / "_text" / f"{r}.txt").read_text().splitlines()) for r in range(2)]
        for t in TRACES
    }

    by_logs = handler.get_record_count_aggregated_by_logs()
    assert list(by_logs.index) == logs
    assert by_logs.astype(int).values.tolist() == [lines[log] for log in logs]
    assert handler.get_record_count_aggregated_by_ranks().equals(by_logs.T)
    assert handler.get_average_record_count_each_rank() == pytest.approx(
        [sum(lines[log][r] for log in logs) / len(logs) for r in range(2)]
    )

    files = handler.get_file_count_aggregated_by_logs()
    assert files.astype(int).values.tolist() == [
        [len(py_counts(t)["per_rank"][str(r)]["files"]) for r in range(2)] for t in TRACES
    ]
    assert handler.get_file_count_aggregated_by_ranks().equals(files.T)

    nonzero = handler.get_nonzero_function_count_aggregated_by_functions()
    expected_names = set()
    for t in TRACES:
        for per_rank in py_counts(t)["per_rank"].values():
            expected_names |= set(per_rank["calls"])
    assert set(nonzero.index) == expected_names
    for t in TRACES:
        for name in expected_names:
            want = sum(p["calls"].get(name, 0) for p in py_counts(t)["per_rank"].values())
            assert nonzero.loc[name, str(t)] == want
    assert handler.get_nonzero_function_count_aggregated_by_logs().equals(nonzero.T)

    all_counts = handler.get_function_count_aggregated_by_logs()
    all_names = set()
    for t in TRACES:
        all_names |= set(mt_names(t))
    assert set(all_counts.columns) == all_names
    assert all_counts.sum(axis=1).tolist() == [sum(lines[log]) for log in logs]
    assert handler.get_function_count_aggregated_by_functions().equals(all_counts.T)

    times = handler.get_nonzero_function_time_aggregated_by_functions()
    for t in TRACES:
        want = sum(sum(p["time_s"].values()) for p in py_counts(t)["per_rank"].values())
        column = times[str(t)]
        assert isinstance(column, pd.Series)
        assert column.sum() == pytest.approx(want, abs=1e-9)
    assert handler.get_nonzero_function_time_aggregated_by_logs().equals(times.T)
    full_times = handler.get_function_time_aggregated_by_logs()
    assert full_times.shape == all_counts.shape
    assert handler.get_function_time_aggregated_by_functions().equals(full_times.T)


def test_filter_of_empty_frame_keeps_columns() -> None:
    frame = RecorderDataFrame.from_recorder(TRACES[0])
    empty = frame.filter(lambda r: r["rank"] == 99)
    again = empty.filter(lambda r: r.function_name.startswith("MPI"))
    assert list(again.df.columns) == list(frame.df.columns)
    assert again.get_record_count_each_rank() == [0, 0]
    assert again.get_file_access_count() == {} and again.get_total_function_time() == 0.0


def test_file_argument_per_function(tmp_path: Path) -> None:
    """Which argument names the file, per POSIX function (Recorder resolved fds to paths)."""
    calls = [
        (Signature("write", ("1", "%p", "5")), "stdout"),
        (Signature("__xstat", ("1", "/data/in.h5", "%p")), "/data/in.h5"),
        (Signature("fwrite", ("%p", "1", "100", "/data/log.txt")), "/data/log.txt"),
        (Signature("mmap", ("%p", "4096", "1", "1", "/data/map.bin", "0")), "/data/map.bin"),
        (Signature("getcwd", ("%p", "4097")), None),
        (Signature("read", ("7", "%p", "5")), None),  # unresolved fd, no open seen
        (Signature("MPI_Barrier", ("MPI_COMM_WORLD",)), None),
    ]
    names = sorted({sig.function for sig, _ in calls})
    n = len(calls)
    write_trace(
        tmp_path,
        "3.0",
        names,
        [sig for sig, _ in calls],
        [run_length_calls(range(n), range(0, 10 * n, 10), range(5, 10 * n + 5, 10))],
    )
    frame = RecorderDataFrame.from_recorder(tmp_path)
    got = [None if name is None or name != name else name for name in frame.df["file_name"]]
    assert got == [expected for _, expected in calls]
    assert frame.get_file_access_count() == {
        "stdout": 1,
        "/data/in.h5": 1,
        "/data/log.txt": 1,
        "/data/map.bin": 1,
    }
