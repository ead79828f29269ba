"""The flags that keep the per-job series under a budget (issue 17): --jobstats.top-jobs (the
rule of jobid="other", property-tested), --jobstats.operations-deny, --jobstats.aggregate=server
and --jobstats.max-series."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.limits import OTHER, TopJobs
from hpcmon.exporter.jobstats.parser import JobEntry, OpStats
from tests.exporter.jobstats_synth import OST_OPERATIONS, job_record, target_text
from tests.exporter.test_jobstats_collector import (
    DDN_OST,
    HP_OST,
    make_collector,
    named,
    samples_of,
    value,
)

KEY = ("ost", "fs-OST0000")
OPS = ("read_bytes", "write_bytes", "open")
FIELDS = ("samples", "sum")
COUNTERS = (
    "lustre_job_read_samples_total",
    "lustre_job_read_bytes_total",
    "lustre_job_write_samples_total",
    "lustre_job_write_bytes_total",
    "lustre_job_stats_total",
    "lustre_job_latency_seconds_total",
)

Counters = dict[str, dict[str, tuple[int, int]]]  # jobid -> operation -> (samples, sum)


def entries(sample: Counters) -> list[JobEntry]:
    return [
        JobEntry(
            jobid,
            None,
            None,
            None,
            {
                name: OpStats(s, "bytes" if name.endswith("_bytes") else "usecs", 0, 0, total, None)
                for name, (s, total) in ops.items()
            },
        )
        for jobid, ops in sample.items()
    ]


def as_counters(jobs: list[JobEntry]) -> Counters:
    return {job.jobid: {n: (op.samples, op.sum) for n, op in job.ops.items()} for job in jobs}


def grown(now: tuple[int, int], before: tuple[int, int] | None) -> tuple[int, int]:
    """A counter's increase; a decrease is a reset, so the increase is the new value."""
    if before is None:
        return now
    samples, total = (a - b if a >= b else a for a, b in zip(now, before, strict=True))
    return samples, total


@st.composite
def job_sequences(draw) -> list[Counters]:
    """Samples of one target: jobs come and go, counters grow, and sometimes reset."""
    jobids = [f"j{n}" for n in range(draw(st.integers(1, 8)))]
    samples: list[Counters] = []
    state: Counters = {}
    for _ in range(draw(st.integers(1, 6))):
        sample: Counters = {}
        for jobid in jobids:
            if not draw(st.booleans()):
                state.pop(jobid, None)  # not listed: comes back as a new job
                continue
            old = state.get(jobid)
            reset = old is not None and draw(st.integers(0, 9)) == 0
            ops = {}
            for name in OPS:
                before = (0, 0) if old is None or reset else old[name]
                calls = draw(st.integers(0, 50))
                ops[name] = (before[0] + calls, before[1] + calls * draw(st.integers(0, 4096)))
            state[jobid] = sample[jobid] = ops
        samples.append(sample)
    return samples


@given(job_sequences(), st.integers(1, 4))
def test_other_is_exact_first_then_a_monotonic_counter_that_loses_nothing(
    samples: list[Counters], keep: int
) -> None:
    top = TopJobs(keep)
    exported_before: Counters | None = None
    listed_before: Counters = {}
    for number, sample in enumerate(samples):
        jobs, rates = top.fold(KEY, entries(sample), None)
        assert rates is None
        exported = as_counters(jobs)
        assert len(exported) == len(jobs)  # no duplicate job id
        kept = {jobid for jobid in exported if jobid != OTHER}
        assert len(kept) == min(keep, len(sample))
        if number == 0:  # first sample: every counter summed over jobid is exact
            for name in OPS:
                for field in range(2):
                    total = sum(ops[name][field] for ops in sample.values())
                    shown = sum(ops.get(name, (0, 0))[field] for ops in exported.values())
                    assert shown == total
        else:
            assert exported_before is not None  # set by the sample before
            old_other = exported_before[OTHER]
            for name, pair in old_other.items():  # other never goes down
                assert all(a >= b for a, b in zip(exported[OTHER][name], pair, strict=True))
            # What rate() sees (series present at both samples) is every job's increase, also
            # the first value of a job that starts inside the top N (``other`` counts it);
            # only a counter the target lists for the first time starts every series now.
            for name in OPS:
                for field in range(2):
                    seen = sum(
                        grown(exported[s][name], exported_before[s][name])[field]
                        for s in exported
                        if name in exported[s] and name in exported_before.get(s, {})
                    )
                    moved = sum(
                        grown(ops[name], listed_before.get(jobid, {}).get(name))[field]
                        for jobid, ops in sample.items()
                    )
                    assert seen == (moved if name in exported_before[OTHER] else 0)
        exported_before, listed_before = exported, sample


@given(job_sequences(), st.integers(1, 4))
def test_the_kept_jobs_moved_the_most(samples: list[Counters], keep: int) -> None:
    top = TopJobs(keep)
    before: Counters = {}
    for sample in samples:
        jobs, _ = top.fold(KEY, entries(sample), None)
        moved = {
            jobid: sum(
                s + (total if name.endswith("_bytes") else 0)
                for name, ops in [(n, grown(v, before.get(jobid, {}).get(n))) for n, v in o.items()]
                for s, total in [ops]
            )
            for jobid, o in sample.items()
        }
        kept = {job.jobid for job in jobs if job.jobid != OTHER}
        folded = set(sample) - kept
        if kept and folded:
            assert min(moved[j] for j in kept) >= max(moved[j] for j in folded)
        before = sample


def test_a_job_called_other_is_folded_into_other() -> None:
    sample = {"other": {"open": (5, 0)}, "a": {"open": (9, 0)}, "b": {"open": (1, 0)}}
    jobs, _ = TopJobs(1).fold(KEY, entries(sample), None)
    assert [job.jobid for job in jobs] == ["a", OTHER]
    assert jobs[1].ops["open"].samples == 6


def test_an_idle_file_system_keeps_its_top_set(tmp_path) -> None:
    """Issue 21: 40 jobs whose counters do not move; with ties broken by job id the top 5
    flipped on the second sample to the 5 lowest ids (ending and starting series for no
    reason). Ties go to the largest totals: the same 5 at every sample."""
    capture = tmp_path / "idle.txt"
    lines = ["obdfilter.fs-OST0000.job_stats=", "job_stats:"]
    for number in range(40):
        lines += job_record(str(7000 + number), number, OST_OPERATIONS)
    capture.write_text("\n".join(lines) + "\n")
    collector = make_collector(
        "--jobstats.source=file", f"--jobstats.path={capture}", "--jobstats.top-jobs=5"
    )
    tops = []
    for _ in range(3):
        found = named(samples_of(collector.sample()), "lustre_job_read_samples_total")
        tops.append({dict(labels)["jobid"] for labels in found} - {OTHER})
    lowest = {str(7000 + n) for n in range(5)}
    assert len(tops[0]) == 5 and tops[0] != lowest  # the case of the issue
    assert tops[1] == tops[0] and tops[2] == tops[0]


# ---------------------------------------------------------------- the collector's flags
def test_top_jobs_first_sample_sums_exactly_on_a_real_capture() -> None:
    plain = samples_of(
        make_collector("--jobstats.source=file", f"--jobstats.path={DDN_OST}").sample()
    )
    flagged = samples_of(
        make_collector(
            "--jobstats.source=file", f"--jobstats.path={DDN_OST}", "--jobstats.top-jobs=3"
        ).sample()
    )
    for name in COUNTERS:
        totals = [defaultdict(float), defaultdict(float)]
        for found, total in zip((plain, flagged), totals, strict=True):
            for labels, number in named(found, name).items():
                rest = frozenset((k, v) for k, v in labels if k != "jobid")
                total[rest] += number
        if name == "lustre_job_latency_seconds_total":  # exact in Lustre's microseconds
            totals = [{k: round(v * 1e6) for k, v in total.items()} for total in totals]
        assert totals[0] and totals[0] == totals[1], name
    jobs = {dict(labels)["jobid"] for labels in named(flagged, "lustre_job_write_bytes_total")}
    assert len(jobs) == 4 and OTHER in jobs  # 16 jobs on the target: 3 kept, 13 in other


def test_top_jobs_other_rates_are_the_sum_of_its_jobs(tmp_path) -> None:
    path = tmp_path / "ost.txt"
    plain = make_collector("--jobstats.source=file", f"--jobstats.path={path}")
    flagged = make_collector(
        "--jobstats.source=file", f"--jobstats.path={path}", "--jobstats.top-jobs=5"
    )
    for step in (0, 1):
        path.write_text(target_text("ost", 0, 40, step))
        before, after = samples_of(plain.sample()), samples_of(flagged.sample())
    kept = {dict(labels)["jobid"] for labels in named(after, "lustre_job_write_bytes_per_second")}
    assert len(kept) == 6
    # Each collector rates over the time between its own two reads: the ratio of those
    # intervals is read off a job that both show.
    writes = "lustre_job_write_bytes_per_second"
    shown = next(
        labels
        for labels, number in named(after, writes).items()
        if dict(labels)["jobid"] != OTHER and number > 0
    )
    scale = before[(writes, shown)] / after[(writes, shown)]
    for name in ("lustre_job_write_bytes_per_second", "lustre_job_operations_per_second"):
        folded = defaultdict(float)
        for labels, number in named(before, name).items():
            if dict(labels)["jobid"] not in kept:
                folded[frozenset((k, v) for k, v in labels if k != "jobid")] += number
        other = {
            frozenset((k, v) for k, v in labels if k != "jobid"): number
            for labels, number in named(after, name).items()
            if dict(labels)["jobid"] == OTHER
        }
        assert other.keys() == folded.keys()
        for labels, number in folded.items():
            assert abs(other[labels] * scale - number) <= 1e-9 * max(number, 1)


def test_operations_deny_list_after_the_allow_list() -> None:
    found = samples_of(
        make_collector(
            "--jobstats.source=file",
            f"--jobstats.path={DDN_OST}",
            "--jobstats.operations=write_bytes,punch,setattr,statfs",
            "--jobstats.operations-deny=statfs,write_bytes",
            "--no-jobstats.rates",
        ).sample()
    )
    operations = {dict(labels)["operation"] for labels in named(found, "lustre_job_stats_total")}
    assert operations == {"punch", "setattr"}
    assert not named(found, "lustre_job_write_bytes_total")
    assert not named(found, "lustre_job_read_bytes_total")
    # 16 jobs, each: 8 byte-family series + 13 usecs operations x 2, of which 2 x 2 kept.
    dropped = value(
        found,
        "lustre_jobstats_dropped_series_total",
        component="ost",
        target="es01a-OST0001",
        reason="operations",
    )
    assert dropped == 16 * (8 + 13 * 2 - 2 * 2)


def test_aggregate_server_sums_the_targets_and_drops_the_target_label(tmp_path) -> None:
    for index in range(3):
        (tmp_path / f"t{index}.txt").write_text(target_text("ost", index, 12))
    flags = ("--jobstats.source=file", f"--jobstats.path={tmp_path / '*.txt'}")
    per_target = samples_of(make_collector(*flags).sample())
    per_server = samples_of(make_collector(*flags, "--jobstats.aggregate=server").sample())
    for name in COUNTERS:
        summed = defaultdict(float)
        for labels, number in named(per_target, name).items():
            summed[frozenset((k, v) for k, v in labels if k != "target")] += number
        got = named(per_server, name)
        assert all("target" not in dict(labels) for labels in got)
        if name == "lustre_job_latency_seconds_total":  # exact in Lustre's microseconds
            got = {k: round(v * 1e6) for k, v in got.items()}
            summed = {k: round(v * 1e6) for k, v in summed.items()}
        assert summed and got == dict(summed), name
    # Health stays per target.
    assert len(named(per_server, "lustre_jobstats_up")) == 3


def test_max_series_keeps_whole_jobs_and_marks_the_cut() -> None:
    flags = ("--jobstats.source=file", f"--jobstats.path={HP_OST}", "--no-jobstats.rates")
    full = samples_of(make_collector(*flags).sample())
    per_job = [n for (n, _labels) in full if n.startswith("lustre_job_")]
    jobs = {dict(labels)["jobid"] for labels in named(full, "lustre_job_write_bytes_total")}
    cap = len(per_job) // 2
    found = samples_of(make_collector(*flags, f"--jobstats.max-series={cap}").sample())
    shown = [n for (n, _labels) in found if n.startswith("lustre_job_")]
    assert 0 < len(shown) <= cap
    cut = value(found, "lustre_jobstats_series_cut")
    assert cut == len(per_job) - len(shown)
    dropped = named(found, "lustre_jobstats_dropped_series_total")
    assert sum(v for labels, v in dropped.items() if dict(labels)["reason"] == "max_series") == cut
    kept = {dict(labels)["jobid"] for labels in named(found, "lustre_job_write_bytes_total")}
    assert kept < jobs
    for (name, labels), number in found.items():  # whole jobs: a kept job has all its series
        if name.startswith("lustre_job_"):
            assert full[(name, labels)] == number
    assert value(full, "lustre_jobstats_series_cut") is None  # default exposition unchanged
