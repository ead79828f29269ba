"""Shortcuts the signals take for speed, against what they stand for: agg_time_by_slowest
adds up the records' io_time (the formula inputs' clipped timer sums) instead of the raw
timers again, so on hostile timers (-1, garbage, -0.0, NaN, huge) it must equal, bit for bit,
darshan-util's accumulator computed column by column from the raw counters."""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.darshan import signals
from hpcmon.post_job.darshan.signals import LAYOUTS, MAX_TIMER_SECONDS, NA
from tests.post_job.test_darshan_signal_inputs import tables


def reference_agg_time(table, layout) -> float | NA:
    """darshan-util's accumulator on the raw columns, record by record."""
    names = (layout.read_time, layout.write_time, layout.meta_time)
    if layout.read_time is None and layout.write_time is None:
        return NA("not_available")
    timers = [table.column(name) for name in names if name is not None]
    if any(timer is None for timer in timers):
        return NA("not_available")
    shared = table.ranks < 0
    slowest = table.column(layout.slowest_rank_time) if layout.slowest_rank_time else None
    used = [value for timer in timers for value in timer.tolist()]
    if slowest is not None:
        used += slowest[shared].tolist()
    if any(value == -1 for value in used):
        return NA("not_monitored")
    if any(not 0 <= value <= MAX_TIMER_SECONDS for value in used):  # NaN fails it too
        return NA("invalid_time")
    per_record = np.zeros(len(table))
    for timer in timers:
        per_record = per_record + timer
    shared_time = float((slowest if slowest is not None else per_record)[shared].sum())
    per_rank: dict[int, float] = {}
    for rank, time in zip(table.ranks.tolist(), per_record.tolist(), strict=True):
        if rank >= 0:
            per_rank[rank] = per_rank.get(rank, 0.0) + time
    return max([0.0, *per_rank.values()]) + shared_time


def bits(value: float | NA) -> object:
    return value if isinstance(value, NA) else struct.pack("<d", value)


# timers that hold a time, one in 20 garbage (else nearly every example is NA)
TIMES = st.integers(0, 19).flatmap(
    lambda k: (
        st.sampled_from([-1.0, -222.0, math.nan, math.inf, 1e11])
        if k == 0
        else st.one_of(st.floats(0, 100), st.sampled_from([-0.0, 0.0, 5e-324, 1e10]))
    )
)


@st.composite
def ranked_tables(draw):
    """Tables in canonical order with shared (-1) records and a few ranks."""
    table = draw(tables())
    rows = len(table)
    ranks = sorted(draw(st.lists(st.integers(-1, 3), min_size=rows, max_size=rows)))
    fcounters = {
        name: np.array(draw(st.lists(TIMES, min_size=rows, max_size=rows)), dtype=np.float64)
        for name in table.fcounters
    }
    return dataclasses.replace(table, ranks=np.array(ranks, dtype=np.int64), fcounters=fcounters)


@settings(max_examples=200, deadline=None)
@given(table=ranked_tables())
def test_agg_time_by_slowest_from_io_time_equals_the_raw_timers_accumulator(table):
    layout = LAYOUTS[table.module]
    inputs = signals._Inputs(table)
    io_time = signals._record_signals(inputs, layout).io_time
    got = signals._agg_time_by_slowest(table, layout, io_time)
    assert bits(got) == bits(reference_agg_time(table, layout))


def test_the_reference_sees_a_garbage_timer() -> None:
    """The property above can fail: a -222 s timer is NA(invalid_time), a -1 NA(not_monitored)."""
    layout = LAYOUTS["STDIO"]
    read_time, write_time, meta_time = layout.read_time, layout.write_time, layout.meta_time
    assert read_time and write_time and meta_time
    names = (read_time, write_time, meta_time)
    for bad, reason in (
        (-222.0, "invalid_time"),
        (-1.0, "not_monitored"),
        (math.nan, "invalid_time"),
    ):
        table = signals.ModuleTable(
            "STDIO",
            np.arange(2, dtype=np.uint64),
            np.zeros(2, dtype=np.int64),
            {},
            {name: np.array([1.0, bad if name == layout.write_time else 2.0]) for name in names},
        )
        assert reference_agg_time(table, layout) == NA(reason)
