"""GEOPM report points: names, tags, units and times, checked against the fixture files, and
written to a real InfluxDB 1.x to prove the line protocol is accepted and field types agree."""

from __future__ import annotations

import calendar
import datetime as dt
import gzip
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from hpcmon.post_job.geopm_report import collect_geopm_report
from hpcmon.post_job.geopm_report.points import field_for_key
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import Point, to_lines

DATA = Path(__file__).parents[1] / "data" / "geopm_report"
ALL_FIXTURES = sorted(p for p in DATA.iterdir() if p.name != "SOURCES.md")
JOB = JobContext(job_id="4242", cluster="mcfly")


def collect(name: str) -> list[Point]:
    output = collect_geopm_report([DATA / name], JOB)
    assert output.errors == []
    return output.points


def one(points: list[Point], measurement: str, **tags: str) -> Point:
    found = [
        p
        for p in points
        if p.measurement == measurement and all(p.tags.get(k) == v for k, v in tags.items())
    ]
    assert len(found) == 1, (measurement, tags, len(found))
    return found[0]


@pytest.mark.parametrize(
    ("key", "field", "scale"),
    [
        ("package-energy (J)", "package_energy_joules", 1.0),
        ("power (W)", "power_watts", 1.0),
        ("runtime (s)", "runtime_seconds", 1.0),
        ("runtime (sec)", "runtime_seconds", 1.0),
        ("package-energy (joules)", "package_energy_joules", 1.0),
        ("frequency (Hz)", "frequency_hertz", 1.0),
        ("frequency (%)", "frequency_percent", 1.0),
        ("geopmctl memory HWM (B)", "geopmctl_memory_hwm_bytes", 1.0),
        ("geopmctl memory HWM (kB)", "geopmctl_memory_hwm_bytes", 1024.0),
        ("geopmctl network BW (B/s)", "geopmctl_network_bw_bytes_per_second", 1.0),
        ("geopmctl network BW (B/sec)", "geopmctl_network_bw_bytes_per_second", 1.0),
        ("count", "count", 1.0),
        ("CPU_FREQUENCY_STATUS@core-12", "cpu_frequency_status_core_12", 1.0),
        ("time-hint-network (s)", "time_hint_network_seconds", 1.0),
        ("odd thing (furlongs)", "odd_thing_furlongs", 1.0),
    ],
)
def test_field_names(key: str, field: str, scale: float) -> None:
    assert field_for_key(key) == (field, scale)


def test_region_and_totals_points() -> None:
    points = collect("geopm-2.0.0+dev39x_test_sleep_region_report.yaml")
    start = calendar.timegm((2023, 2, 15, 20, 40, 18)) * 10**9
    assert {p.time_ns for p in points} == {start}
    memory = one(points, "geopm_region", region="memory_region")
    assert memory.tags == {
        "jobid": "4242",
        "cluster": "mcfly",
        "host": "mcfly1",
        "region": "memory_region",
        "region_hash": "0xb01fbe6e",
        "agent": "monitor",
        "profile": "test_sleep_region",
    }
    assert memory.fields["package_energy_joules"] == 1112.73
    assert memory.fields["runtime_seconds"] == 10.0009
    assert memory.fields["sync_runtime_seconds"] == 10.005
    assert memory.fields["power_watts"] == 111.217
    assert memory.fields["frequency_hertz"] == 2.50273e9
    assert memory.fields["frequency_percent"] == 119.178
    assert memory.fields["uncore_frequency_hertz"] == 2.35e9
    assert memory.fields["count"] == 10 and isinstance(memory.fields["count"], float)
    assert {p.tags["scope"] for p in points if p.measurement == "geopm_totals"} == {
        "application",
        "epoch",
        "unmarked",
    }
    app = one(points, "geopm_totals", scope="application")
    assert app.fields["package_energy_joules"] == 3770.29
    assert app.fields["geopmctl_memory_hwm_bytes"] == 25624
    assert one(points, "geopm_totals", scope="unmarked").fields["runtime_seconds"] == 3.90293
    summary = one(points, "geopm_report")
    assert summary.fields["geopm_version"] == "2.0.0+dev393g278f477a1"
    assert summary.fields["geopm_policy"] == "{}"
    assert summary.fields["hosts"] == 1 and summary.fields["regions"] == 3


def test_text_era_points_use_the_same_names_as_yaml_era() -> None:
    points = collect("geopm-1.0.0+dev30_pre-yaml-text-format.report")
    sleep = one(points, "geopm_region", host="mcfly11", region="sleep")
    assert sleep.tags["region_hash"] == "0x536c798f"
    assert sleep.fields["runtime_seconds"] == 275.998
    assert sleep.fields["package_energy_joules"] == 33573.9
    app = one(points, "geopm_totals", host="mcfly12", scope="application")
    # 142300 kB in the 1.x file; upstream's YAML conversion of it says 145715200 B
    assert app.fields["geopmctl_memory_hwm_bytes"] == 145715200
    assert app.fields["runtime_seconds"] == 541.505
    converted = collect("geopm-1.0.0+dev30_converted-to-yaml_by-geopmconvertreport.report")
    converted_app = one(converted, "geopm_totals", host="mcfly12", scope="application")
    assert converted_app.fields["geopmctl_memory_hwm_bytes"] == 145715200
    assert set(app.fields) - set(converted_app.fields) == {
        "mpi_runtime_seconds",
        "ignore_time_seconds",
    }


def test_report_signals_become_fields() -> None:
    points = collect("geopm-2.0.0rc2+dev112_python_agent_tutorial_stress-package-energy.report")
    app = one(points, "geopm_totals", scope="application")
    assert app.tags["host"] == "tutorial-hostname"
    assert app.tags["profile"] == "stress-ng --cpu 20 --taskset 0-19 --timeout 5"
    assert app.fields["cpu_energy_package_0"] == 635.942
    assert app.fields["cpu_energy_package_1"] == 249.837


def test_trailer_number_is_a_report_field() -> None:
    points = collect("geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report")
    summary = one(points, "geopm_report")
    assert summary.fields["figure_of_merit"] == 327780.0
    assert summary.fields["hosts"] == 4
    assert len([p for p in points if p.measurement == "geopm_totals"]) == 4 * 3


def test_session_points() -> None:
    points = collect("geopmsession_report_2024-08-14_enable-mpi_2hosts.yaml")
    node12 = one(points, "geopm_session", host="cluster-node-12")
    assert node12.fields["sample_count"] == 2001
    assert node12.fields["sample_period_mean_seconds"] == 0.00500015
    assert node12.fields["sample_time_total_seconds"] == 10.0003
    power = one(points, "geopm_session_signal", host="cluster-node-11", signal="CPU_POWER")
    assert power.fields == {
        "count": 2000,
        "first": 58.2713,
        "last": 63.4941,
        "min": 41.1496,
        "max": 89.1348,
        "mean": 55.8502,
        "std": 6.41338,
    }
    utc = dt.datetime(2024, 8, 15, 0, 50, 0, tzinfo=dt.UTC)
    assert power.time_ns == int(utc.timestamp()) * 10**9 + 895_968_647


def test_session_csv_points() -> None:
    points = collect("geopmsession_report_2025-05-16_report-samples-10.csv")
    signals = [p for p in points if p.measurement == "geopm_session_signal"]
    assert [p.fields["count"] for p in signals] == [11, 10, 10, 7]
    assert len({p.time_ns for p in signals}) == 4


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_fields_are_well_named_floats_and_tags_complete(path: Path) -> None:
    for point in collect(path.name):
        assert point.tags["jobid"] == "4242" and point.tags["cluster"] == "mcfly"
        assert point.time_ns is not None and point.time_ns > 10**18
        for name, value in point.fields.items():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
            assert isinstance(value, float | str) or name in ("hosts", "regions"), name
        if point.measurement == "geopm_region":
            assert {"host", "region", "region_hash"} <= set(point.tags)
            assert re.fullmatch(r"0x[0-9a-f]{8,}", point.tags["region_hash"])


def test_reingest_writes_identical_points() -> None:
    first = collect_geopm_report(ALL_FIXTURES, JOB)
    second = collect_geopm_report(ALL_FIXTURES, JOB)
    assert to_lines(first.points) == to_lines(second.points)


def test_report_without_start_time_uses_file_time(tmp_path: Path) -> None:
    source = (DATA / "geopm-2.0.0+dev39x_test_sleep_report.yaml").read_text()
    path = tmp_path / "nostart.report"
    path.write_text(
        "\n".join(line for line in source.splitlines() if not line.startswith("Start Time"))
    )
    output = collect_geopm_report([path], JOB)
    assert any("no readable start time" in e and str(path) in e for e in output.errors)
    assert {p.time_ns for p in output.points} == {path.stat().st_mtime_ns}


def test_one_bad_file_does_not_cost_the_others(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.report"
    bad.write_bytes(b"\x00\xff\xfe not a report at all")
    missing = tmp_path / "missing.report"
    good = tmp_path / "good.yaml"
    shutil.copy(DATA / "geopm-2.0.0+dev39x_test_sleep_report.yaml", good)
    output = collect_geopm_report([bad, missing, good], JOB)
    assert len(output.errors) == 2
    assert str(bad) in output.errors[0] and "not a GEOPM report" in output.errors[0]
    assert str(missing) in output.errors[1] and "cannot read" in output.errors[1]
    assert (
        one(output.points, "geopm_totals", scope="application").fields["package_energy_joules"]
        == 988.304
    )


@pytest.mark.integration
def test_points_are_accepted_by_influxdb(influxdb1) -> None:
    output = collect_geopm_report(ALL_FIXTURES, JOB)
    influxdb1.create_database("geopm")
    body = to_lines(output.points).encode()
    request = urllib.request.Request(f"{influxdb1.url}/write?db=geopm", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
    [series] = influxdb1.series(
        "SELECT package_energy_joules FROM geopm_region WHERE region='memory_region' "
        "AND agent='monitor'",
        db="geopm",
    )
    assert series["values"] == [[calendar.timegm((2023, 2, 15, 20, 40, 18)) * 10**9, 1112.73]]
    [series] = influxdb1.series(
        "SELECT count(runtime_seconds) FROM geopm_totals WHERE scope='application'", db="geopm"
    )
    runtime_reports = [p for p in ALL_FIXTURES if p.name.startswith("geopm-")]
    hosts = {"nekbone": 4, "1.0.0": 2}
    expected = sum(next((n for k, n in hosts.items() if k in p.name), 1) for p in runtime_reports)
    assert series["values"][0][1] == expected
    [series] = influxdb1.series(
        "SELECT geopm_policy FROM geopm_report WHERE agent='StaticAgent'", db="geopm"
    )
    # the nested Policy block: one line per entry; post_job.points writes a line break in a
    # string field as a literal backslash-n (a raw one would split the line-protocol line)
    assert sorted(row[1] for row in series["values"]) == [
        "Initial Controls: {}",
        "Initial Controls: {}",
        "Initial Controls:\\nCPU_FREQUENCY_MAX_CONTROL: 1500000000.0",
    ]


def test_gzipped_report_gives_the_points_of_the_plain_report(tmp_path: Path) -> None:
    plain = DATA / "geopm-2.0.0+dev39x_test_sleep_report.yaml"
    zipped = tmp_path / "report.yaml.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    output = collect_geopm_report([zipped], JOB)
    assert output.errors == []
    assert to_lines(output.points) == to_lines(collect(plain.name))


def test_corrupt_gzipped_report_is_named(tmp_path: Path) -> None:
    corrupt = tmp_path / "report.yaml.gz"
    corrupt.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    output = collect_geopm_report(
        [corrupt, DATA / "geopm-2.0.0+dev39x_test_sleep_report.yaml"], JOB
    )
    assert len(output.errors) == 1 and output.errors[0].startswith(f"{corrupt}: corrupt gzip data")
    assert output.points


def test_session_documents_without_time_are_said_once_and_kept_apart(tmp_path: Path) -> None:
    source = DATA / "geopmsession_report_2025-05-16_report-samples-10_yaml_multidoc.yaml"
    lines = source.read_text().splitlines()
    documents = sum(1 for line in lines if line.startswith("host:"))
    path = tmp_path / "untimed.yaml"
    path.write_text("\n".join(ln for ln in lines if not ln.startswith("sample-time-first")) + "\n")
    output = collect_geopm_report([path], JOB)
    assert [e for e in output.errors if "no readable start time" in e] == [
        f"{path}: no readable start time; points use the file's modification time"
    ]
    mtime = path.stat().st_mtime_ns
    sessions = [p for p in output.points if p.measurement == "geopm_session"]
    assert documents == 4
    times = [t for p in sessions if (t := p.time_ns) is not None]
    assert sorted(times) == [mtime + i for i in range(documents)]
