"""Issue 31: the stored layout. A job's points add no series: job_index has a thousand a
cluster (the job's bucket), every other series is bounded by cluster, user, app, module and
the like; no two points of one job or of two jobs overwrite each other, index points
included; the same points are always stamped the same way."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.layout import (
    INDEX,
    INDEX_BUCKETS,
    NS_PER_SECOND,
    PER_JOB_TAGS,
    SLOT_WIDTH,
    job_slot,
    stored_points,
)
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point
from tests.post_job.test_darshan_pydarshan import SAME_SECOND, log_path


def darshan_points(job: JobContext) -> list[Point]:
    output = collect_darshan([log_path(stem) for stem in SAME_SECOND], [], job)
    for point in output.points:
        point.tags.update(user="alice", app="ior")
    return output.points


def key(point: Point) -> tuple:
    return (point.measurement, tuple(sorted(point.tags.items())), point.time_ns)


def stamp(point: Point) -> int:
    """The point's time: every stored point has one."""
    assert point.time_ns is not None, point
    return point.time_ns


def test_no_per_job_tag_is_left_and_the_values_are_fields() -> None:
    job = JobContext("4711", "c1")
    before = darshan_points(job)
    stored = stored_points(darshan_points(job), job)
    data = [p for p in stored if p.measurement != INDEX]
    assert not any(tag in p.tags for p in data for tag in PER_JOB_TAGS)
    assert all(p.fields["jobid"] == "4711" for p in data)
    logs = {p.fields["log"] for p in data if p.measurement == "darshan_job"}
    assert logs == {p.tags["log"] for p in before if p.measurement == "darshan_job"}
    # the seconds are the data's; the nanoseconds the job's slot and the point's place
    assert Counter(stamp(p) // NS_PER_SECOND for p in data) == Counter(
        stamp(p) // NS_PER_SECOND for p in before
    )
    assert {stamp(p) % NS_PER_SECOND // SLOT_WIDTH for p in data} == {job_slot("4711")}


def test_two_logs_of_a_job_and_two_jobs_started_in_the_same_second_keep_every_point() -> None:
    """Two logs that start in the same second, for two jobs of one user and app (array
    tasks): with the log and job as fields, only the stamps keep the points apart."""
    stored = []
    for job_id in ("100", "101"):
        job = JobContext(job_id, "c1")
        stored += stored_points(darshan_points(job), job)
    keys = [key(p) for p in stored]
    assert len(keys) == len(set(keys))
    index = [p for p in stored if p.measurement == INDEX]
    assert sorted(p.fields["jobid"] for p in index) == ["100", "101"]


def test_a_rerun_stamps_the_same_points_whatever_their_order() -> None:
    job = JobContext("4711", "c1")
    once = [p.to_line() for p in stored_points(darshan_points(job), job)]
    shuffled = list(reversed(darshan_points(job)))
    again = [p.to_line() for p in stored_points(shuffled, job)]
    assert sorted(once) == sorted(again)


def test_series_are_bounded_by_user_and_app_not_by_jobs() -> None:
    series: set[tuple] = set()
    for job_id in range(200, 260):
        job = JobContext(str(job_id), "c1")
        for point in stored_points(darshan_points(job), job):
            series.add((point.measurement, tuple(sorted(point.tags.items()))))
    data = {s for s in series if s[0] != INDEX}
    one_job = {
        (p.measurement, tuple(sorted(p.tags.items())))
        for p in stored_points(darshan_points(JobContext("1", "c1")), JobContext("1", "c1"))
        if p.measurement != INDEX
    }
    assert data == one_job  # 60 jobs, the series of one


def test_the_index_has_a_bounded_number_of_series() -> None:
    """5,000 jobs' index points (Slurm's ids and others) lie in at most INDEX_BUCKETS series
    a cluster, and a job's bucket is its slot's: what readers compute from the job id."""
    series = set()
    for job_id in [*map(str, range(10_000, 12_500)), *(f"job-{n}.x" for n in range(2_500))]:
        job = JobContext(job_id, "c1")
        [index] = [
            p
            for p in stored_points([Point("m", {}, {"v": 1}, 10**18)], job)
            if p.measurement == INDEX
        ]
        assert index.fields["jobid"] == job_id and "jobid" not in index.tags
        assert int(index.tags["bucket"]) == job_slot(job_id) % INDEX_BUCKETS
        series.add(tuple(sorted(index.tags.items())))
    assert 900 <= len(series) <= INDEX_BUCKETS


def test_the_index_says_where_the_job_s_points_are() -> None:
    job = JobContext("4711", "c1")
    stored = stored_points(darshan_points(job), job)
    [index] = [p for p in stored if p.measurement == INDEX]
    times = [stamp(p) for p in stored if p.measurement != INDEX]
    assert index.tags == {"cluster": "c1", "bucket": "711"}
    assert index.fields["jobid"] == "4711" and "host" not in index.fields
    assert (index.fields["first"], index.fields["last"]) == (min(times), max(times))
    assert index.fields["points"] == len(times)
    assert index.fields["user"] == "alice" and index.fields["app"] == "ior"
    assert index.time_ns == index.fields["first"]  # place 0 of the job's slot: the first node
    # another node of the job (the second of its list) stamps its index point at its place
    node = JobContext("4711", "c1", node="n2", node_position=1)
    [index2] = [p for p in stored_points(darshan_points(node), node) if p.measurement == INDEX]
    assert index2.tags == index.tags and index2.fields["host"] == "n2"
    assert index2.time_ns == stamp(index) + 1 and index2.fields["first"] == index.fields["first"]


points = st.lists(
    st.builds(
        lambda m, log, t, v: Point(m, {"user": "u", "log": log}, {"v": v}, t),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["l1", "l2", "l3"]),
        st.integers(10**18, 10**18 + 3 * NS_PER_SECOND),
        st.integers(0, 3),
    ),
    max_size=40,
)


@given(points, points, st.integers(0, 10**12), st.integers(0, 10**12))
def test_two_jobs_never_overwrite_each_other(a, b, id_a, id_b) -> None:
    """Any points of two jobs whose ids differ other than by a multiple of the slot count
    (Slurm's ids: consecutive array tasks) get distinct keys; one job's own points always."""
    stored_a = stored_points(a, JobContext(str(id_a)))
    stored_b = stored_points(b, JobContext(str(id_b)))
    own = [key(p) for p in stored_a]
    assert len(own) == len(set(own))
    if job_slot(str(id_a)) != job_slot(str(id_b)):
        both = [key(p) for p in stored_a + stored_b]  # index points too: they share buckets
        assert len(both) == len(set(both))


@given(points, st.integers(0, 10**12), st.lists(st.integers(0, 3 * SLOT_WIDTH), unique=True))
def test_the_nodes_of_a_job_never_overwrite_each_other_s_index(some, job_id, places) -> None:
    """Each node of a job (its place in the node list; past SLOT_WIDTH in later seconds)
    writes its own index point, whichever second its own points start in."""
    stamps = []
    for place in places:
        job = JobContext(
            str(job_id), "c1", node=f"n{place}" if place else None, node_position=place
        )
        moved = [
            Point(p.measurement, p.tags, p.fields, p.time_ns + place % 2 * NS_PER_SECOND)
            for p in some
        ]
        stamps += [p.time_ns for p in stored_points(moved, job) if p.measurement == INDEX]
    assert len(stamps) == len(set(stamps))


def test_past_a_slot_s_width_the_places_go_on_without_landing_on_the_next_second() -> None:
    """Two logs of one job a second apart with 10,001 ranks each: the first second's last
    point carries into the next second, after that second's own points."""
    start = 1_700_000_000 * NS_PER_SECOND
    ranks = [
        Point("darshan_rank", {"log": log}, {"rank": rank}, start + offset * NS_PER_SECOND)
        for offset, log in enumerate(("a", "b"))
        for rank in range(SLOT_WIDTH + 1)
    ]
    stored = [p for p in stored_points(ranks, JobContext("7")) if p.measurement != INDEX]
    keys = [key(p) for p in stored]
    assert len(keys) == len(set(keys)) == 2 * (SLOT_WIDTH + 1)


def test_another_node_s_points_are_its_own_series_and_it_writes_no_app_run() -> None:
    from hpcmon.post_job.app import identify

    job = JobContext("4711", "c1", "alice", "ior", node="n2")
    points = identify(darshan_points(job), job)
    assert not any(p.measurement == "app_run" for p in points)
    stored = stored_points(points, job)
    assert all(p.tags.get("host") == "n2" for p in stored if p.measurement != INDEX)
