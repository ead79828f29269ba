"""The fast exposition path means exactly what prometheus-client's writer would say, and the
collector's whole output passes ``promtool check metrics``."""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.common.jobid import JobIdPattern
from hpcmon.exporter.collector import add_path_flags
from hpcmon.exporter.exposition import render_families
from hpcmon.exporter.jobstats.collector import JobstatsCollector
from hpcmon.exporter.jobstats.parser import JobEntry, parse_text
from hpcmon.exporter.jobstats.rates import RateTracker
from hpcmon.exporter.jobstats.render import LabelCache, Layouts, pack_target, render_blocks

DATA = Path(__file__).parents[1] / "data" / "jobstats"
PATTERN = r"(?P<exe>[^:.]+)[.:](?P<uid>\d+)(?::(?P<host>.*))?"

NASTY = (
    "mdt.fs-MDT0000.job_stats=\njob_stats:\n"
    '- job_id:          "q\\x22uote\\x5cback\\x0anew\\xc3\\xa9:12:h"\n'
    "  snapshot_time:   100.5 secs.nsecs\n  start_time:      90.25 secs.nsecs\n"
    "  open:            { samples: 3, unit: usecs, min: 1, max: 9, sum: 12, sumsq: 90 }\n"
    "  read_bytes:      { samples: 1, unit: bytes, min: 7, max: 7, sum: 7, sumsq: 49, "
    "hist: { 4K: 1 } }\n"
    "- job_id:          Albion Pool -16.5366\n  snapshot_time:   101\n"
    "  punch:           { samples: 18446744073709551615, unit: reqs }\n"
)


Rates = dict[str, tuple[tuple[str, ...], tuple[float, ...]]]
Prepared = list[tuple[tuple[str, str], list[JobEntry], Rates]]


def reference(series: Prepared, pattern: JobIdPattern) -> bytes:
    """The same families built the slow, obvious way with prometheus-client."""
    names = ["component", "target", "jobid", *pattern.names]
    fam: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(kind, name, labels, operation, value):
        family = fam.get(name)
        if family is None:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            extra = ["operation"] if operation is not None else []
            family = fam[name] = cls(name, "h", labels=names + extra)
        family.add_metric(labels + ([operation] if operation is not None else []), value)

    for (component, target), entries, rates in series:
        for entry in entries:
            labels = [component, target, entry.jobid, *pattern.labels(entry.jobid)]
            for op_name, op in entry.ops.items():
                if op_name in ("read_bytes", "write_bytes"):
                    base = "lustre_job_" + op_name.split("_")[0]
                    add("counter", base + "_samples", labels, None, op.samples)
                    add("counter", base + "_bytes", labels, None, op.sum)
                    add("gauge", base + "_minimum_size_bytes", labels, None, op.min)
                    add("gauge", base + "_maximum_size_bytes", labels, None, op.max)
                else:
                    add("counter", "lustre_job_stats", labels, op_name, op.samples)
                    if op.unit == "usecs":
                        add("counter", "lustre_job_latency_seconds", labels, op_name, op.sum / 1e6)
            found = rates.get(entry.jobid)
            for op_name, rate in zip(*found, strict=True) if found else ():
                if op_name in ("read_bytes", "write_bytes"):
                    add("gauge", f"lustre_job_{op_name}_per_second", labels, None, rate)
                else:
                    add("gauge", "lustre_job_operations_per_second", labels, op_name, rate)
    return render_families(fam.values())


def meaning(text: bytes) -> dict[str, tuple[str, set]]:
    """Family name -> (type, {(sample name, sorted labels, value)})."""
    result = {}
    for family in text_string_to_metric_families(text.decode("utf-8")):
        rows = {
            (s.name, tuple(sorted(s.labels.items())), float(s.value))  # Prometheus: float64
            for s in family.samples
        }
        assert len(rows) == len(family.samples)
        result[family.name] = (family.type, rows)
    return result


def fast_render(series: Prepared, labels: LabelCache) -> bytes:
    layouts = Layouts(labels)
    blocks = [
        pack_target(entries, labels.for_target(key, [e.jobid for e in entries]), layouts, rates)
        for key, entries, rates in series
    ]
    buffer = io.BytesIO()
    render_blocks(blocks, buffer)
    return buffer.getvalue()


def prepared(
    texts: list[str], pattern: JobIdPattern, steps: int = 2
) -> tuple[Prepared, LabelCache]:
    """Parse, and run the rate tracker over ``steps`` samples."""
    tracker = RateTracker()
    series: Prepared = []
    for step in range(steps):
        series = []
        for text in texts:
            for target in parse_text(text, "t").targets:
                key = (target.component, target.target)
                series.append((key, target.jobs, tracker.update(key, target.jobs, 1000.0 + step)))
    return series, LabelCache(pattern)


@pytest.mark.parametrize("pattern", [None, PATTERN])
def test_fast_rendering_means_the_same_as_prometheus_client(pattern: str | None) -> None:
    texts = [
        (DATA / name).read_text()
        for name in (
            "whamcloud_lustrefs-exporter__fixtures_jobstats_only_2.14.0_162.txt",
            "whamcloud_lustrefs-exporter__fixtures_jobstats_only_2.14.0_164.txt",
            "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt",
        )
    ] + [NASTY]
    # A 2.12 capture under its real target name, as lctl would print it.
    texts.append(
        "obdfilter.public1-OST0009.job_stats=\n"
        + (
            DATA
            / (
                "HewlettPackard_lustre_exporter__pr149__tests_oss_bigdata_proc_fs_lustre_obdfilter_"
                "public1-OST0009_job_stats__lustre2.12.5.txt"
            )
        ).read_text()
    )
    job_pattern = JobIdPattern(pattern)
    series, labels = prepared(texts, job_pattern)
    fast = fast_render(series, labels)
    slow = reference(series, job_pattern)
    fast_meaning, slow_meaning = meaning(fast), meaning(slow)
    assert set(fast_meaning) == set(slow_meaning)
    for name, (kind, rows) in slow_meaning.items():
        assert fast_meaning[name][0] == kind, name
        assert fast_meaning[name][1] == rows, name
    total = sum(len(rows) for _, rows in fast_meaning.values())
    assert total > 826 * 18  # the 2.12 target alone has 826 jobs x 18 series
    assert 'jobid="q\\"uote\\\\back\\nnew\u00e9:12:h"' in fast.decode("utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobid=st.text(min_size=1, max_size=20), operation=st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
)
def test_any_job_id_renders_like_prometheus_client(jobid: str, operation: str) -> None:
    escaped = "".join(f"\\x{b:02x}" for b in jobid.encode("utf-8"))
    text = (
        f'mdt.fs-MDT0000.job_stats=\n- job_id: "{escaped}"\n  snapshot_time: 5\n'
        f"  {operation}: {{ samples: 4, unit: usecs, min: 1, max: 1, sum: 4, sumsq: 4 }}\n"
    )
    series, labels = prepared([text], JobIdPattern(None), steps=1)
    if not series[0][1]:  # an id that is only blanks decodes to empty: skipped
        assert not jobid.strip()
        return
    fast = fast_render(series, labels)
    assert meaning(fast) == meaning(reference(series, JobIdPattern(None)))


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")
def test_promtool_accepts_the_collector_output(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_path_flags(parser)
    JobstatsCollector.add_arguments(parser)
    (tmp_path / "nasty.txt").write_text(NASTY)
    for name in (
        "whamcloud_lustrefs-exporter__fixtures_jobstats_only_2.14.0_162.txt",
        "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt",
        "HewlettPackard_lustre_exporter__pr149__tests_oss_bigdata_proc_fs_lustre_"
        "obdfilter_public1-OST000b_job_stats__lustre2.12.5.txt",
    ):
        shutil.copy(DATA / name, tmp_path / name)
    collector = JobstatsCollector(
        parser.parse_args(
            [
                "--jobstats.source",
                "file",
                "--jobstats.path",
                str(tmp_path / "*.txt"),
                "--jobstats.interval",
                "0",
                "--jobstats.jobid-pattern",
                PATTERN,
            ]
        )
    )
    collector.sample()
    output = collector.sample()
    assert output.count(b"\n") > 800 * 18
    assert PROMTOOL is not None  # the test is skipped without it
    check = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=output, capture_output=True, timeout=120
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    assert check.stdout.strip() == b"" and check.stderr.strip() == b""


def test_new_operation_names_at_every_sample_do_not_grow_the_caches(tmp_path: Path) -> None:
    # Lustre has a few dozen operation names; crafted input with new ones at every sample
    # grew the label, layout and rate caches without end (20,000 more entries per sample).
    from hpcmon.exporter.jobstats.parser import MAX_CACHED
    from tests.exporter.test_jobstats_collector import make_collector

    path = tmp_path / "js.txt"
    collector = make_collector("--jobstats.source", "file", "--jobstats.path", str(path))
    jobs = 3000
    for sample in range(4):
        records = "".join(
            f"- job_id: j{i}\n  snapshot_time: {1000 + sample}\n"
            f"  op{sample}_{i}: {{ samples: {sample + 1}, unit: reqs }}\n"
            for i in range(jobs)
        )
        path.write_text("obdfilter.fs-OST0000.job_stats=\njob_stats:\n" + records)
        families = list(text_string_to_metric_families(collector.sample().decode()))
        names = {s.labels.get("operation") for f in families for s in f.samples}
        assert f"op{sample}_{jobs - 1}" in names  # still rendered right after a start-over
    assert len(collector.labels._operations) <= MAX_CACHED
    assert len(collector.layouts._known) <= MAX_CACHED
    assert len(collector.tracker._layouts) <= MAX_CACHED
