"""RecorderDataFrame -> InfluxDB points (knows nothing of the binary format).

Every point is stamped with the trace's own start time (``recorder.mt`` start_ts, the start
of rank 0's logger), so re-ingesting a job writes identical points. The ``trace`` tag (trace
directory name) keeps two traces of one job (e.g. two job steps) apart.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import pandas as pd

from hpcmon.common.timeutil import seconds_to_ns
from hpcmon.post_job.points import Point
from hpcmon.post_job.recorder.dataframe import RecorderDataFrame
from hpcmon.post_job.recorder.model import function_type


def trace_points(
    frame: RecorderDataFrame,
    base_tags: dict[str, str],
    trace: str,
    *,
    top_files: int = 50,
    per_rank_functions: bool = False,
) -> list[Point]:
    time_ns = seconds_to_ns(frame.start_ts)
    tags = {**base_tags, "trace": trace}
    untimed = _Untimed(frame)
    points = [_summary_point(frame, tags, time_ns, untimed)]
    points += _function_points(frame, tags, time_ns, untimed)
    points += _rank_points(frame, tags, time_ns, untimed)
    points += _file_points(frame, tags, time_ns, top_files)
    if per_rank_functions:
        points += _rank_function_points(frame, tags, time_ns, untimed)
    return points


class _Untimed:
    """The calls without timestamps (a recorder.ts truncated or missing: the trace's problem
    lines say so). A time field that would sum any of them is NaN, which leaves it out of the
    points, rather than a smaller figure (0 for a rank without times) that looks complete."""

    def __init__(self, frame: RecorderDataFrame) -> None:
        calls = frame.df.loc[frame.df["time"].isna(), ["rank", "function_id"]]
        names = frame.function_names
        self.any = not calls.empty
        self.ranks = set(calls["rank"].tolist())
        pairs = zip(calls["rank"].tolist(), calls["function_id"].tolist(), strict=True)
        self.rank_functions = {(rank, names[func_id]) for rank, func_id in pairs}
        self.functions = {name for _, name in self.rank_functions}

    @staticmethod
    def unless(partial: bool, seconds: float) -> float:
        return math.nan if partial else seconds


def _summary_point(
    frame: RecorderDataFrame, tags: dict[str, str], time_ns: int, untimed: _Untimed
) -> Point:
    fields: dict[str, float | int | str] = {
        "ranks": frame.total_ranks,
        "records": frame.get_record_count(),
        "files": frame.get_total_file_count(),
        "file_accesses": frame.get_total_file_access_count(),
        "function_time_seconds": untimed.unless(untimed.any, frame.get_total_function_time()),
        "problems": len(frame.errors),
    }
    if len(frame.df):
        tend = frame.df["tend"]
        assert isinstance(tend, pd.Series)  # a column's name gives the column
        fields["duration_seconds"] = float(tend.max())
    return Point("recorder_trace", dict(tags), fields, time_ns)


def _by_name(values: Mapping[int, float], names: tuple[str, ...]) -> dict[str, float]:
    """Function id -> value becomes name -> value (a name may occur under two ids)."""
    out: dict[str, float] = {}
    for func_id, value in values.items():
        out[names[func_id]] = out.get(names[func_id], 0) + value
    return out


def _function_points(
    frame: RecorderDataFrame, tags: dict[str, str], time_ns: int, untimed: _Untimed
) -> list[Point]:
    names = frame.function_names
    counts = _by_name(frame.get_nonzero_function_count(), names)
    times = _by_name(frame.get_nonzero_function_time(), names)
    pairs = frame.rank_function_summary()
    calls = zip(pairs["rank"].tolist(), pairs["function_id"].tolist(), strict=True)
    ranks_calling = Counter(name for _rank, name in {(r, names[f]) for r, f in calls})
    return [
        Point(
            "recorder_function",
            {**tags, "function": name},
            {
                "count": int(count),
                "total_time_seconds": untimed.unless(
                    name in untimed.functions, float(times.get(name, 0.0))
                ),
                "ranks": ranks_calling[name],
                "layer": function_type(name),
            },
            time_ns,
        )
        for name, count in sorted(counts.items())
    ]


def _rank_points(
    frame: RecorderDataFrame, tags: dict[str, str], time_ns: int, untimed: _Untimed
) -> list[Point]:
    """One point per rank that was read; a rank that could not be read has none (its zeros
    would look like an idle rank) and is counted in the trace's problem lines instead."""
    summary = frame.rank_summary()
    return [
        Point(
            "recorder_rank",
            {**tags, "rank": str(rank)},
            {
                "records": records,
                "files": files,
                "file_accesses": accesses,
                "function_time_seconds": untimed.unless(rank in untimed.ranks, seconds),
            },
            time_ns,
        )
        for rank, records, files, accesses, seconds in zip(
            summary.index.tolist(),
            summary["records"].tolist(),
            summary["files"].tolist(),
            summary["file_accesses"].tolist(),
            summary["function_time_seconds"].tolist(),
            strict=True,
        )
    ]


def _file_points(
    frame: RecorderDataFrame, tags: dict[str, str], time_ns: int, top_files: int
) -> list[Point]:
    """The ``top_files`` files with most POSIX calls (ties by name, for stable output)."""
    accesses = frame.file_accesses()
    if accesses.empty or top_files <= 0:
        return []
    per_file = accesses.groupby("file_name").agg(
        accesses=("rank", "size"), ranks=("rank", "nunique"), time=("time", "sum")
    )
    per_file["time"] = per_file["time"].mask(
        accesses["time"].isna().groupby(accesses["file_name"]).any()
    )  # a file with calls without timestamps: left out, as in _Untimed
    per_file = per_file.reset_index().sort_values(
        ["accesses", "file_name"], ascending=[False, True]
    )  # columns: file_name (the index put back first), then the aggregates in their order
    return [
        Point(
            "recorder_file",
            {**tags, "file": str(file_name)},
            {
                "accesses": int(calls),
                "ranks": int(ranks),
                "time_seconds": float(seconds),
            },
            time_ns,
        )
        for file_name, calls, ranks, seconds in per_file.head(top_files).itertuples(index=False)
    ]


def _rank_function_points(
    frame: RecorderDataFrame, tags: dict[str, str], time_ns: int, untimed: _Untimed
) -> list[Point]:
    names = frame.function_names
    pairs = frame.rank_function_summary()
    counts: dict[int, dict[int, int]] = {}
    times: dict[int, dict[int, float]] = {}
    for rank, func_id, count, seconds in pairs.itertuples(index=False):
        counts.setdefault(rank, {})[func_id] = count
        times.setdefault(rank, {})[func_id] = seconds
    points = []
    for rank in sorted(counts):
        rank_counts = _by_name(counts[rank], names)
        rank_times = _by_name(times[rank], names)
        for name, count in sorted(rank_counts.items()):
            points.append(
                Point(
                    "recorder_rank_function",
                    {**tags, "rank": str(rank), "function": name},
                    {
                        "count": int(count),
                        "total_time_seconds": untimed.unless(
                            (rank, name) in untimed.rank_functions,
                            float(rank_times.get(name, 0.0)),
                        ),
                    },
                    time_ns,
                )
            )
    return points
