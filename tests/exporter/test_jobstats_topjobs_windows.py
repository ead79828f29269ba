"""--jobstats.top-jobs over any window, as Prometheus sees it: increase() summed over the job
series and ``other`` between any two samples is what all the jobs did, and no series goes down
unless Lustre restarted or dropped the job.

Prometheus is modelled as it reads a counter: the samples of a series inside the window, in
order (a sample where the series is absent is skipped, so a gap is joined), each step counting
its difference, or the new value when the value went down (a reset)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.limits import OTHER, TopJobs
from hpcmon.exporter.jobstats.parser import JobEntry, OpStats

KEY = ("ost", "fs-OST0000")
OPS = {"read_bytes": "bytes", "write_bytes": "bytes", "open": "usecs"}
MIB = 1 << 20

Ops = dict[str, tuple[int, int]]  # operation -> (samples, sum)
Sample = dict[str, tuple[float | None, Ops]]  # jobid -> (start_time, ops)
Series = dict[tuple[str, str, int], list[tuple[int, int]]]  # (jobid, op, field) -> (sample, value)


def entries(sample: Sample) -> list[JobEntry]:
    return [
        JobEntry(
            jobid,
            None,
            start,
            None,
            {name: OpStats(s, OPS[name], 0, 0, total, None) for name, (s, total) in ops.items()},
        )
        for jobid, (start, ops) in sample.items()
    ]


def expose(samples: list[Sample], keep: int) -> tuple[TopJobs, Series]:
    """Every exposed counter of every sample, per series."""
    top = TopJobs(keep)
    series: Series = {}
    for number, sample in enumerate(samples):
        jobs, _ = top.fold(KEY, entries(sample), None)
        assert len({job.jobid for job in jobs}) == len(jobs)
        for job in jobs:
            for name, op in job.ops.items():
                for field, value in enumerate((op.samples, op.sum)):
                    series.setdefault((job.jobid, name, field), []).append((number, value))
    return top, series


def increase(points: list[tuple[int, int]], first: int, last: int) -> int:
    """Prometheus' increase() of one series between samples ``first`` and ``last``."""
    values = [value for number, value in points if first <= number <= last]
    return sum(b - a if b >= a else b for a, b in zip(values, values[1:], strict=False))


def moved(before: Sample, now: Sample, name: str, field: int) -> int:
    """What every listed job did between two samples (a new or restarted entry: its whole
    value; a counter that went down was reset: its new value)."""
    total = 0
    for jobid, (start, ops) in now.items():
        value = ops[name][field]
        old = before.get(jobid)
        if old is None or old[0] != start or old[1][name][field] > value:
            total += value
        else:
            total += value - old[1][name][field]
    return total


def restarted(samples: list[Sample], jobid: str, name: str, field: int, a: int, b: int) -> bool:
    """Whether Lustre restarted or dropped the job between samples a and b."""
    for number in range(a + 1, b + 1):
        old, now = samples[number - 1].get(jobid), samples[number].get(jobid)
        if old is None or now is None or old[0] != now[0]:
            return True
        if now[1][name][field] < old[1][name][field]:
            return True
    return False


def check_windows(samples: list[Sample], series: Series) -> None:
    """From the first sample that lists a job (the one where every series starts, so
    increase() cannot see its values), every window sees exactly what the jobs did."""
    listed = [number for number, sample in enumerate(samples) if sample]
    start = listed[0] if listed else len(samples)
    for name in OPS:
        for field in (0, 1):
            for first in range(len(samples)):
                true = 0
                for last in range(first + 1, len(samples)):
                    if last > start:
                        true += moved(samples[last - 1], samples[last], name, field)
                    seen = sum(
                        increase(points, first, last)
                        for (_, op, f), points in series.items()
                        if (op, f) == (name, field)
                    )
                    assert seen == true, (name, field, first, last)


def test_a_job_back_in_the_top_n_is_not_counted_twice() -> None:
    """The reviewer's case, top 1, MiB written: A 100 -> 150 -> 250, B 0 -> 1000 -> 1000.
    A's series resumed from 100 to 250 while ``other`` had counted A's 50 and then A's 100:
    increase() summed 1300 MiB over s1..s3 for 1150 moved."""
    history = [(100, 0), (150, 1000), (250, 1000)]

    def ops(calls: int, mib: int) -> Ops:
        return {name: (calls, mib * MIB) if name == "write_bytes" else (0, 0) for name in OPS}

    samples: list[Sample] = [
        {"A": (1.0, ops(number + 1, a)), "B": (1.0, ops(5 * bool(b), b))}
        for number, (a, b) in enumerate(history)
    ]
    _, series = expose(samples, 1)
    shown = [
        {jobid for (jobid, _, _), points in series.items() if any(n == k for n, _ in points)}
        for k in range(3)
    ]
    assert shown == [{"A", OTHER}, {"B", OTHER}, {"A", OTHER}]
    written = {jobid: increase(points, 0, 2) for (jobid, op, f), points in series.items()
               if (op, f) == ("write_bytes", 1)}  # fmt: skip
    assert sum(written.values()) == 1150 * MIB
    check_windows(samples, series)


@st.composite
def histories(draw) -> list[Sample]:
    """Samples of one target, every job listing every operation as Lustre does: jobs appear,
    grow or stay idle, are dropped (job_cleanup_interval) and come back as new entries,
    restart with a new start_time, or, without start_time, restart from lower values."""
    names = st.sampled_from(["a", "b", "c", "d", "e", OTHER])
    jobids = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    times = draw(st.booleans())
    samples: list[Sample] = []
    state: Sample = {}
    for number in range(draw(st.integers(1, 7))):
        for jobid in jobids:
            event = draw(st.integers(0, 9))
            old = state.get(jobid)
            if event == 0:
                state.pop(jobid, None)  # not listed; back later from 0
                continue
            start = float(number) if times else None
            if old is None or (event == 1 and times):
                base = {name: (0, 0) for name in OPS}  # new entry, or restart: a new start_time
            elif event == 2:  # restart seen only as lower counters
                base = {
                    name: (draw(st.integers(0, s)), draw(st.integers(0, total)))
                    for name, (s, total) in old[1].items()
                }
                start = old[0]
            else:
                base, start = old[1], old[0]
            ops = {}
            for name, (s, total) in base.items():
                calls = draw(st.integers(0, 3)) * (event != 3)  # 3: idle
                ops[name] = (s + calls, total + calls * draw(st.integers(0, 4096)))
            state[jobid] = (start, ops)
        samples.append(dict(state))
    return samples


@given(histories(), st.integers(1, 3))
def test_every_window_sums_to_what_the_jobs_did(samples: list[Sample], keep: int) -> None:
    _, series = expose(samples, keep)
    check_windows(samples, series)


@given(histories(), st.integers(1, 3))
def test_no_series_goes_down_unless_lustre_restarted_the_job(
    samples: list[Sample], keep: int
) -> None:
    _, series = expose(samples, keep)
    for (jobid, name, field), points in series.items():
        for (a, before), (b, after) in zip(points, points[1:], strict=False):
            if after < before:
                assert jobid != OTHER
                assert restarted(samples, jobid, name, field, a, b), (jobid, name, field, a, b)


def test_a_job_restarting_while_out_resumes_its_own_series() -> None:
    """B restarts (new start_time, lower counters) while A holds the top 1; when B is back on
    top its own series goes on from where it stopped, ``other`` having counted the rest."""
    ops = lambda n: {name: (n, n) for name in OPS}  # noqa: E731
    samples: list[Sample] = [
        {"A": (1.0, ops(0)), "B": (1.0, ops(500))},
        {"A": (1.0, ops(100)), "B": (1.0, ops(510))},
        {"A": (1.0, ops(300)), "B": (2.0, ops(40))},
        {"A": (1.0, ops(300)), "B": (2.0, ops(90))},
    ]
    _, series = expose(samples, 1)
    assert series[("B", "write_bytes", 1)] == [(0, 500), (3, 500)]
    check_windows(samples, series)


@given(histories(), st.integers(1, 3))
def test_what_is_kept_follows_the_listing(samples: list[Sample], keep: int) -> None:
    """Memory: after each sample, only the jobs Lustre lists now are remembered."""
    top = TopJobs(keep)
    for sample in samples:
        top.fold(KEY, entries(sample), None)
        assert set(top._targets[KEY].jobs) == set(sample)
