"""GEOPM report parser on the real fixtures: numbers read off the files by hand, and a
cross-check of every YAML file against PyYAML (with its two known misreadings undone)."""

from __future__ import annotations

import calendar
import datetime as dt
from pathlib import Path

import pytest
import yaml

from hpcmon.post_job.geopm_report.model import Report, SessionReport
from hpcmon.post_job.geopm_report.reader import parse_report_file

DATA = Path(__file__).parents[1] / "data" / "geopm_report"
RUNTIME_YAML = sorted(
    p for p in DATA.iterdir() if p.name.startswith("geopm-") and "pre-yaml" not in p.name
)
SESSION_YAML = sorted(DATA.glob("geopmsession_*.yaml"))
ALL_FIXTURES = sorted(p for p in DATA.iterdir() if p.name != "SOURCES.md")


def only_report(name: str) -> Report:
    result = parse_report_file(DATA / name)
    assert result.errors == []
    [report] = result.reports
    assert isinstance(report, Report)
    return report


def sessions(name: str) -> list[SessionReport]:
    result = parse_report_file(DATA / name)
    assert result.errors == []
    found = [s for s in result.reports if isinstance(s, SessionReport)]
    assert len(found) == len(result.reports)
    return found


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_parses_without_errors(path: Path) -> None:
    result = parse_report_file(path)
    assert result.errors == []
    assert result.reports


def test_yaml_era_sleep_region_report() -> None:
    report = only_report("geopm-2.0.0+dev39x_test_sleep_region_report.yaml")
    assert report.era == "yaml"
    assert report.version == "2.0.0+dev393g278f477a1"
    assert report.agent == "monitor"
    assert report.profile == "test_sleep_region"
    assert report.policy == "{}"
    assert report.start_time_ns == calendar.timegm((2023, 2, 15, 20, 40, 18)) * 10**9
    [host] = report.hosts
    assert host.name == "mcfly1"
    assert [(r.name, r.hash) for r in host.regions] == [
        ("memory_region", "0xb01fbe6e"),
        ("compute_region", "0x118d519a"),
        ("network_network", "0x2602d1d1"),
    ]
    memory = host.regions[0].values
    assert memory["runtime (s)"] == 10.0009
    assert memory["count"] == 10
    assert memory["sync-runtime (s)"] == 10.005
    assert memory["package-energy (J)"] == 1112.73
    assert memory["frequency (Hz)"] == 2.50273e9  # written "2.50273e+09": a number
    assert host.regions[2].values["package-energy (J)"] == 1111.82
    assert host.totals["unmarked"]["runtime (s)"] == 3.90293
    assert host.totals["epoch"]["runtime (s)"] == 30.0153
    assert host.totals["epoch"]["count"] == 10
    assert host.totals["application"]["runtime (s)"] == 33.9054
    assert host.totals["application"]["package-energy (J)"] == 3770.29
    assert host.totals["application"]["geopmctl memory HWM (B)"] == 25624


def test_yaml_era_report_signals_and_agent_extensions() -> None:
    report = only_report("geopm-2.0.0+dev39x_test_sleep_region_map_report.yaml")
    assert report.agent == "frequency_map"
    assert report.policy is not None
    assert report.policy.startswith('{"FREQ_CPU_DEFAULT": 2000000000, "FREQ_CPU_UNCORE": "NAN"')
    [host] = report.hosts
    assert host.extras["Frequency map"].startswith("{0x00000000108207ee: 1000000000,")
    network = host.regions[0]
    assert (network.name, network.hash) == ("network_network", "0x2602d1d1")
    assert network.values["CPU_FREQUENCY_STATUS@core-0"] == 1.1242e9
    assert network.values["CPU_FREQUENCY_STATUS@core-43"] == 1.9979e9
    assert network.values["frequency-map"] == 2000000000.0
    assert sum(k.startswith("CPU_FREQUENCY_STATUS@core-") for k in network.values) == 44
    assert host.totals["unmarked"]["runtime (s)"] == -0.863553
    assert host.totals["application"]["geopmctl memory HWM (B)"] == 32628


def test_yaml_era_nested_policy_and_unquoted_profile() -> None:
    report = only_report(
        "geopm-2.0.0rc2+dev112_python_agent_tutorial_stress-frequency-limit.report"
    )
    assert report.version == "2.0.0~rc2+dev112g5c3c4597a"
    assert report.agent == "StaticAgent"
    assert report.profile == "stress-ng --cpu 20 --taskset 0-19 --timeout 5"
    assert report.policy == "Initial Controls:\nCPU_FREQUENCY_MAX_CONTROL: 1500000000.0"
    [host] = report.hosts
    assert host.name == "tutorial-hostname"
    assert host.regions == []
    assert list(host.totals) == ["application"]
    app = host.totals["application"]
    assert app["CPU_ENERGY@package-0"] == 294.2
    assert app["CPU_ENERGY@package-1"] == 165.549
    assert app["frequency (Hz)"] == 1499860000.0


def test_yaml_era_four_hosts_and_trailer() -> None:
    report = only_report("geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report")
    assert [h.name for h in report.hosts] == ["mcfly1", "mcfly2", "mcfly3", "mcfly4"]
    assert report.header["Figure of Merit"] == "327780.0"
    first = report.hosts[0]
    allreduce = first.regions[0]
    assert (allreduce.name, allreduce.hash) == ("MPI_Allreduce", "0x0d94e328")
    assert allreduce.values["runtime (s)"] == 53.6629
    assert allreduce.values["count"] == 12005
    recv = next(r for r in first.regions if r.name == "MPI_Recv")
    assert recv.hash == "0x81ff55b3"
    assert recv.values["runtime (s)"] == 0.0243092
    assert first.totals["epoch"]["runtime (s)"] == 150.125
    assert first.totals["epoch"]["count"] == 2000
    assert first.totals["application"]["package-energy (J)"] == 73256.7
    assert first.totals["application"]["geopmctl network BW (B/sec)"] == 5.03133
    last = report.hosts[-1].totals["application"]
    assert (last["runtime (s)"], last["package-energy (J)"]) == (310.072, 74007.3)


def test_text_era_report() -> None:
    report = only_report("geopm-1.0.0+dev30_pre-yaml-text-format.report")
    assert report.era == "text-1.x"
    assert report.version == "1.0.0+dev30g4cccfda"
    assert report.agent == "energy_efficient"
    assert report.profile == "test_ee_stream_dgemm_mix"
    assert report.start_time_ns == calendar.timegm((2019, 5, 30, 14, 38, 17)) * 10**9
    assert [h.name for h in report.hosts] == ["mcfly11", "mcfly12"]
    host = report.hosts[0]
    assert len(host.regions) == 12  # 13 "Region" blocks, the unmarked one is a scope
    sleep = host.regions[0]
    assert (sleep.name, sleep.hash) == ("sleep", "0x536c798f")  # 0x00000000536c798f
    assert sleep.values["runtime (sec)"] == 275.998
    assert sleep.values["package-energy (joules)"] == 33573.9
    assert sleep.values["count"] == 5500
    assert sleep.values["frequency (Hz)"] == 1.05178e9
    assert host.totals["unmarked"]["runtime (sec)"] == 6.07865
    assert host.totals["epoch"]["epoch-runtime-ignore (sec)"] == 0
    app = host.totals["application"]
    assert app["runtime (sec)"] == 541.507
    assert app["geopmctl memory HWM (kB)"] == 144472  # "geopmctl memory HWM: 144472 kB"
    assert app["geopmctl network BW (B/sec)"] == 0.0443208
    assert report.hosts[1].totals["application"]["package-energy (joules)"] == 85946.8
    assert host.extras["Final online freq map"].startswith("0x000000000db5f27a: 1000000000")


def test_text_era_agrees_with_upstream_yaml_conversion() -> None:
    """GEOPM converted this very 1.x report to YAML; region timings and energies must match."""
    text = only_report("geopm-1.0.0+dev30_pre-yaml-text-format.report")
    converted = only_report("geopm-1.0.0+dev30_converted-to-yaml_by-geopmconvertreport.report")
    pairs = {
        "runtime (sec)": "runtime (s)",
        "sync-runtime (sec)": "sync-runtime (s)",
        "package-energy (joules)": "package-energy (J)",
        "dram-energy (joules)": "dram-energy (J)",
        "power (watts)": "power (W)",
        "count": "count",
    }
    compared = 0
    for text_host, yaml_host in zip(text.hosts, converted.hosts, strict=True):
        assert text_host.name == yaml_host.name
        by_hash = {r.hash: r for r in yaml_host.regions}
        for region in text_host.regions:
            other = by_hash[region.hash]
            assert other.name == region.name
            for old, new in pairs.items():
                assert region.values[old] == other.values[new], (region.name, old)
                compared += 1
        for old, new in pairs.items():
            assert text_host.totals["unmarked"][old] == yaml_host.totals["unmarked"][new]
    assert compared == 2 * 12 * len(pairs)
    # the converter turned "144472 kB" into bytes
    assert converted.hosts[0].totals["application"]["geopmctl memory HWM (B)"] == 144472 * 1024


def _yaml_value(value: object) -> object:
    """PyYAML's view of a report value, corrected: '2e+09' (a str to YAML 1.1) is a number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return float(value) if isinstance(value, int | float) else value


@pytest.mark.parametrize("path", RUNTIME_YAML, ids=lambda p: p.name)
def test_yaml_era_matches_pyyaml(path: Path) -> None:
    expected = yaml.safe_load(path.read_text())
    report = only_report(path.name)
    assert list(expected["Hosts"]) == [h.name for h in report.hosts]
    for host in report.hosts:
        want = expected["Hosts"][host.name]
        assert len(want.get("Regions", [])) == len(host.regions)
        for region, want_region in zip(host.regions, want.get("Regions", []), strict=True):
            assert region.name == want_region.pop("region")
            assert region.hash == f"0x{want_region.pop('hash'):08x}"  # YAML made it an int
            assert region.values == {k: _yaml_value(v) for k, v in want_region.items()}
        for section, scope in (
            ("Application Totals", "application"),
            ("Epoch Totals", "epoch"),
            ("Unmarked Totals", "unmarked"),
        ):
            if section in want:
                assert host.totals[scope] == {k: _yaml_value(v) for k, v in want[section].items()}
            else:
                assert scope not in host.totals


@pytest.mark.parametrize("path", SESSION_YAML, ids=lambda p: p.name)
def test_session_yaml_matches_pyyaml(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    parsed = sessions(path.name)
    assert len(parsed) == len(documents)
    for session, doc in zip(parsed, documents, strict=True):
        assert session.host == doc["host"]
        assert session.sample_time_first == doc["sample-time-first"]
        assert session.summary == {
            k: _yaml_value(v)
            for k, v in doc.items()
            if k not in ("host", "sample-time-first", "metrics")
        }
        assert [s.signal for s in session.signals] == list(doc["metrics"])
        for signal in session.signals:
            assert signal.stats == {
                k: _yaml_value(v) for k, v in doc["metrics"][signal.signal].items()
            }


def test_session_yaml_two_hosts() -> None:
    node11, node12 = sessions("geopmsession_report_2024-08-14_enable-mpi_2hosts.yaml")
    assert (node11.host, node12.host) == ("cluster-node-11", "cluster-node-12")
    power = next(s for s in node11.signals if s.signal == "CPU_POWER")
    assert power.stats["count"] == 2000
    assert power.stats["mean"] == 55.8502
    assert power.stats["std"] == 6.41338
    freq = next(s for s in node12.signals if s.signal == "CPU_FREQUENCY_STATUS")
    assert freq.stats["max"] == 2.56136e9
    assert node12.summary["sample-time-total"] == 10.0003
    # 2024-08-14T17:50:01.033367154-0700 is 2024-08-15 00:50:01 UTC, plus the fraction
    utc = dt.datetime(2024, 8, 15, 0, 50, 1, tzinfo=dt.UTC)
    assert node12.start_time_ns == int(utc.timestamp()) * 10**9 + 33_367_154


def test_session_yaml_multidocument() -> None:
    documents = sessions("geopmsession_report_2025-05-16_report-samples-10_yaml_multidoc.yaml")
    assert len(documents) == 4
    assert [d.summary["sample-count"] for d in documents] == [11, 10, 10, 7]
    third = documents[2].signals[0]
    assert third.signal == "CPU_POWER-package-0"
    assert third.stats["max"] == 44.8203
    assert third.stats["mean"] == 40.6383


def test_session_csv_single_host() -> None:
    [session] = sessions("geopmsession_report_2025-05-16_single_host.csv")
    assert session.form == "geopmsession-csv"
    assert session.host == "cluster-node-11"
    assert session.sample_time_first == "2025-05-16T09:09:16.559516035-0700"
    assert session.summary["sample-count"] == 2001
    assert session.summary["sample-time-total"] == 10.000596301
    assert [s.signal for s in session.signals] == ["CPU_FREQUENCY_STATUS", "CPU_POWER", "TIME"]
    power = session.signals[1].stats
    assert power["mean"] == 119.53508979088977
    assert power["max"] == 148.3458434284852
    assert session.signals[2].stats["last"] == 11.575477696
    utc = dt.datetime(2025, 5, 16, 16, 9, 16, tzinfo=dt.UTC)
    assert session.start_time_ns == int(utc.timestamp()) * 10**9 + 559_516_035


def test_session_csv_several_periods() -> None:
    rows = sessions("geopmsession_report_2025-05-16_report-samples-10.csv")
    assert [r.summary["sample-count"] for r in rows] == [11, 10, 10, 7]
    last = rows[-1].signals[0]
    assert last.signal == "CPU_POWER-package-0"
    assert last.stats["min"] == 34.912491389496914
    assert last.stats["count"] == 7
    assert len({r.start_time_ns for r in rows}) == 4
