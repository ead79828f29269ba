"""The jobstats collector end to end (file, procfs and lctl sources), rates, limits, health.

Rates are checked on scripted sequences of job_stats files with expected values worked out by
hand from the numbers in the files (see the comment next to each).
"""

from __future__ import annotations

import argparse
import re
import stat
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.exporter.collector import add_path_flags
from hpcmon.exporter.jobstats.collector import JobstatsCollector
from hpcmon.exporter.jobstats.parser import JobEntry, OpStats, iter_text
from hpcmon.exporter.jobstats.rates import RateTracker
from hpcmon.exporter.jobstats.sources import LctlSource

DATA = Path(__file__).parents[1] / "data" / "jobstats"
DDN_OST = DATA / "whamcloud_lustrefs-exporter__fixtures_jobstats_only_2.14.0_162.txt"
HP_OST = DATA / (
    "HewlettPackard_lustre_exporter__proc_fs_lustre_obdfilter_lustrefs-OST0000_"
    "job_stats__lustre2.10.1.txt"
)
HP_MDT = DATA / (
    "HewlettPackard_lustre_exporter__proc_fs_lustre_mdt_lustrefs-MDT0000_"
    "job_stats__lustre2.10.1.txt"
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def make_collector(*flags: str) -> JobstatsCollector:
    parser = argparse.ArgumentParser()
    add_path_flags(parser)
    JobstatsCollector.add_arguments(parser)
    return JobstatsCollector(parser.parse_args(["--jobstats.interval", "0", *flags]))


def samples_of(body: bytes) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"duplicate series {key}"
            found[key] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def named(samples: Samples, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


# ---------------------------------------------------------------- rates on scripted files
def record(jobid: str, snapshot: float, write: int, opens: int, start: float | None = None) -> str:
    lines = [f"- job_id:          {jobid}", f"  snapshot_time:   {snapshot} secs.nsecs"]
    if start is not None:
        lines.append(f"  start_time:      {start} secs.nsecs")
    lines += [
        f"  write_bytes:     {{ samples: {opens}, unit: bytes, min: 1, max: 9, sum: {write}, "
        "sumsq: 0, hist: {  } }",
        f"  open:            {{ samples: {opens}, unit: usecs, min: 1, max: 1, sum: {opens}, "
        "sumsq: 1 }",
    ]
    return "\n".join(lines) + "\n"


def write_target(path: Path, *records: str) -> None:
    path.write_text("mdt.fs-MDT0000.job_stats=\njob_stats:\n" + "".join(records))


def rates(samples: Samples, jobid: str) -> tuple[float | None, float | None]:
    labels = {"component": "mdt", "target": "fs-MDT0000", "jobid": jobid}
    return (
        value(samples, "lustre_job_write_bytes_per_second", **labels),
        value(samples, "lustre_job_operations_per_second", operation="open", **labels),
    )


def read_at(tracker: RateTracker, clock: float, *records: str) -> dict[str, tuple[float, float]]:
    """One read of the scripted target at wall clock ``clock`` (the collector passes the
    time of its read): jobid -> (write_bytes, open) rates."""
    errors: list[str] = []
    text = "mdt.fs-MDT0000.job_stats=\njob_stats:\n" + "".join(records)
    (target,) = iter_text(text, "lctl", errors, bare=False)
    assert not errors and not target.malformed
    found = tracker.update((target.component, target.target), target.jobs, clock)
    return {
        jobid: (values[names.index("write_bytes")], values[names.index("open")])
        for jobid, (names, values) in found.items()
    }


def test_rates_with_start_time_follow_the_rules() -> None:
    # The snapshot_time of each record (its last update) is never the clock: the read's is.
    tracker = RateTracker()

    # First read: rate since start_time: 1000 B / (1000 - 900) s, 10 opens / 100 s.
    assert read_at(tracker, 1000, record("A", 950, 1000, 10, start=900)) == {"A": (10.0, 0.1)}

    # Increase: (1500 - 1000) / 10 s and (30 - 10) / 10 s.
    assert read_at(tracker, 1010, record("A", 1001, 1500, 30, start=900)) == {"A": (50.0, 2.0)}

    # Decrease = reset: the new values are what happened since, over the 10 s step.
    assert read_at(tracker, 1020, record("A", 1015, 200, 5, start=900)) == {"A": (20.0, 0.5)}

    # start_time changed (a reset the values alone cannot show): 400 B since 1025, 5 s.
    assert read_at(tracker, 1030, record("A", 1026, 400, 3, start=1025)) == {"A": (80.0, 0.6)}

    # Nothing changed: zero rates.
    assert read_at(tracker, 1040, record("A", 1026, 400, 3, start=1025)) == {"A": (0.0, 0.0)}

    # A vanishes; C started after the previous read (1040): 100 B / (1050 - 1045);
    # D started before it: its earlier value counts from the previous read, 300 / 10.
    found = read_at(
        tracker, 1050, record("C", 1046, 100, 1, start=1045), record("D", 1041, 300, 2, start=1000)
    )
    assert found == {"C": (20.0, 0.2), "D": (30.0, 0.2)}

    # A comes back: a new entry from zero, rate since its start 1055: 50 B / 5 s.
    assert read_at(tracker, 1060, record("A", 1056, 50, 1, start=1055)) == {"A": (10.0, 0.2)}


def test_rates_without_start_time_2_12_style() -> None:
    tracker = RateTracker()

    # First read and no start_time: no rate yet (never an invented one).
    assert read_at(tracker, 100, record("X", 90, 1000, 1)) == {}

    # X: (2000 - 1000) / (110 - 100). Y is new: counted from zero at the previous read (100),
    # whatever its snapshot_time says: 500 / 10.
    found = read_at(tracker, 110, record("X", 109, 2000, 3), record("Y", 105, 500, 5))
    assert found == {"X": (100.0, 0.2), "Y": (50.0, 0.5)}

    # The same entries again: zero rates.
    found = read_at(tracker, 120, record("X", 109, 2000, 3), record("Y", 105, 500, 5))
    assert found == {"X": (0.0, 0.0), "Y": (0.0, 0.0)}

    # Y decreased: reset; 100 B since the previous read 120, at 135: 100 / 15.
    found = read_at(tracker, 135, record("X", 109, 2000, 3), record("Y", 130, 100, 3))
    assert found["Y"] == (100 / 15, 3 / 15)


def test_rate_tracker_wall_clock_and_no_time_step() -> None:
    def entry(write: int, snapshot: float | None = None) -> JobEntry:
        return JobEntry(
            "j", snapshot, None, None, {"write_bytes": OpStats(1, "bytes", 1, 1, write, None)}
        )

    tracker = RateTracker()
    assert tracker.update(("ost", "t"), [entry(10)], wall_clock=50.0) == {}
    assert tracker.update(("ost", "t"), [entry(30)], wall_clock=54.0) == {
        "j": (("write_bytes",), (5.0,))
    }
    # Reads less than MIN_STEP apart, different values: no rate, and the increment is not lost.
    tracker2 = RateTracker()
    tracker2.update(("ost", "t"), [entry(10, snapshot=7.0)], wall_clock=1.0)
    assert tracker2.update(("ost", "t"), [entry(20, snapshot=9.0)], wall_clock=1.0 + 1e-4) == {}
    assert tracker2.update(("ost", "t"), [entry(40, snapshot=9.0)], wall_clock=3.0) == {
        "j": (("write_bytes",), (15.0,))
    }


def test_rates_can_be_switched_off(tmp_path: Path) -> None:
    path = tmp_path / "js.txt"
    collector = make_collector(
        "--jobstats.source", "file", "--jobstats.path", str(path), "--no-jobstats.rates"
    )
    write_target(path, record("A", 1000, 1000, 10, start=900))
    collector.sample()
    write_target(path, record("A", 1010, 1500, 30, start=900))
    found = samples_of(collector.sample())
    assert not named(found, "lustre_job_write_bytes_per_second")
    assert not named(found, "lustre_job_operations_per_second")
    assert (
        value(
            found, "lustre_job_write_bytes_total", component="mdt", target="fs-MDT0000", jobid="A"
        )
        == 1500
    )


# ---------------------------------------------------------------- values and families
def test_counter_values_and_latency_from_a_real_capture() -> None:
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(DDN_OST))
    before = time.time()
    found = samples_of(collector.sample())
    after = time.time()
    job = {
        "component": "ost",
        "target": "es01a-OST0001",
        "jobid": "SLURM_JOB10:0:es18kxe-co-client",
    }
    # Lines 3-21 of the capture.
    assert value(found, "lustre_job_write_samples_total", **job) == 861
    assert value(found, "lustre_job_write_bytes_total", **job) == 11025514496
    assert value(found, "lustre_job_write_minimum_size_bytes", **job) == 24576
    assert value(found, "lustre_job_write_maximum_size_bytes", **job) == 16777216
    assert value(found, "lustre_job_read_bytes_total", **job) == 0
    assert value(found, "lustre_job_stats_total", operation="punch", **job) == 85
    assert value(found, "lustre_job_stats_total", operation="write", **job) == 861
    assert value(found, "lustre_job_latency_seconds_total", operation="write", **job) == 7.304967
    assert value(found, "lustre_job_latency_seconds_total", operation="punch", **job) == 0.01684
    assert value(found, "lustre_job_stats_total", operation="read_bytes", **job) is None
    # The whole file: 16 jobs x (8 read/write + 13 operations x 2).
    per_job = [n for (n, labels), _ in found.items() if dict(labels).get("jobid") == job["jobid"]]
    assert len(per_job) == 8 + 13 * 2 + 15  # + rates since start_time (first-seen rule)
    assert value(found, "lustre_jobstats_jobs", component="ost", target="es01a-OST0001") == 16
    assert (
        value(
            found,
            "lustre_jobstats_up",
            component="ost",
            target="es01a-OST0001",
            source=str(DDN_OST),
        )
        == 1
    )
    assert (
        value(found, "lustre_jobstats_parse_errors_total", component="ost", target="es01a-OST0001")
        == 0
    )
    # First-seen rate of a job with a start_time: sum / (time of the read - start_time).
    start = 1723102025.057286226
    rate = value(found, "lustre_job_write_bytes_per_second", **job)
    assert rate is not None
    rounding = 1e-9  # start_time parsed from secs.nsecs
    assert 11025514496 / (after - start) * (1 - rounding) <= rate
    assert rate <= 11025514496 / (before - start) * (1 + rounding)


def test_2_10_reqs_give_no_latency(tmp_path: Path) -> None:
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(HP_OST))
    found = samples_of(collector.sample())
    assert not named(found, "lustre_job_latency_seconds_total")
    job = {"component": "ost", "target": "lustrefs-OST0000", "jobid": "24"}
    assert value(found, "lustre_job_write_bytes_total", **job) == 215147593728
    assert value(found, "lustre_job_stats_total", operation="punch", **job) == 1


def test_duplicate_ids_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "dup.txt"
    path.write_text(
        "obdfilter.fs-OST0000.job_stats=\njob_stats:\n"
        '- job_id:          "a b"\n  snapshot_time:   20\n'
        "  write_bytes:     { samples: 2, unit: bytes, min: 10, max: 30, sum: 40 }\n"
        "  punch:           { samples: 1, unit: reqs }\n"
        "- job_id:          a b\n  snapshot_time:   25\n"
        "  write_bytes:     { samples: 3, unit: bytes, min: 5, max: 20, sum: 35 }\n"
        "  punch:           { samples: 4, unit: reqs }\n"
    )
    found = samples_of(
        make_collector("--jobstats.source", "file", "--jobstats.path", str(path)).sample()
    )
    job = {"component": "ost", "target": "fs-OST0000", "jobid": "a b"}
    assert value(found, "lustre_job_write_samples_total", **job) == 5
    assert value(found, "lustre_job_write_bytes_total", **job) == 75
    assert value(found, "lustre_job_write_minimum_size_bytes", **job) == 5
    assert value(found, "lustre_job_write_maximum_size_bytes", **job) == 30
    assert value(found, "lustre_job_stats_total", operation="punch", **job) == 5


def _activity_by_job(text: str) -> dict[str, int]:
    """Sum of every operation's samples per job id, read straight from the text."""
    totals: dict[str, int] = {}
    for block in text.split("- job_id:")[1:]:
        jobid = block.split("\n", 1)[0].strip().strip('"')
        totals[jobid] = sum(int(n) for n in re.findall(r"samples:\s*(\d+)", block))
    return totals


def test_max_jobs_keeps_the_most_active_and_counts_dropped_series() -> None:
    collector = make_collector(
        "--jobstats.source",
        "file",
        "--jobstats.path",
        str(DDN_OST),
        "--jobstats.max-jobs",
        "3",
        "--no-jobstats.rates",
    )
    found = samples_of(collector.sample())
    activity = _activity_by_job(DDN_OST.read_text())
    top = sorted(activity, key=lambda job: -activity[job])[:3]
    assert activity[top[2]] > sorted(activity.values())[-4]  # no tie at the cut
    shown = {dict(labels)["jobid"] for labels in named(found, "lustre_job_write_bytes_total")}
    assert shown == set(top)
    # 13 jobs dropped x (read/write 2 x 4 + 13 usecs operations x 2) series each.
    assert (
        value(
            found,
            "lustre_jobstats_dropped_series_total",
            component="ost",
            target="es01a-OST0001",
            reason="max_jobs",
        )
        == 13 * 34
    )
    assert value(found, "lustre_jobstats_jobs", component="ost", target="es01a-OST0001") == 16


def test_operations_allowlist() -> None:
    collector = make_collector(
        "--jobstats.source",
        "file",
        "--jobstats.path",
        str(DDN_OST),
        "--jobstats.operations",
        "write_bytes,punch",
        "--no-jobstats.rates",
    )
    found = samples_of(collector.sample())
    names = {name for name, _ in found if name.startswith("lustre_job_")}
    assert names == {
        "lustre_job_write_samples_total",
        "lustre_job_write_bytes_total",
        "lustre_job_write_minimum_size_bytes",
        "lustre_job_write_maximum_size_bytes",
        "lustre_job_stats_total",
        "lustre_job_latency_seconds_total",
    }
    assert {dict(labels)["operation"] for labels in named(found, "lustre_job_stats_total")} == {
        "punch"
    }
    # Per job, left out: read_bytes (4 series) and 12 other usecs operations (2 each).
    assert value(
        found,
        "lustre_jobstats_dropped_series_total",
        component="ost",
        target="es01a-OST0001",
        reason="operations",
    ) == 16 * (4 + 12 * 2)


def test_jobid_pattern_adds_labels() -> None:
    collector = make_collector(
        "--jobstats.source",
        "file",
        "--jobstats.path",
        str(DDN_OST),
        "--jobstats.jobid-pattern",
        r"(?P<exe>[^:]+):(?P<uid>\d+):(?P<host>.*)",
    )
    found = samples_of(collector.sample())
    labelled = {
        dict(labels)["jobid"]: dict(labels)
        for labels in named(found, "lustre_job_write_bytes_total")
    }
    assert labelled["SLURM_JOB10:0:es18kxe-co-client"] == {
        "component": "ost",
        "target": "es01a-OST0001",
        "jobid": "SLURM_JOB10:0:es18kxe-co-client",
        "exe": "SLURM_JOB10",
        "uid": "0",
        "host": "es18kxe-co-client",
    }
    assert labelled["SLURM_JOB10"]["exe"] == "" and labelled["SLURM_JOB10"]["uid"] == ""


def test_jobid_pattern_clash_is_refused() -> None:
    with pytest.raises(ValueError, match="clash"):
        make_collector(
            "--jobstats.source",
            "file",
            "--jobstats.path",
            "x",
            "--jobstats.jobid-pattern",
            r"(?P<target>.+)",
        )


# ---------------------------------------------------------------- sources and health
def test_procfs_tree(tmp_path: Path) -> None:
    for kind, name, capture in (
        ("obdfilter", "lustrefs-OST0000", HP_OST),
        ("mdt", "lustrefs-MDT0000", HP_MDT),
    ):
        folder = tmp_path / "fs" / "lustre" / kind / name
        folder.mkdir(parents=True)
        (folder / "job_stats").write_bytes(capture.read_bytes())
    found = samples_of(
        make_collector("--jobstats.source", "procfs", "--path.procfs", str(tmp_path)).sample()
    )
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    assert value(found, "lustre_jobstats_jobs", component="mdt", target="lustrefs-MDT0000") == 15
    up = named(found, "lustre_jobstats_up")
    assert sorted(up.values()) == [1, 1] and len(up) == 2


def test_missing_file_marks_source_down(tmp_path: Path) -> None:
    found = samples_of(
        make_collector(
            "--jobstats.source", "file", "--jobstats.path", str(tmp_path / "nope.txt")
        ).sample()
    )
    assert (
        value(
            found, "lustre_jobstats_up", component="", target="", source=str(tmp_path / "nope.txt")
        )
        == 0
    )
    assert not named(found, "lustre_job_write_bytes_total")


def fake_lctl(tmp_path: Path, body: str) -> Path:
    """A stand-in for lctl: checks it is asked for one job_stats pattern (``$2``), then runs
    ``body``."""
    script = tmp_path / "lctl"
    script.write_text(
        "#!/bin/sh\n"
        '[ $# = 2 ] && [ "$1" = get_param ] && '
        '{ [ "$2" = "mdt.*.job_stats" ] || [ "$2" = "obdfilter.*.job_stats" ]; } || '
        '{ echo "unexpected args: $*" >&2; exit 64; }\n' + body + "\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def replay(capture: Path) -> str:
    """Shell for ``fake_lctl``: what real lctl prints for ``$2`` on a server whose
    ``lctl get_param`` output was ``capture``: the matching parameters, or Lustre's error and
    exit 2 when none matches (an OSS asked for mdt.*)."""
    return (
        'out=$(awk -v want="${2%%.*}" '
        "'/^[A-Za-z_][A-Za-z0-9_.-]*=/ { split($0, a, \".\"); keep = (a[1] == want) } keep' "
        f'"{capture}")\n'
        'if [ -z "$out" ]; then\n'
        '  echo "error: get_param: param_path \'$(echo "$2" | tr . /)\': '
        'No such file or directory" >&2; exit 2\n'
        "fi\n"
        'printf "%s\\n" "$out"'
    )


def test_lctl_replay_then_hang_then_failure(tmp_path: Path) -> None:
    capture = DATA / "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt"
    lctl = fake_lctl(tmp_path, replay(capture))
    collector = make_collector("--jobstats.lctl-path", str(lctl), "--jobstats.timeout", "1")
    found = samples_of(collector.sample())
    up = {tuple(sorted(labels)): v for labels, v in named(found, "lustre_jobstats_up").items()}
    assert len(up) == 3 and set(up.values()) == {1}
    assert value(found, "lustre_jobstats_jobs", component="mdt", target="fs-MDT0000") == 2
    assert value(found, "lustre_jobstats_jobs", component="ost", target="fs-OST0001") == 0

    lctl.write_text(lctl.read_text().replace(replay(capture), "sleep 30"))
    started = time.monotonic()
    found = samples_of(collector.sample())
    assert time.monotonic() - started < 10
    assert (
        value(found, "lustre_jobstats_up", component="mdt", target="fs-MDT0000", source="lctl") == 0
    )
    assert len(named(found, "lustre_jobstats_up")) == 3
    assert not named(found, "lustre_job_stats_total")

    lctl.write_text(lctl.read_text().replace("sleep 30", "echo 'error: get_param' >&2; exit 2"))
    found = samples_of(collector.sample())
    assert set(named(found, "lustre_jobstats_up").values()) == {0}


def test_oss_without_mdt_is_up(tmp_path: Path) -> None:
    # An OSS: lctl says "No such file or directory" for mdt.* and exits 2 with nothing on
    # stdout; that is no MDT, not a failure. The OSTs come from the obdfilter.* run.
    capture = tmp_path / "oss.txt"
    capture.write_text("obdfilter.lustrefs-OST0000.job_stats=\n" + HP_OST.read_text())
    lctl = fake_lctl(tmp_path, replay(capture))
    found = samples_of(make_collector("--jobstats.lctl-path", str(lctl)).sample())
    assert set(named(found, "lustre_jobstats_source_failures_total").values()) == {0}
    assert (
        value(
            found, "lustre_jobstats_up", component="ost", target="lustrefs-OST0000", source="lctl"
        )
        == 1
    )
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35


def test_lctl_missing_binary(tmp_path: Path) -> None:
    found = samples_of(make_collector("--jobstats.lctl-path", str(tmp_path / "none")).sample())
    assert value(found, "lustre_jobstats_up", component="", target="", source="lctl") == 0


def test_malformed_records_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    write_target(path, record("A", 10, 1, 1), "- job_id: B\n  open: { samples: 1, uni\n")
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(path))
    collector.sample()
    found = samples_of(collector.sample())
    assert (
        value(found, "lustre_jobstats_parse_errors_total", component="mdt", target="fs-MDT0000")
        == 2
    )  # one bad record, seen in two samples
    assert value(found, "lustre_jobstats_jobs", component="mdt", target="fs-MDT0000") == 1


def test_background_sampler_shares_one_snapshot(tmp_path: Path) -> None:
    collector = make_collector(
        "--jobstats.source", "file", "--jobstats.path", str(HP_OST), "--jobstats.interval", "0.2"
    )  # the later interval wins
    collector.start()
    try:
        first = collector.exposition()
        assert b'lustre_jobstats_jobs{component="ost",target="lustrefs-OST0000"} 35.0' in first
        assert collector.exposition_before(None) is collector.exposition_before(None)
        assert collector._worker is not None  # a background sampler: interval > 0
        process = collector._worker._process
    finally:
        collector.stop()
    assert process is not None
    assert process.poll() is not None  # the sampler process ended


def test_background_sampler_with_hung_lctl_never_blocks_scrapes(tmp_path: Path) -> None:
    lctl = fake_lctl(tmp_path, "sleep 30")
    collector = make_collector(
        "--jobstats.lctl-path", str(lctl), "--jobstats.timeout", "0.5", "--jobstats.interval", "0.2"
    )
    collector.start()
    try:
        started = time.monotonic()
        found = samples_of(collector.exposition())
        second = samples_of(collector.exposition())
        assert time.monotonic() - started < 5
    finally:
        collector.stop()
    for snapshot in (found, second):
        assert value(snapshot, "lustre_jobstats_up", component="", target="", source="lctl") == 0


def test_same_target_in_two_files_is_reported_once(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("obdfilter.lustrefs-OST0000.job_stats=\n" + HP_OST.read_text())
    found = samples_of(
        make_collector(
            "--jobstats.source", "file", "--jobstats.path", str(tmp_path / "*.txt")
        ).sample()
    )
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    assert (
        value(
            found, "lustre_jobstats_parse_errors_total", component="ost", target="lustrefs-OST0000"
        )
        == 1
    )


def test_rate_state_survives_an_unreadable_sample(tmp_path: Path) -> None:
    path = tmp_path / "js.txt"
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(path))
    write_target(path, record("A", 1000, 1000, 10, start=900))
    first = time.time()
    collector.sample()
    last_read = time.time()
    path.unlink()  # the target cannot be read once: marked down, its history kept
    found = samples_of(collector.sample())
    assert (
        value(found, "lustre_jobstats_up", component="mdt", target="fs-MDT0000", source=str(path))
        == 0
    )
    # Back: (1500 - 1000) B over the time since the last good read, not 1500 B since
    # start_time as for a job seen for the first time.
    write_target(path, record("A", 1010, 1500, 30, start=900))
    time.sleep(0.01)
    back = time.time()
    write, opens = rates(samples_of(collector.sample()), "A")
    now = time.time()
    assert write is not None and opens is not None
    assert 500 / (now - first) <= write <= 500 / (back - last_read)
    assert 20 / (now - first) <= opens <= 20 / (back - last_read)


def test_scrapes_get_the_last_complete_sample_while_the_next_is_built(tmp_path: Path) -> None:
    # Sampling never empties the snapshot: every scrape in a stream of them, while the
    # sampler keeps replacing it, gets a complete exposition at once.
    collector = make_collector(
        "--jobstats.source", "file", "--jobstats.path", str(HP_OST), "--jobstats.interval", "0.01"
    )
    collector.start()
    try:
        bodies, seen = [], set()
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:
            bodies.append(collector.exposition())
            seen.add(id(collector.exposition_before(None)))
            time.sleep(0.005)
    finally:
        collector.stop()
    expected = b'lustre_jobstats_jobs{component="ost",target="lustrefs-OST0000"} 35.0'
    assert all(expected in body for body in bodies)
    assert all(
        body.endswith(b"\n") and b"lustre_jobstats_scrape_duration" in body for body in bodies
    )
    assert len(seen) == 3  # it did sample again and again meanwhile


def test_lctl_output_read_in_pieces_gives_the_same_series(tmp_path: Path, monkeypatch) -> None:
    # Cut after every parameter (pieces of at least 1 byte), read 1 byte at a time at worst.
    text = (DATA / "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt").read_text()
    text += "obdfilter.lustrefs-OST0000.job_stats=\n" + HP_OST.read_text()
    text += "mdt.lustrefs-MDT0000.job_stats=\n" + HP_MDT.read_text()
    whole = tmp_path / "whole.txt"
    whole.write_text(text)
    lctl = fake_lctl(tmp_path, replay(whole))
    monkeypatch.setattr("hpcmon.exporter.jobstats.sources.LctlSource.PIECE_BYTES", 1)
    from_lctl = samples_of(make_collector("--jobstats.lctl-path", str(lctl)).sample())
    from_file = samples_of(
        make_collector("--jobstats.source", "file", "--jobstats.path", str(whole)).sample()
    )

    def per_job(found: Samples) -> Samples:
        return {
            key: v
            for key, v in found.items()
            if key[0].startswith("lustre_job_") or key[0] == "lustre_jobstats_jobs"
        }

    assert per_job(from_lctl) == per_job(from_file)
    assert (
        value(from_lctl, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    )
    up = named(from_lctl, "lustre_jobstats_up")
    assert len(up) == 5 and set(up.values()) == {1}


@pytest.mark.parametrize(
    "flags",
    [
        ["--jobstats.interval", "x"],
        ["--jobstats.interval", "-1"],
        ["--jobstats.interval", "nan"],
        ["--jobstats.timeout", "1e6"],  # the upper bound is excluded
        ["--jobstats.max-jobs", "-1"],
        ["--jobstats.max-jobs", "ten"],
        ["--jobstats.jobid-pattern", "(?P<job"],
    ],
)
def test_bad_flags_are_rejected_by_the_parser(flags: list[str]) -> None:
    with pytest.raises(SystemExit):
        make_collector(*flags)


def test_flag_bounds_are_inclusive_below() -> None:
    collector = make_collector("--jobstats.timeout", "0", "--jobstats.max-jobs", "0")
    assert isinstance(collector.source, LctlSource)  # the default source
    assert collector.source.timeout == 0.0
    assert collector.settings.max_jobs == 0


def test_a_limit_in_force_counts_dropped_series_from_zero() -> None:
    """Issue 21: the Prometheus convention, counters start at 0: a limit that cuts nothing yet
    still exports its counter, so the first cut is an increase and panels show 0, not nothing."""
    found = samples_of(
        make_collector(
            "--jobstats.source=file", f"--jobstats.path={HP_OST}", "--jobstats.max-jobs=1000",
            "--jobstats.operations-deny=write_bytes",
        ).sample()
    )  # fmt: skip
    key = {"component": "ost", "target": "lustrefs-OST0000"}
    name = "lustre_jobstats_dropped_series_total"
    assert value(found, name, reason="max_jobs", **key) == 0
    assert value(found, name, reason="max_series", **key) is None  # not in force
    cut = value(found, name, reason="operations", **key)
    assert cut is not None and cut > 0  # write_bytes cut on every job
