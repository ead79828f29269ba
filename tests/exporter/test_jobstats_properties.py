"""Property tests (hypothesis) for the rate computation and the splitting of lctl output."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.parser import JobEntry, OpStats, iter_text
from hpcmon.exporter.jobstats.rates import MAX_RATE, MIN_STEP, RateTracker
from hpcmon.exporter.jobstats.sources import LctlSource
from tests.exporter.test_jobstats_collector import fake_lctl, replay

KEY = ("ost", "fs-OST0000")


def entry(clock: float | None, write: int, opens: int, start: float | None = None) -> JobEntry:
    return JobEntry(
        "job",
        clock,
        start,
        None,
        {
            "write_bytes": OpStats(opens, "bytes", 1, 1, write, None),
            "open": OpStats(opens, "usecs", 1, 1, opens, None),
        },
    )


steps = st.one_of(
    st.floats(0, 100),
    st.sampled_from([0.0, 1e-9, 5e-7, 9.99e-4, 1e-3, 1.0]),
)
growths = st.tuples(st.integers(0, 2**40), st.integers(0, 1000))


@settings(max_examples=300)
@given(
    first=growths,
    moves=st.lists(st.tuples(steps, growths), min_size=1, max_size=12),
    start=st.one_of(st.none(), st.floats(0, 1000)),
)
def test_rates_of_growing_counters(first, moves, start) -> None:
    """Monotone counters: the rate is increment over step from the last adopted sample, for
    steps of at least MIN_STEP; a shorter step gives no rate (zeros when nothing moved) and
    keeps the earlier sample as the base. Never negative, infinite, NaN or above MAX_RATE."""
    tracker = RateTracker()
    clock = 1000.0
    values = list(first)
    tracker.update(KEY, [entry(None, *values, start=start)], wall_clock=clock)
    base_clock, base = clock, tuple(values)
    for step, (more_bytes, more_opens) in moves:
        clock += step
        values = [values[0] + more_bytes, values[1] + more_opens]
        got = tracker.update(KEY, [entry(None, *values, start=start)], wall_clock=clock)
        rates = got.get("job", (None, None))[1]
        seconds = clock - base_clock
        increments = (values[0] - base[0], values[1] - base[1])
        if rates is not None:
            assert all(math.isfinite(r) and 0 <= r <= MAX_RATE for r in rates)
        if seconds >= MIN_STEP:
            expected = tuple(i / seconds for i in increments)
            if max(expected) <= MAX_RATE:
                assert rates == pytest.approx(expected)
            else:
                assert rates is None
            base_clock, base = clock, tuple(values)
        elif increments == (0, 0):
            assert rates == (0.0, 0.0)
        else:
            assert rates is None  # and the base is kept: the increment is not lost


@settings(max_examples=300)
@given(
    samples=st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(0, 1e6)),
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**64 - 1),
            st.one_of(st.none(), st.floats(0, 1e6)),
            st.floats(0, 1e6),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_rates_are_always_finite_and_bounded(samples) -> None:
    """Any clocks (equal, backwards, nanoseconds apart), any u64 values, resets, missing
    snapshot_time or start_time."""
    tracker = RateTracker()
    for clock, write, opens, start, wall in samples:
        for _, rates in tracker.update(KEY, [entry(clock, write, opens, start)], wall).values():
            assert all(math.isfinite(r) and 0 <= r <= MAX_RATE for r in rates)


# ---------------------------------------------------------------- lctl output splitting
targets = st.dictionaries(
    st.tuples(
        st.sampled_from(["mdt", "obdfilter"]),
        st.from_regex(r"fs-(OST|MDT)[0-9a-f]{4}", fullmatch=True),
    ),
    st.lists(st.from_regex(r"[A-Za-z0-9.:_-]{1,12}", fullmatch=True), max_size=6, unique=True),
    max_size=5,
)


def get_param_text(sections: list[tuple[tuple[str, str], list[str]]]) -> str:
    out = []
    for (kind, name), jobids in sections:
        out.append(f"{kind}.{name}.job_stats=" + ("job_stats:" if not jobids else ""))
        if jobids:
            out.append("job_stats:")
        for jobid in jobids:
            out += [
                f"- job_id:          {jobid}",
                "  snapshot_time:   1700000000",
                "  open:            { samples: 1, unit: reqs }",
            ]
    return "\n".join(out) + "\n"


def found_jobs(text: str, bare: bool = False) -> dict[tuple[str, str], set[str]]:
    errors: list[str] = []
    found: dict[tuple[str, str], set[str]] = {}
    for target in iter_text(text, "lctl", errors, bare=bare):
        key = (target.component, target.target)
        assert key not in found  # each target once
        found[key] = {job.jobid for job in target.jobs}
        assert target.malformed == 0
    return found


def expected_jobs(sections) -> dict[tuple[str, str], set[str]]:
    expected: dict[tuple[str, str], set[str]] = {}
    for (kind, name), jobids in sections:
        expected.setdefault(("mdt" if kind == "mdt" else "ost", name), set()).update(jobids)
    return expected


@settings(max_examples=200)
@given(
    chosen=targets,
    repeat=st.lists(st.integers(0, 4), max_size=2),
    crlf=st.booleans(),
    noise=st.sampled_from(["", "osc.fs-OST0000-osc.max_dirty_mb=512\n"]),
)
def test_get_param_output_splits_into_its_targets(chosen, repeat, crlf, noise) -> None:
    sections = list(chosen.items())
    # A target listed again later with more jobs: the jobs of both listings are kept.
    for index in repeat:
        if sections:
            key, jobids = sections[index % len(sections)]
            sections.append((key, [jobid + "~again" for jobid in jobids]))
    text = noise + get_param_text(sections)
    if crlf:
        text = text.replace("\n", "\r\n")
    assert found_jobs(text) == expected_jobs(sections)


@given(text=st.text(max_size=200))
def test_lctl_text_without_a_parameter_is_never_a_target(text: str) -> None:
    errors: list[str] = []
    found = list(iter_text(text, "lctl", errors, bare=False))
    assert all(target.target != "lctl" for target in found)
    if not found and text.strip():
        assert errors


@settings(max_examples=25, deadline=None)
@given(chosen=targets, piece=st.integers(1, 400))
def test_lctl_read_in_pieces_gives_every_target_once(tmp_path_factory, chosen, piece) -> None:
    tmp_path = tmp_path_factory.mktemp("lctl")
    sections = list(chosen.items())
    capture = tmp_path / "capture.txt"
    capture.write_text(get_param_text(sections))
    source = LctlSource(str(fake_lctl(tmp_path, replay(capture))), timeout=30)
    source.PIECE_BYTES = piece
    found: dict[tuple[str, str], set[str]] = {}
    for raw in source.read():
        if not sections:  # a server without any target: the source is down, not empty
            assert raw.text is None and raw.error is not None and "no MDT or OST" in raw.error
            continue
        assert raw.text is not None, raw.error
        for key, jobids in found_jobs(raw.text).items():
            assert key not in found
            found[key] = jobids
    assert found == expected_jobs(sections)
