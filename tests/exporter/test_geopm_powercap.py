"""Powercap (RAPL) backend: recorded sysfs captures, wraparound, resets, permissions, zones
that come and go, hostile file contents."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.exporter.geopm.model import BackendError, Sample, SampleBatch, SignalKey
from hpcmon.exporter.geopm.powercap import PowercapBackend, zone_signal
from hpcmon.exporter.geopm.sampler import CounterTracker, Sampler, readings_from_batch
from tests.exporter.test_geopm_helpers import POWERCAP, as_user, extract_ttar, write_zone

MAX_RANGE_UJ = 262143328850  # max_energy_range_uj in both captures
PACKAGE0 = SignalKey("CPU_ENERGY", "package", 0)


def values(batch: SampleBatch) -> dict[SignalKey, float]:
    return {s.key: s.value for s in batch.samples}


def totals(sampler: Sampler) -> dict[SignalKey, float]:
    return {r.key: r.value for r in sampler.snapshot.readings if r.monotone}


def test_node_exporter_capture(tmp_path: Path) -> None:
    sysfs = extract_ttar(POWERCAP / "node_exporter_powercap_section.ttar", tmp_path)
    backend = PowercapBackend(sysfs)
    backend.open()
    batch = backend.read()
    assert batch.errors == []
    # energy_uj of intel-rapl:0 (package-0) and intel-rapl:0:0 (core), read off the capture.
    assert values(batch) == {
        PACKAGE0: pytest.approx(240422.366267, abs=1e-9),
        SignalKey("CPU_CORE_ENERGY", "package", 0): pytest.approx(118821.284256, abs=1e-9),
    }
    assert [s.wrap_range for s in batch.samples] == [pytest.approx(262143.32885)] * 2
    assert all(s.monotone and s.unit == "joules" for s in batch.samples)


def test_procfs_capture_zone_named_package_10(tmp_path: Path) -> None:
    sysfs = extract_ttar(POWERCAP / "procfs_powercap_section.ttar", tmp_path)
    batch = PowercapBackend(sysfs).read()
    assert set(values(batch)) == {
        PACKAGE0,
        SignalKey("CPU_ENERGY", "package", 10),
        SignalKey("CPU_CORE_ENERGY", "package", 0),
    }


@pytest.mark.parametrize(
    ("zone", "name", "parent", "expected"),
    [
        ("0", "package-0", None, SignalKey("CPU_ENERGY", "package", 0)),
        ("1", "package-1", None, SignalKey("CPU_ENERGY", "package", 1)),
        ("1:0", "dram", "package-1", SignalKey("DRAM_ENERGY", "package", 1)),
        ("1:1", "uncore", "package-1", SignalKey("CPU_UNCORE_ENERGY", "package", 1)),
        ("2", "psys", None, SignalKey("BOARD_ENERGY", "board", 2)),
        ("3", "weird zone!", None, SignalKey("POWERCAP_WEIRD_ZONE_ENERGY", "board", 3)),
    ],
)
def test_zone_signal(zone: str, name: str, parent: str | None, expected: SignalKey) -> None:
    assert zone_signal(zone, name, parent) == expected


def test_wraparound_adds_the_lost_range(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "0", "package-0", MAX_RANGE_UJ - 1_000_000)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    start = (MAX_RANGE_UJ - 1_000_000) / 1e6
    assert totals(sampler)[PACKAGE0] == pytest.approx(start, abs=1e-6)
    # Wrapped: 1 J to the top, 1 uJ from the top to 0 (the counter takes max + 1 values), 2.5 J.
    (zone / "energy_uj").write_text("2500000\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(start + 3.500001, abs=1e-7)
    (zone / "energy_uj").write_text("4000000\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(start + 5.000001, abs=1e-7)
    assert sampler.snapshot.counter_resets_total.get("powercap", 0) == 0


def test_counter_reset_to_zero_mid_range_is_not_a_wrap(tmp_path: Path) -> None:
    """From 100 kJ to 0.5 J: taking it for a wrap would add 162 kJ in one interval."""
    zone = write_zone(tmp_path, "0", "package-0", 100_000_000_000)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    (zone / "energy_uj").write_text("500000\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(100_000.0, abs=1e-6)
    (zone / "energy_uj").write_text("2500000\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(100_002.0, abs=1e-6)
    assert sampler.snapshot.counter_resets_total["powercap"] == 1


def test_zone_without_range_is_reported_not_sampled(tmp_path: Path) -> None:
    """Without max_energy_range_uj a reading can be neither checked nor unwrapped."""
    write_zone(tmp_path, "0", "package-0", 5_000_000)
    zone = write_zone(tmp_path, "1", "package-1", 5_000_000, max_range_uj=None)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    assert SignalKey("CPU_ENERGY", "package", 1) not in totals(sampler)
    assert sampler.snapshot.errors_total["powercap"] == 1
    assert "intel-rapl:1/max_energy_range_uj" in sampler.snapshot.last_error
    (zone / "max_energy_range_uj").write_text(f"{MAX_RANGE_UJ}\n")  # read again, not cached
    sampler.sample_once()
    assert totals(sampler)[SignalKey("CPU_ENERGY", "package", 1)] == pytest.approx(5.0)


def test_power_derived_from_energy_over_the_interval() -> None:
    tracker = CounterTracker()
    first = SampleBatch("powercap", 100.0, 0, [Sample(PACKAGE0, 1000.0, True, "joules", 262.0)])
    assert [r.key.signal for r in readings_from_batch(first, tracker)] == ["CPU_ENERGY"]
    second = SampleBatch("powercap", 102.0, 0, [Sample(PACKAGE0, 1250.0, True, "joules")])
    readings = {r.key.signal: r.value for r in readings_from_batch(second, tracker)}
    assert readings == {"CPU_ENERGY": 1250.0, "CPU_POWER": 125.0}


def test_power_from_source_is_not_replaced() -> None:
    tracker = CounterTracker()
    power = SignalKey("CPU_POWER", "package", 0)
    for now, energy in ((0.0, 10.0), (1.0, 20.0)):
        batch = SampleBatch(
            "x",
            now,
            0,
            [Sample(PACKAGE0, energy, True, "joules"), Sample(power, 42.0, False, "watts")],
        )
        readings = readings_from_batch(batch, tracker)
    assert [(r.key, r.value) for r in readings if not r.monotone] == [(power, 42.0)]


def test_zones_that_come_and_go(tmp_path: Path) -> None:
    write_zone(tmp_path, "0", "package-0", 10_000_000)
    zone1 = write_zone(tmp_path, "1", "package-1", 20_000_000)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    package1 = SignalKey("CPU_ENERGY", "package", 1)
    assert totals(sampler)[package1] == pytest.approx(20.0)
    shutil.rmtree(zone1)
    sampler.sample_once()
    assert package1 not in totals(sampler)
    assert sampler.snapshot.up["powercap"]
    assert sampler.snapshot.errors_total.get("powercap", 0) == 0  # gone is not an error
    write_zone(tmp_path, "1", "package-1", 1_000_000)  # back, counter restarted
    sampler.sample_once()
    assert totals(sampler)[package1] == pytest.approx(20.0)  # re-based, never down
    (zone1 / "energy_uj").write_text("4000000\n")
    sampler.sample_once()
    assert totals(sampler)[package1] == pytest.approx(23.0)


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A tree an unprivileged uid can traverse (pytest's tmp_path is root-only)."""
    root = Path(tempfile.mkdtemp(prefix="hpcmon-powercap-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged uid")
def test_energy_uj_root_only_is_reported(shared_tree: Path) -> None:
    write_zone(shared_tree, "0", "package-0", 1_000_000).joinpath("energy_uj").chmod(0o400)
    write_zone(shared_tree, "1", "package-1", 2_000_000)
    for directory in shared_tree.rglob("*"):
        if directory.is_dir():
            directory.chmod(0o755)
    backend = PowercapBackend(shared_tree)
    with as_user():
        batch = backend.read()
    assert values(batch) == {SignalKey("CPU_ENERGY", "package", 1): 2.0}
    assert len(batch.errors) == 1
    assert "intel-rapl:0" in batch.errors[0] and "permission denied" in batch.errors[0]
    assert "Linux 5.10" in batch.errors[0]
    shared_tree.joinpath("class/powercap/intel-rapl:1/energy_uj").chmod(0o400)
    with as_user(), pytest.raises(BackendError, match="permission denied"):
        PowercapBackend(shared_tree).read()


def test_garbage_values_are_reported_and_skipped(tmp_path: Path) -> None:
    write_zone(tmp_path, "0", "package-0", "not-a-number")
    write_zone(tmp_path, "1", "package-1", -5)
    write_zone(tmp_path, "2", "package-2", 7_000_000)
    batch = PowercapBackend(tmp_path).read()
    read = values(batch)
    assert read.pop(SignalKey("CPU_ENERGY", "package", 2)) == 7.0
    assert len(read) == 2 and all(math.isnan(v) for v in read.values())  # there, no value
    assert len(batch.errors) == 2
    assert "intel-rapl:0/energy_uj" in batch.errors[0] and "not-a-number" in batch.errors[0]


def test_no_zones(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no intel-rapl"):
        PowercapBackend(tmp_path).open()
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    snapshot = sampler.sample_once()
    assert snapshot.up == {"powercap": False} and snapshot.readings == ()
    assert "no intel-rapl" in snapshot.last_error


contents = st.one_of(
    st.binary(max_size=64),
    st.integers(-(2**70), 2**70).map(lambda i: b"%d" % i),
    st.sampled_from([b"", b"\n", b"1e3", b"nan", b"\x00\xff", b"123 456"]),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=contents, energy=contents, max_range=contents, energy2=contents)
def test_hostile_zone_files_never_raise(
    tmp_path: Path, name: bytes, energy: bytes, max_range: bytes, energy2: bytes
) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    zone = write_zone(root, "0", "package-0", 0)
    (zone / "name").write_bytes(name)
    (zone / "energy_uj").write_bytes(energy)
    (zone / "max_energy_range_uj").write_bytes(max_range)
    write_zone(root, "0:0", "dram", 1)
    sampler = Sampler([PowercapBackend(root)], 1.0)
    sampler.sample_once()
    (zone / "energy_uj").write_bytes(energy2)
    snapshot = sampler.sample_once()
    # The good zone is always there, whatever its parent's files hold.
    assert any(r.key.signal == "DRAM_ENERGY" for r in snapshot.readings)
    assert snapshot.up["powercap"]
    for reading in snapshot.readings:
        assert reading.value == reading.value  # no NaN exposed


@settings(max_examples=100, deadline=None)
@given(
    wrap_uj=st.integers(1_000_000, 2**40),
    start_fraction=st.floats(0, 1, exclude_max=True),
    steps=st.lists(st.floats(0, 0.49), min_size=1, max_size=30),
)
def test_wrapping_counter_total_equals_the_energy_spent(
    wrap_uj: int, start_fraction: float, steps: list[float]
) -> None:
    """A hardware counter that wraps at wrap_uj, advanced by less than half its range per
    interval: the exported total grows by exactly the energy spent, whatever the wraps."""
    tracker = CounterTracker()
    spent_uj = int(start_fraction * wrap_uj)
    first = None
    for number, step in enumerate([0.0, *steps]):
        spent_uj += int(step * wrap_uj)
        raw = Sample(PACKAGE0, (spent_uj % wrap_uj) / 1e6, True, "joules", wrap_uj / 1e6)
        # A minute apart: a RAPL range lasts minutes at full power, so steps up to half the
        # range are plausible then (in one second they would be refused as too much power).
        total, _, _ = tracker.update("powercap", raw, 60.0 * number, 0)
        first = total if first is None else first
    expected = (spent_uj - int(start_fraction * wrap_uj)) / 1e6
    assert first is not None  # set by the first step
    assert total - first == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert tracker.resets == {}
