"""GeopmCollector: flags through the real exporter parser, the exposition (names, labels,
values off the recorded capture), promtool's linter, and consistent snapshots."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import Exporter, available_collectors, build_parser
from exporter.geopm.collector import GeopmCollector
from exporter.geopm.naming import metric_name
from exporter.node_jobs import NodeJobsCollector
from tests.test_geopm_helpers import DATA, POWERCAP, SESSION_STANDIN, extract_ttar, write_zone


def parse(argv: list[str]):
    return build_parser(available_collectors()).parse_args(argv)


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    result = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            result[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return result


def promtool_check(body: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
    )


@pytest.fixture
def capture_tree(tmp_path: Path) -> Path:
    return extract_ttar(POWERCAP / "node_exporter_powercap_section.ttar", tmp_path)


def test_exposition_of_the_recorded_capture(capture_tree: Path) -> None:
    collector = GeopmCollector(
        parse(
            ["--collector.geopm", "--geopm.backend", "powercap", "--path.sysfs", str(capture_tree)]
        )
    )
    collector.sampler.sample_once()
    got = samples(collector.exposition())
    package = (("domain", "package"), ("domain_index", "0"), ("source", "powercap"))
    assert got[("geopm_cpu_energy_joules_total", package)] == pytest.approx(240422.366267)
    assert got[("geopm_cpu_core_energy_joules_total", package)] == pytest.approx(118821.284256)
    assert got[("geopm_up", (("source", "powercap"),))] == 1.0
    assert got[("geopm_errors_total", (("source", "powercap"),))] == 0.0
    assert ("geopm_cpu_power_watts", package) not in got  # needs two samples


def test_promtool_accepts_the_output(capture_tree: Path) -> None:
    collector = GeopmCollector(
        parse(["--geopm.backend", "powercap", "--path.sysfs", str(capture_tree)])
    )
    collector.sampler.sample_once()
    collector.sampler.sample_once()
    body = collector.exposition()
    assert b"geopm_cpu_power_watts" in body
    result = promtool_check(body)
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrapes_read_the_same_snapshot(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "0", "package-0", 1_000_000)
    collector = GeopmCollector(
        parse(["--geopm.backend", "powercap", "--path.sysfs", str(tmp_path)])
    )
    collector.sampler.sample_once()
    first = collector.exposition()
    (zone / "energy_uj").write_text("9000000\n")
    assert collector.exposition() == first  # a scrape neither samples nor resets
    assert collector.exposition() == first
    collector.sampler.sample_once()
    assert (
        samples(collector.exposition())[
            (
                "geopm_cpu_energy_joules_total",
                (("domain", "package"), ("domain_index", "0"), ("source", "powercap")),
            )
        ]
        == 9.0
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--geopm.interval", "0"],
        ["--geopm.interval", "x"],
        ["--geopm.signals", "CPU_ENERGY package"],
        ["--geopm.signals", "CPU_ENERGY socket 0"],
        ["--geopm.backend", "rapl"],
    ],
)
def test_bad_flags_are_rejected_by_the_parser(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_signals_file(tmp_path: Path) -> None:
    requests = tmp_path / "requests"
    requests.write_text("# GEOPM requests\nCPU_ENERGY package *\n\nGPU_POWER gpu 3\n")
    options = parse(["--geopm.signals", str(requests)])
    from exporter.geopm.requests import parse_signals_option

    assert [r.line() for r in parse_signals_option(options.geopm_signals)] == [
        "CPU_ENERGY package *",
        "GPU_POWER gpu 3",
    ]


def test_a_down_backend_does_not_break_the_scrape(tmp_path: Path) -> None:
    geopm = GeopmCollector(
        parse(["--geopm.backend", "powercap", "--path.sysfs", str(tmp_path / "missing")])
    )
    geopm.sampler.sample_once()
    jobs = NodeJobsCollector(parse(["--path.cgroupfs", str(tmp_path)]))
    body = Exporter([geopm, jobs]).render()
    got = samples(body)
    assert got[("geopm_up", (("source", "powercap"),))] == 0.0
    assert got[("hpcmon_exporter_collector_success", (("collector", "geopm"),))] == 1.0
    assert got[("hpcmon_exporter_collector_success", (("collector", "jobs"),))] == 1.0


def test_every_recorded_geopm_signal_name_gives_a_valid_metric_name() -> None:
    """The 86 names geopmdpy 3.2.2's own exporter test uses as a realistic signal list."""
    names = (DATA / "geopmdpy-3.2.2_TestPrometheusExporter_MOCK_SIGNAL_NAMES.txt").read_text()
    lines = []
    for signal in names.split():
        for monotone in (False, True):
            metric = metric_name(signal, "joules" if "ENERGY" in signal else "", monotone)
            kind = "counter" if monotone else "gauge"
            lines.append(f"# HELP {metric.name} x\n# TYPE {metric.name} {kind}\n{metric.name} 1\n")
    body = "".join(dict.fromkeys(lines)).encode()
    assert len(list(text_string_to_metric_families(body.decode()))) >= 86
    assert metric_name("CPU_ENERGY", "joules", True).name == "geopm_cpu_energy_joules_total"
    assert metric_name("NVML::GPU_POWER", "watts", False).name == "geopm_nvml_gpu_power_watts"
    assert (
        metric_name("CPU_FREQUENCY_STATUS", "hertz", False).name
        == "geopm_cpu_frequency_status_hertz"
    )
    assert (
        metric_name("NVML::GPU_ENERGY_CONSUMPTION_TOTAL", "joules", True).name
        == "geopm_nvml_gpu_energy_consumption_joules_total"
    )
    assert (
        metric_name("CPU_PACKAGE_TEMPERATURE", "celsius", False).name
        == "geopm_cpu_package_temperature_celsius"
    )


def test_geopmsession_backend_through_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEOPM_STANDIN_TOPOLOGY", "package=2,gpu=8")
    monkeypatch.setenv("GEOPM_STANDIN_POWER", "CPU=100,GPU=250")
    collector = GeopmCollector(
        parse(
            [
                "--geopm.backend",
                "geopmsession",
                "--geopm.interval",
                "0.1",
                "--geopm.session-path",
                str(SESSION_STANDIN),
                "--geopm.signals",
                "CPU_ENERGY package *,GPU_ENERGY gpu *",
            ]
        )
    )
    try:
        collector.sampler.sample_once()
        snapshot = collector.sampler.sample_once()
        body = collector.exposition()
    finally:
        collector.stop()
    got = samples(body)
    gpu7 = (("domain", "gpu"), ("domain_index", "7"), ("source", "geopmsession"))
    assert got[("geopm_gpu_energy_joules_total", gpu7)] > 8000.0  # stand-in starts at 8000 J
    assert got[("geopm_gpu_power_watts", gpu7)] == pytest.approx(250.0, rel=1e-6)
    assert snapshot.sample_seconds["geopmsession"] < 0.05  # the 0.1 s wait is not counted
    result = promtool_check(body)
    assert result.returncode == 0, result.stdout + result.stderr
