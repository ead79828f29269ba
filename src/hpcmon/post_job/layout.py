"""How a job's points are stored: series that do not grow with the jobs (issue 31).

InfluxDB keeps an index entry and a TSM block per field of every series, so a tag that is new
for every job (its id, a log's or trace's name, a traced file's path, a rank) makes series
that each hold a handful of points and never recur: 1.1 M series for 100,000 jobs. Here such
values are fields with the same names (``jobid``, ``log``, ``trace``, ``file``, ``rank``, a
VizTracer ``function``), so a row read back is the same as before and InfluxQL's
``WHERE "jobid" = '42'`` still finds the job; the series are bounded by cluster, user, app,
module, host, insight and the like.

Without those tags, two points of the same series and second could overwrite each other
(points of two logs of a job, or of two jobs of one user and app that start in the same
second, as array tasks do). Each point is therefore stamped on a lattice: its second, then
the job's slot (``jobid`` mod 100,000 for Slurm's numeric ids: two jobs share one only when
their ids differ by a multiple of 100,000), then its place among the job's points of that
series and second, in a canonical order (original time, moved tags, fields), so a rerun of
the hook, or a migration of the old layout, stamps every point the same way. Times keep
their second; what a point needs finer is in its fields.

A job is found through its ``job_index`` point (one per hook run): the first and last stamp
of its points. It adds no series either: its tags are ``cluster`` and ``bucket``, the job's
slot mod 1,000 (``index_bucket``), and ``jobid`` is a field, so a reader that knows the job id
reads one bucket's series, a thousandth of the index. It is stamped on the job's lattice too:
the second of the run's first point, the job's slot, and the node's place in the job's node
list (the first node 0), so no two jobs' index points meet, nor two nodes' of a job of up
to 10,000 nodes. Readers take the window
and select ``jobid`` as a field within it, which reads only the job's bounded series for that
time.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Sequence

from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import FieldValue, Point

INDEX = "job_index"
INDEX_BUCKETS = 1_000  # series of the index per cluster and shard
NS_PER_SECOND = 1_000_000_000
SLOTS = 100_000  # job slots per second
SLOT_WIDTH = NS_PER_SECOND // SLOTS  # points of one job, series and second before a carry
# tags whose values are new with every job: stored as fields of the same name
PER_JOB_TAGS = ("jobid", "log", "trace", "file", "rank")
PER_JOB_TAGS_OF = {"viztracer_function": ("function",)}  # code paths hold the job's paths


def job_slot(job_id: str) -> int:
    """The job's place within a second: Slurm's ids spread over every slot; other ids by CRC."""
    if job_id.isascii() and job_id.isdigit():
        return int(job_id) % SLOTS
    return zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % SLOTS


def index_bucket(job_id: str) -> str:
    """The ``bucket`` tag of the job's index points: readers compute it from the job id."""
    return f"{job_slot(job_id) % INDEX_BUCKETS:03d}"


def stored_points(points: Sequence[Point], job: JobContext) -> list[Point]:
    """The job's points as they are stored, plus its ``job_index`` point."""
    moved = [_moved(point, job.node) for point in points]
    stamped = _stamped(moved, job_slot(job.job_id))
    index = index_point(stamped, job)
    return stamped + ([index] if index is not None else [])


def _moved(point: Point, node: str | None) -> Point:
    """The per-job tags as fields (a field of the same name wins, as it does when a row is
    read back); on a node other than the job's first, the node as tag ``host`` (its series
    are the node's, bounded by the cluster's nodes: two nodes' points of one job and second
    never meet)."""
    per_job = PER_JOB_TAGS + PER_JOB_TAGS_OF.get(point.measurement, ())
    tags = {k: v for k, v in point.tags.items() if k not in per_job}
    fields = dict(point.fields)
    for key in per_job:
        value = point.tags.get(key)
        if value not in (None, "") and key not in fields:
            fields[key] = value
    if node and "host" not in tags:
        tags["host"] = node
    return Point(point.measurement, tags, fields, point.time_ns)


def _stamped(points: list[Point], slot: int) -> list[Point]:
    """Each point at second + slot + its place among the job's points of its series and
    second (canonical order: original time, then its fields, which hold the moved tags).
    Past SLOT_WIDTH points in one second (a 10,001-rank log) the places go on into the next
    seconds, after the places that second's own points took: never onto one of them."""
    series: dict[tuple, list[tuple[int, Point]]] = defaultdict(list)  # (original time, point)
    for point in points:
        if point.time_ns is not None:
            key = (point.measurement, tuple(sorted(point.tags.items())))
            series[key].append((point.time_ns, point))
    base = slot * SLOT_WIDTH
    for members in series.values():
        members.sort(key=lambda m: (m[0] // NS_PER_SECOND, m[0], _fields_key(m[1])))
        taken = -1  # the last lattice place used in this series: second * SLOT_WIDTH + place
        second, place = None, 0
        for time_ns, point in members:
            own = time_ns // NS_PER_SECOND
            place = place + 1 if own == second else 0
            second = own
            taken = max(own * SLOT_WIDTH + place, taken + 1)
            carried, within = divmod(taken, SLOT_WIDTH)
            point.time_ns = carried * NS_PER_SECOND + base + within
    return points


def _fields_key(point: Point) -> tuple:
    return tuple(sorted((key, str(value)) for key, value in point.fields.items()))


def index_point(points: Sequence[Point], job: JobContext) -> Point | None:
    """Where the job's points lie: ``first`` and ``last`` stamp (ns), how many, which
    measurements, the job id (and the node: ``host``, for a node that reads only its own
    inputs, which writes its own). Stamped at the second of the first point, the job's slot
    and the node's place in the job's node list (past SLOT_WIDTH nodes, in later seconds)."""
    times = [p.time_ns for p in points if p.time_ns is not None]
    if not times:
        return None
    first, last = min(times), max(times)
    fields: dict[str, FieldValue] = {
        "first": first,
        "last": last,
        "points": len(points),
        "measurements": ",".join(sorted({p.measurement for p in points})),
    }
    for key in ("user", "app"):
        value = next((p.tags[key] for p in points if p.tags.get(key)), None)
        if value:
            fields[key] = value
    fields["jobid"] = job.job_id
    if job.node:
        fields["host"] = job.node
    tags = {k: v for k, v in job.base_tags().items() if k != "jobid"}
    tags["bucket"] = index_bucket(job.job_id)
    carried, place = divmod(job.node_position, SLOT_WIDTH)
    second = first // NS_PER_SECOND + carried
    stamp = second * NS_PER_SECOND + job_slot(job.job_id) * SLOT_WIDTH + place
    return Point(INDEX, tags, fields, stamp)
