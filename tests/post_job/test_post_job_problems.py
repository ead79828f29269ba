"""The one capped problem collector every post-job source uses: a garbage input gives at most
MAX_PROBLEMS_PER_INPUT lines plus one that counts the rest, and the job's other inputs keep
their own lines and points."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.problems import MAX_PROBLEMS_PER_INPUT, Problems
from tests.post_job.darshan_helpers import MPI_IO_TEST, text_path

JOB = JobContext("777", "testcluster")


@given(
    lines=st.lists(st.text(min_size=1, max_size=20), max_size=40),
    limit=st.integers(min_value=1, max_value=15),
)
def test_keeps_the_first_lines_and_counts_the_rest(lines: list[str], limit: int) -> None:
    problems = Problems("in.txt", limit=limit)
    problems.extend(lines)
    shown = problems.lines()
    assert problems.total == len(lines)
    assert bool(problems) == bool(lines)
    assert shown[: min(limit, len(lines))] == lines[:limit]
    if len(lines) > limit:
        assert shown[-1] == f"in.txt: ... and {len(lines) - limit:,} more problems"
        assert len(shown) == limit + 1 == len(problems)
    else:
        assert shown == lines


def test_the_summary_can_count_what_the_dropped_lines_stand_for() -> None:
    problems = Problems("t.json", limit=2, more="skipped {weight:,} event(s) of {count} kinds")
    for kind, events in (("a", 50), ("b", 40), ("c", 3), ("d", 2)):
        problems.append(f"t.json: skipped {events} event(s): {kind}", events)
    assert list(problems) == [
        "t.json: skipped 50 event(s): a",
        "t.json: skipped 40 event(s): b",
        "t.json: skipped 5 event(s) of 2 kinds",
    ]


def test_add_names_the_input_and_line() -> None:
    problems = Problems(Path("/r/geopm.report"))
    problems.add("bad value", 7)
    problems.add("no hosts")
    assert problems.lines() == ["/r/geopm.report:7: bad value", "/r/geopm.report: no hosts"]


def test_a_darshan_text_full_of_unknown_modules_gives_capped_lines(tmp_path: Path) -> None:
    """Each unknown module is one problem; 40 of them in one log are capped per log, and the
    other log of the job keeps its points and has no line of its own."""
    original = text_path(MPI_IO_TEST).read_text()
    extra = "".join(f"FOO{i}\t0\t123\tFOO{i}_READS\t4\t/x\t/\text4\n" for i in range(40))
    noisy = tmp_path / "noisy.txt"
    noisy.write_text(original + extra)
    output = collect_darshan([], [noisy, text_path(MPI_IO_TEST)], JOB)
    assert len(output.errors) == MAX_PROBLEMS_PER_INPUT + 1
    assert all(line.startswith(str(noisy)) for line in output.errors)
    assert output.errors[-1] == f"{noisy}: ... and {40 - MAX_PROBLEMS_PER_INPUT} more problems"
    logs = {p.tags["log"] for p in output.points if p.measurement == "darshan_job"}
    assert logs == {"noisy", MPI_IO_TEST}
