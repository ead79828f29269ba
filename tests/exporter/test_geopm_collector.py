"""GeopmCollector: flags through the real exporter parser, the exposition (names, labels,
values off the recorded capture), promtool's linter, and consistent snapshots."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.exporter.cli import Exporter, available_collectors, build_parser
from hpcmon.exporter.exposition import plain_chunks, render_families
from hpcmon.exporter.geopm.collector import GeopmCollector, snapshot_families
from hpcmon.exporter.geopm.model import Sample, SampleBatch, SignalKey
from hpcmon.exporter.geopm.naming import metric_name, monotone_from_name, unit_from_name
from hpcmon.exporter.geopm.sampler import Reading, Sampler, Snapshot
from hpcmon.exporter.node_jobs import NodeJobsCollector
from tests.exporter.test_geopm_helpers import (
    DATA,
    POWERCAP,
    SESSION_STANDIN,
    extract_ttar,
    write_zone,
)


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
    from hpcmon.exporter.geopm.requests import parse_signals_option

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
    got = samples(b"".join(plain_chunks(Exporter([geopm, jobs]).render())))
    assert got[("geopm_up", (("source", "powercap"),))] == 0.0
    assert got[("hpcmon_exporter_collector_success", (("collector", "geopm"),))] == 1.0
    assert got[("hpcmon_exporter_collector_success", (("collector", "jobs"),))] == 1.0


def test_a_backend_that_raises_anything_is_only_down(tmp_path: Path) -> None:
    """A bug in a backend (not a BackendError) is counted and retried, never propagated."""

    class Broken:
        source, paced = "geopmdpy", False

        def open(self) -> None: ...

        def close(self) -> None: ...

        def read(self) -> SampleBatch:
            raise ZeroDivisionError("bug in a backend")

    write_zone(tmp_path, "0", "package-0", 1_000_000)
    geopm = GeopmCollector(parse(["--geopm.backend", "powercap", "--path.sysfs", str(tmp_path)]))
    geopm.sampler = Sampler([Broken()], 1.0)
    snapshot = geopm.sampler.sample_once()
    assert snapshot.up == {"geopmdpy": False}
    assert "ZeroDivisionError" in snapshot.last_error
    got = samples(b"".join(plain_chunks(Exporter([geopm]).render())))
    assert got[("geopm_errors_total", (("source", "geopmdpy"),))] == 1.0
    assert got[("hpcmon_exporter_collector_success", (("collector", "geopm"),))] == 1.0


def render_signals(signals: list[tuple[str, str, bool]]) -> bytes:
    """Exposition of one reading per (signal, unit, monotone), as the collector renders it."""
    readings = tuple(
        Reading(SignalKey(signal, "package", 0), 1.0, monotone, unit, "geopmsession")
        for signal, unit, monotone in signals
    )
    return render_families(snapshot_families(Snapshot(1, readings, up={"geopmsession": True})))


def test_every_recorded_geopm_signal_name_passes_promtool() -> None:
    """The 86 names geopmdpy 3.2.2's own exporter test uses as a realistic signal list,
    with unit and monotonicity guessed from the name as for geopmsession."""
    names = (DATA / "geopmdpy-3.2.2_TestPrometheusExporter_MOCK_SIGNAL_NAMES.txt").read_text()
    signals = [(s, unit_from_name(s), monotone_from_name(s)) for s in names.split()]
    body = render_signals(signals)
    result = promtool_check(body)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len([f for f in text_string_to_metric_families(body.decode())]) == 86 + 4


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        ("CPU_ENERGY", "geopm_cpu_energy_joules_total"),
        ("DRAM_ENERGY", "geopm_dram_energy_joules_total"),
        ("GPU_ENERGY", "geopm_gpu_energy_joules_total"),
        ("BOARD_ENERGY", "geopm_board_energy_joules_total"),
        ("CPU_POWER", "geopm_cpu_power_watts"),
        ("NVML::GPU_POWER", "geopm_nvml_gpu_power_watts"),
        ("CPU_FREQUENCY_STATUS", "geopm_cpu_frequency_status_hertz"),
        ("CPU_PACKAGE_TEMPERATURE", "geopm_cpu_package_temperature_celsius"),
        ("NVML::GPU_ENERGY_CONSUMPTION_TOTAL", "geopm_nvml_gpu_energy_consumption_joules_total"),
        ("CPU_TIMESTAMP_COUNTER", "geopm_cpu_timestamp_count_total"),  # no type in a name
        ("MSR::DRAM_ENERGY_STATUS#", "geopm_msr_dram_energy_status"),  # raw register
        ("CPUFREQ::CPUINFO_TRANSITION_LATENCY", "geopm_cpufreq_cpuinfo_transition_latency"),
        ("CPUFREQ::SCALING_CUR_FREQ", "geopm_cpufreq_scaling_cur_freq_hertz"),
        ("GPU_UTILIZATION", "geopm_gpu_utilization"),
        ("SOME_TOTAL", "geopm_some"),  # a gauge never ends in _total
        ("GPU_UTILIZATION_SUM", "geopm_gpu_utilization_sum_value"),  # _sum is a summary's
    ],
)
def test_metric_names_from_signal_names(signal: str, expected: str) -> None:
    assert metric_name(signal, unit_from_name(signal), monotone_from_name(signal)).name == expected


WORDS = ["CPU", "GPU", "ENERGY", "POWER", "TOTAL", "COUNTER", "GAUGE", "MS", "S", "B", "UP"]
WORDS += ["ERRORS", "TIME", "FREQ", "TEMPERATURE", "SUMMARY", "HISTOGRAM", "9", "X", "#"]
WORDS += ["COUNT", "SUM", "BUCKET", "CREATED", "INFO", "SECONDS", "MILLISECONDS", "EPOCH"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map("_".join),
            st.sampled_from(["", "watts", "joules", "hertz", "celsius", "seconds"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["_", "::", ":", "-"]),
)
def test_any_signal_names_pass_promtool(signals: list, separator: str) -> None:
    signals = [(name.replace("_", separator, 1), unit, mono) for name, unit, mono in signals]
    body = render_signals(signals)
    result = promtool_check(body)
    assert result.returncode == 0, (signals, result.stdout + result.stderr)


def test_scrapes_during_sampling_see_whole_snapshots(tmp_path: Path) -> None:
    """Every value of one scrape comes from the same read, whatever the sampler does meanwhile."""

    class Stepping:
        source, paced = "powercap", False

        def __init__(self) -> None:
            self.step = 0

        def open(self) -> None: ...

        def close(self) -> None: ...

        def read(self) -> SampleBatch:
            self.step += 1
            keys = [SignalKey("CPU_ENERGY", "package", i) for i in range(16)]
            samples = [Sample(k, 10.0 * self.step, True, "joules") for k in keys]
            return SampleBatch("powercap", float(self.step), 0, samples)

    collector = GeopmCollector(
        parse(["--geopm.backend", "powercap", "--path.sysfs", str(tmp_path)])
    )
    collector.sampler = Sampler([Stepping()], 0.01)  # the zones are this stand-in's, not a sysfs
    collector.sampler.sample_once()
    collector.sampler.sample_once()  # two reads: power is there from now on
    bodies: list[bytes] = []

    def scrape() -> None:
        deadline = time.monotonic() + 30
        while collector.sampler.snapshot.seq < 12 and time.monotonic() < deadline:
            bodies.append(collector.exposition())
            time.sleep(0.002)

    threads = [threading.Thread(target=scrape) for _ in range(3)]
    collector.sampler.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    collector.sampler.stop()
    steps = set()
    for body in set(bodies):
        got = samples(body)
        energy = {v for (n, _), v in got.items() if n == "geopm_cpu_energy_joules_total"}
        power = {v for (n, _), v in got.items() if n == "geopm_cpu_power_watts"}
        assert len(energy) == 1 and power == {10.0}, body  # 10 J per 1 s step
        steps |= energy
    assert len(steps) > 1  # the sampler did move on while the scrapes ran


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
        collector.sampler.sample_once()
        body = collector.exposition()
    finally:
        collector.stop()
    got = samples(body)
    gpu7 = (("domain", "gpu"), ("domain_index", "7"), ("source", "geopmsession"))
    assert got[("geopm_gpu_energy_joules_total", gpu7)] > 8000.0  # stand-in starts at 8000 J
    assert got[("geopm_gpu_power_watts", gpu7)] == pytest.approx(250.0, rel=1e-6)
    result = promtool_check(body)
    assert result.returncode == 0, result.stdout + result.stderr
