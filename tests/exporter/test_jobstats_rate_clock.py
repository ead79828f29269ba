"""The clock of live rates is the time of each read, never ``snapshot_time``.

Lustre sets an entry's ``snapshot_time`` to its last update (the 2.12.5 capture below lists 338
different ones spread over ten minutes in one read), so a job idle for minutes before a burst
would have its burst spread over the idle time as well. The methods spec: "We discard these
values and use a timestamp of when we queried the data instead."
"""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.parser import JobEntry, OpStats, iter_text
from hpcmon.exporter.jobstats.rates import MIN_STEP, RateTracker
from tests.exporter.test_jobstats_collector import make_collector, samples_of, value

CAPTURE = (
    Path(__file__).parents[1]
    / "data"
    / "jobstats"
    / (
        "HewlettPackard_lustre_exporter__pr149__tests_oss_bigdata_proc_fs_lustre_obdfilter_"
        "public1-OST0005_job_stats__lustre2.12.5.txt"
    )
)
KEY = ("ost", "public1-OST0005")
GIB = 1 << 30
NEWEST_SNAPSHOT = 1652255688  # the latest snapshot_time in the capture


def record_302300(snapshot: int, writes: int, written: int) -> str:
    """Job 302300's record in the capture, with its snapshot_time and write_bytes as given
    (the capture has 1652255390, 183 and 21725732: idle for 298 s at the newest entry)."""
    return (
        "- job_id:          302300\n"
        f"  snapshot_time:   {snapshot}\n"
        "  read_bytes:      { samples:           1, unit: bytes, min:    4096, max:    4096,"
        " sum:            4096 }\n"
        f"  write_bytes:     {{ samples: {writes:>11}, unit: bytes, min:      63, max:  829902,"
        f" sum: {written:>15} }}\n"
        "  getattr:         { samples:           0, unit:  reqs }\n"
    )


def with_burst(text: str, snapshot: int, more_bytes: int, more_writes: int) -> str:
    """The capture with job 302300 having written ``more_bytes`` more, updated at ``snapshot``."""
    idle = record_302300(1652255390, 183, 21725732)
    assert text.count(idle) == 1  # the template is the capture's own text
    burst = record_302300(snapshot, 183 + more_writes, 21725732 + more_bytes)
    return text.replace(idle, burst)


def read(tracker: RateTracker, text: str, clock: float) -> dict[str, dict[str, float]]:
    """One read of the procfs file at wall clock ``clock``: jobid -> {counter: rate}."""
    errors: list[str] = []
    (target,) = iter_text(text, str(CAPTURE), errors, *KEY)
    assert not errors and not target.malformed
    rates = tracker.update(KEY, target.jobs, clock)
    return {
        jobid: dict(zip(names, values, strict=True)) for jobid, (names, values) in rates.items()
    }


def test_idle_then_burst_is_rated_over_the_read_interval() -> None:
    capture = CAPTURE.read_text()
    tracker = RateTracker()
    clock = NEWEST_SNAPSHOT + 2.0
    assert read(tracker, capture, clock) == {}  # 2.12 has no start_time: no first rate
    # 809 jobs, each with its own snapshot_time, none of which moves: all rates 0.
    idle = read(tracker, capture, clock + 10)
    assert len(idle) == 809
    assert {rate for rates in idle.values() for rate in rates.values()} == {0.0}
    # 1 GiB within the next 10 s by a job idle for five minutes: Lustre stamps its entry with
    # the time of its last write, 309 s after the previous stamp.
    burst = read(tracker, with_burst(capture, NEWEST_SNAPSHOT + 11, GIB, 256), clock + 20)
    assert burst["302300"]["write_bytes"] == GIB / 10  # not GIB / 309
    assert all(
        rate == 0.0
        for jobid, rates in burst.items()
        if jobid != "302300"
        for rate in rates.values()
    )


def test_idle_then_burst_through_the_collector(tmp_path: Path) -> None:
    """The same burst through the file source and the collector's own clock (time.time())."""
    path = tmp_path / "job_stats"
    param = "obdfilter.public1-OST0005.job_stats=\n"
    capture = CAPTURE.read_text()
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(path))
    path.write_text(param + capture)
    first = time.time()
    collector.sample()
    first_done = time.time()
    time.sleep(0.02)
    now = int(time.time())
    path.write_text(param + with_burst(capture, now, GIB, 256))
    second = time.time()
    found = samples_of(collector.sample())
    second_done = time.time()
    job = {"component": "ost", "target": "public1-OST0005", "jobid": "302300"}
    rate = value(found, "lustre_job_write_bytes_per_second", **job)
    assert rate is not None
    # The reads were between ``second - first_done`` and ``second_done - first`` apart.
    assert GIB / (second_done - first) <= rate <= GIB / (second - first_done)
    other = {**job, "jobid": "1731810"}
    assert value(found, "lustre_job_write_bytes_per_second", **other) == 0.0


def test_a_wall_clock_set_back_is_not_a_time_step() -> None:
    """A read stamped before the previous one gives no rate and is the base of the next."""

    def entry(written: int) -> JobEntry:
        return JobEntry(
            "j", 5.0, None, None, {"write_bytes": OpStats(1, "bytes", 1, 1, written, None)}
        )

    tracker = RateTracker()
    assert tracker.update(KEY, [entry(0)], 1000.0) == {}
    assert tracker.update(KEY, [entry(100)], 990.0) == {}  # the clock went back 10 s
    assert tracker.update(KEY, [entry(200)], 1000.0) == {"j": (("write_bytes",), (10.0,))}


# A snapshot_time for one read: missing, anywhere (past, future, far before start_time), or a
# value shared by several reads.
snapshots = st.one_of(st.none(), st.floats(0, 4e9), st.sampled_from([0.0, 1652255390.0]))
reads = st.lists(
    st.tuples(
        st.floats(10 * MIN_STEP, 3600),  # time since the previous read (shorter: no rate)
        st.lists(st.integers(0, 2**39), min_size=3, max_size=3),  # increase of each job
        st.lists(snapshots, min_size=3, max_size=3),  # snapshot_time of each job
        st.booleans(),  # whether a short-lived job is listed too
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=300)
@given(
    reads=reads,
    first=st.lists(st.integers(0, 2**50), min_size=3, max_size=3),
    start=st.one_of(st.none(), st.floats(0, 1652255000)),
    order=st.sampled_from(["as drawn", "decreasing", "equal"]),
)
def test_rate_times_interval_adds_up_to_the_increase(reads, first, start, order) -> None:
    """Counters that never decrease: over reads with increasing wall clocks, the sum of
    rate x time since the previous read is each job's whole increase, whatever the entries'
    snapshot_time (order "decreasing" sorts each job's drawn values downwards over the reads,
    "equal" gives all the same one)."""
    columns = [[snaps[job] for _, _, snaps, _ in reads] for job in range(3)]
    if order == "decreasing":
        columns = [
            sorted(column, key=lambda s: -1 if s is None else s, reverse=True) for column in columns
        ]
    elif order == "equal":
        columns = [[column[0]] * len(column) for column in columns]

    def entries(values: list[int], read_index: int, visitor: bool) -> list[JobEntry]:
        listed = [
            JobEntry(
                f"job{job}",
                columns[job][read_index],
                start,
                None,
                {
                    "write_bytes": OpStats(values[job], "bytes", 1, 1, values[job], None),
                    "punch": OpStats(values[job] // 7, "usecs", 1, 1, values[job], None),
                },
            )
            for job in range(3)
        ]
        if visitor:
            listed.append(
                JobEntry("visitor", 1.0, None, None, {"punch": OpStats(9, "usecs", 1, 1, 9, None)})
            )
        return listed

    tracker = RateTracker()
    clock = 1652255690.0
    values = list(first)
    tracker.update(KEY, entries(values, 0, False), clock)
    summed = [[0.0, 0.0] for _ in range(3)]
    for index, (step, more, _, visitor) in enumerate(reads):
        before = clock
        clock += step
        values = [value + increase for value, increase in zip(values, more, strict=True)]
        rates = tracker.update(KEY, entries(values, index, visitor), clock)
        for job in range(3):
            names, per_second = rates[f"job{job}"]
            assert names == ("write_bytes", "punch")
            for counter, rate in enumerate(per_second):
                summed[job][counter] += rate * (clock - before)
    for job in range(3):
        increase = values[job] - first[job], values[job] // 7 - first[job] // 7
        for counter in range(2):
            assert abs(summed[job][counter] - increase[counter]) <= 1e-9 * max(increase[counter], 1)
