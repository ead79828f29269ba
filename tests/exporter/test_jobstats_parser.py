"""The job_stats parser on every real capture, on each format variant, and on hostile text.

Expected values are read off the capture files by hand (line numbers in comments).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.exporter.jobstats.parser import (
    JobEntry,
    OpStats,
    parse_get_param,
    parse_job_stats,
    parse_text,
    target_from_param,
    target_from_path,
)

DATA = Path(__file__).parents[1] / "data" / "jobstats"
CAPTURES = sorted(DATA.glob("*.txt"))


def capture(fragment: str) -> Path:
    matches = [path for path in CAPTURES if fragment in path.name]
    assert len(matches) == 1, (fragment, matches)
    return matches[0]


def jobs_of(fragment: str, target: str | None = None) -> dict[str, JobEntry]:
    path = capture(fragment)
    parsed = parse_text(path.read_text(), str(path))
    assert parsed.errors == []
    targets = [t for t in parsed.targets if target is None or t.target == target]
    assert len(targets) == 1
    assert targets[0].malformed == 0, targets[0].errors
    return {job.jobid: job for job in targets[0].jobs}


def test_every_capture_parses_completely() -> None:
    assert len(CAPTURES) == 21
    for path in CAPTURES:
        text = path.read_text()
        parsed = parse_text(text, str(path))
        assert parsed.errors == [], path.name
        assert all(t.malformed == 0 for t in parsed.targets), (path.name, parsed.targets)
        # Every "- job_id:" line of the file became one record.
        assert sum(len(t.jobs) for t in parsed.targets) == len(
            re.findall(r"^- job_id:", text, re.M)
        ), path.name
        # Each record has as many operations as it has "{ samples:" lines.
        for block, job in zip(
            text.split("- job_id:")[1:], (j for t in parsed.targets for j in t.jobs), strict=True
        ):
            assert len(job.ops) == block.count("{ samples:"), (path.name, job.jobid)


def test_lustre_2_10_1_ost() -> None:
    job = jobs_of("obdfilter_lustrefs-OST0000_job_stats__lustre2.10.1")["24"]  # lines 2-15
    assert job.snapshot_time == 1510782606
    assert job.start_time is None
    assert job.ops["write_bytes"] == OpStats(64575, "bytes", 4096, 4194304, 215147593728, None)
    assert job.ops["read_bytes"] == OpStats(0, "bytes", 0, 0, 0, None)
    assert job.ops["punch"] == OpStats(1, "reqs", 0, 0, 0, None)
    assert len(job.ops) == 12


def test_pre_2_10_mdt() -> None:
    jobs = jobs_of("5f53b89__proc_fs_lustre_mdt")
    assert list(jobs) == [str(n) for n in range(343, 352)]
    job = jobs["343"]
    assert job.snapshot_time == 1497644161
    assert (
        job.ops["open"].samples,
        job.ops["close"].samples,
        job.ops["getattr"].samples,
        job.ops["setattr"].samples,
        job.ops["crossdir_rename"].samples,
    ) == (40, 33, 38, 40, 0)


def test_lustre_2_12_5_ost_ids_numeric_and_with_spaces() -> None:
    jobs = jobs_of("public1-OST0005")
    job = jobs["1731810"]  # stays a string, unlike with a YAML loader
    assert job.snapshot_time == 1652255674
    assert job.ops["read_bytes"] == OpStats(12, "bytes", 4096, 4096, 49152, None)
    assert job.ops["write_bytes"] == OpStats(5147, "bytes", 240, 4194304, 21007933680, None)
    assert jobs["kworker/21:1.0"].ops["set_info"].samples == 321
    spaced = jobs_of("public1-OST0009")["Albion Pool -16.5366"]  # line 11216
    assert spaced.snapshot_time == 1652255636
    assert spaced.ops["read_bytes"] == OpStats(1, "bytes", 4096, 4096, 4096, None)


def test_glued_max_field() -> None:
    job = jobs_of("obdfilter_OST0001_job_stats")["cluster-testjob1"]
    assert job.ops["write_bytes"] == OpStats(25, "bytes", 1048576, 16777216, 26214400, None)


def test_gsi_2_12_non_numeric_id() -> None:
    job = jobs_of("GSI-HPC")["loop36"]
    assert job.ops["read_bytes"] == OpStats(3153, "bytes", 4096, 1048576, 2081591296, None)


def test_lustre_2_14_usecs_with_sumsq() -> None:
    job = jobs_of("inline_test_touch.0")["touch.0"]
    assert job.snapshot_time == 1614767417
    assert job.ops["open"] == OpStats(1, "usecs", 315, 315, 315, 99225)
    assert job.ops["mknod"] == OpStats(1, "usecs", 296, 296, 296, 87616)
    assert job.ops["write_bytes"] == OpStats(0, "bytes", 0, 0, 0, 0)


def test_time_triple_and_empty_hist() -> None:
    job = jobs_of("with_time_triple")["lfs.0."]
    assert job.snapshot_time == pytest.approx(1686153914.643122579, abs=1e-6)
    assert job.start_time == pytest.approx(1686153914.643119181, abs=1e-6)
    assert job.elapsed_time == pytest.approx(0.000003398, abs=1e-12)
    assert job.ops["statfs"] == OpStats(1, "usecs", 1, 1, 1, 1)
    assert job.ops["read_bytes"] == OpStats(0, "bytes", 0, 0, 0, 0)
    assert "prealloc" in job.ops and len(job.ops) == 15


def test_quoted_id_with_empty_part_and_no_header_line() -> None:
    job = jobs_of("inline_test_yaml_combine")[":988:ds88"]
    assert job.start_time == pytest.approx(1720767442.368619499, abs=1e-6)
    assert job.ops["statfs"] == OpStats(9372, "usecs", 8, 53, 148887, 2456573)
    assert job.ops["parallel_rename_file"].samples == 0


def test_ddn_2_14_ost_with_hist() -> None:
    jobs = jobs_of("2.14.0_162")
    job = jobs["SLURM_JOB10:0:es18kxe-co-client"]  # lines 3-21
    assert job.snapshot_time == pytest.approx(1723114647.887515895, abs=1e-6)
    assert job.elapsed_time == pytest.approx(12622.830229669, abs=1e-6)
    assert job.ops["write_bytes"] == OpStats(
        861, "bytes", 24576, 16777216, 11025514496, 166242808078794752
    )
    assert job.ops["write"] == OpStats(861, "usecs", 65, 34699, 7304967, 80724646151)
    assert job.ops["punch"] == OpStats(85, "usecs", 96, 354, 16840, 3813568)
    # The same job also appears unquoted as a different, shorter id (line 155).
    assert jobs["SLURM_JOB10"].ops["write_bytes"].sum == 204800000


def test_ddn_2_14_two_mdts_in_one_lctl_output() -> None:
    parsed = parse_text(capture("2.14.0_164").read_text(), "x")
    assert [(t.component, t.target, len(t.jobs)) for t in parsed.targets] == [
        ("mdt", "es01a-MDT0000", 5),
        ("mdt", "es02a-MDT0000", 7),
    ]


def test_full_lctl_dump_with_empty_targets_and_other_params() -> None:
    parsed = parse_text(capture("ex8761-lctl").read_text(), "x")
    assert [(t.component, t.target, len(t.jobs)) for t in parsed.targets] == [
        ("ost", "fs-OST0000", 0),
        ("ost", "fs-OST0001", 0),
        ("mdt", "fs-MDT0000", 2),
    ]
    job = {j.jobid: j for j in parsed.targets[2].jobs}["mount.lustre@0@co-es-pm-149.co-"]
    assert job.snapshot_time == 1701771260  # not the obdfilter.*.stats snapshot before it
    assert job.ops["getattr"] == OpStats(1, "usecs", 20, 20, 20, 400)
    assert job.ops["statfs"] == OpStats(2, "usecs", 2, 3, 5, 13)
    assert len(job.ops) == 24


def test_hard_wrapped_capture_lines() -> None:
    job = jobs_of("valid2", "testfs-MDT0000")["dd.0"]
    assert job.ops["open"] == OpStats(1, "usecs", 185, 185, 185, 34225)
    assert job.ops["close"] == OpStats(1, "usecs", 51, 51, 51, 2601)
    assert len(job.ops) == 24


# ---------------------------------------------------------------- variants without captures
OP_215 = (
    "  {name}:{pad}{{ samples: {s:>11}, unit: usecs, min: {s:>8}, max: {s:>8}, "
    "sum: {s:>16}, sumsq: {s:>18} }}"
)


def test_2_15_0_unindented_padded_header() -> None:
    text = (
        "job_stats:\n- job_id:          dd.0\n"
        "snapshot_time   : 3706.601262417 secs.nsecs\n"
        "start_time      : 3700.5 secs.nsecs\n"
        "elapsed_time    : 6.101262417 secs.nsecs\n"
        + OP_215.format(name="open", pad=" " * 12, s=3)
        + "\n"
    )
    job = parse_job_stats(text, "mdt", "fs-MDT0000", "t").jobs[0]
    assert job.snapshot_time == pytest.approx(3706.601262417)
    assert job.start_time == 3700.5
    assert job.elapsed_time == pytest.approx(6.101262417)
    assert job.ops["open"] == OpStats(3, "usecs", 3, 3, 3, 3)


def test_2_15_2_quoted_escaped_ids_and_2_16_2_17_operations() -> None:
    text = (
        'job_stats:\n- job_id:          "Albion\\x20Pool\\x22q\\x5c.5366"\n'
        "  snapshot_time:   1700000010.5 secs.nsecs\n"
        "  read_bytes:      { samples: 2, unit: bytes, min: 4096, max: 8192, sum: 12288, "
        "sumsq: 83886080, hist: { 4K: 1, 8K: 1 } }\n"
        + OP_215.format(name="rename_trylocks", pad=" ", s=7)
        + "\n"
        + OP_215.format(name="parallel_rename_dir", pad=" ", s=1)
        + "\n"
        '- job_id:          "@weird"\n'
        "  snapshot_time:   1700000010.5 secs.nsecs\n"
    )
    target = parse_job_stats(text, "mdt", "fs-MDT0000", "t")
    assert target.malformed == 0
    first, second = target.jobs
    assert first.jobid == 'Albion Pool"q\\.5366'
    assert first.ops["read_bytes"] == OpStats(2, "bytes", 4096, 8192, 12288, 83886080)
    assert first.ops["rename_trylocks"].samples == 7
    assert second.jobid == "@weird" and second.ops == {}


def test_empty_target_on_one_line_and_param_names() -> None:
    parsed = parse_get_param(
        "obdfilter.fs-OST0000.job_stats=job_stats:\nmdt.fs-MDT0000.job_stats=\njob_stats:\n", "lctl"
    )
    assert [(t.component, t.target, t.jobs, t.malformed) for t in parsed.targets] == [
        ("ost", "fs-OST0000", [], 0),
        ("mdt", "fs-MDT0000", [], 0),
    ]
    assert target_from_param("obdfilter.fs-OST0000.stats") is None
    assert target_from_path("/proc/fs/lustre/obdfilter/a-OST0001/job_stats") == ("ost", "a-OST0001")
    assert target_from_path("/x/mdt/b-MDT0000/job_stats") == ("mdt", "b-MDT0000")


def test_malformed_records_are_counted_and_skipped() -> None:
    good = "  open: { samples: 1, unit: reqs }\n"
    text = (
        "job_stats:\n"
        "- job_id:          ok1\n  snapshot_time: 10\n"
        + good
        + "- job_id:          \n  snapshot_time: 10\n"
        + good  # empty id
        + "- job_id:          big\n  snapshot_time: 10\n"
        "  open: { samples: 123456789012345678901, unit: reqs }\n"  # > u64
         + "- job_id:          big20\n  snapshot_time: 10\n"
        "  open: { samples: 18446744073709551616, unit: reqs }\n"  # 2^64, 20 digits
         + "- job_id:          max\n  snapshot_time: 10\n"
        "  open: { samples: 18446744073709551615, unit: reqs }\n"  # 2^64 - 1 is fine
        + "- job_id:          badtime\n  snapshot_time: soon\n"
        + good
        + "- job_id:          ok2\n  snapshot_time: 11\n"
        + good
        + "- job_id:          cut\n  snapshot_time: 12\n  open: { samples: 1, un"
    )
    target = parse_job_stats(text, "ost", "fs-OST0000", "file.txt")
    assert [job.jobid for job in target.jobs] == ["ok1", "max", "ok2"]
    assert target.jobs[1].ops["open"].samples == 2**64 - 1
    assert target.malformed == 5
    assert all(message.startswith("file.txt: fs-OST0000: record") for message in target.errors)
    assert [
        "big" in target.errors[1],
        "big20" in target.errors[2],
        "badtime" in target.errors[3],
        "cut" in target.errors[4],
    ] == [True] * 4


def test_garbage_before_first_record_is_reported() -> None:
    target = parse_job_stats("hello\n- job_id: a\n", "ost", "t", "o")
    assert [job.jobid for job in target.jobs] == ["a"]
    assert target.malformed == 1 and "unexpected text" in target.errors[0]


# ---------------------------------------------------------------- hostile input
def _sane(entry: JobEntry) -> bool:
    return bool(entry.jobid) and all(
        0 <= op.samples < 2**64 and 0 <= op.sum < 2**64 for op in entry.ops.values()
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(
        alphabet=st.sampled_from(list('- :{},\n"\\x0123456789abjob_idsamplesunit=.')), max_size=400
    )
)
def test_random_text_never_raises(text: str) -> None:
    parsed = parse_text(text, "random")
    for target in parsed.targets:
        assert all(_sane(job) for job in target.jobs)


MUTATION_BASE = (
    "2.14.0_164",
    "ex8761-lctl",
    "mdt_lustrefs-MDT0000_job_stats__pre2.10",
    "with_time_triple",
    "GSI-HPC",
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(MUTATION_BASE), data=st.data())
def test_mutated_captures_never_raise_and_keep_good_records(base: str, data) -> None:
    text = capture(base).read_text()
    edits = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(text)), st.integers(0, 40), st.text(max_size=12)),
            max_size=4,
        )
    )
    for at, length, replacement in edits:
        text = text[:at] + replacement + text[at + length :]
    cut = data.draw(st.integers(0, len(text)))
    text = text[:cut]
    parsed = parse_text(text, "mutated")
    for target in parsed.targets:
        assert all(_sane(job) for job in target.jobs)
        assert len(target.errors) == min(target.malformed, 20)  # counted, first few kept
