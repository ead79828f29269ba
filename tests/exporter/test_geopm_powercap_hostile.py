"""Powercap readings a zone cannot give (above max_energy_range_uj, garbage, a missing range,
more energy in one interval than a node draws) are no samples: reported, never counted, and
the zone's counter continues from its last good reading."""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.exporter.geopm.collector import snapshot_families
from hpcmon.exporter.geopm.model import SignalKey
from hpcmon.exporter.geopm.powercap import PowercapBackend
from hpcmon.exporter.geopm.sampler import Sampler
from tests.exporter.test_geopm_helpers import POWERCAP, extract_ttar, write_zone

MAX_RANGE_UJ = 262143328850  # max_energy_range_uj of the recorded captures
PACKAGE0 = SignalKey("CPU_ENERGY", "package", 0)
DRAM0 = SignalKey("DRAM_ENERGY", "package", 0)


def totals(sampler: Sampler) -> dict[SignalKey, float]:
    return {r.key: r.value for r in sampler.snapshot.readings if r.monotone}


def exposed(sampler: Sampler) -> dict[str, float]:
    """What a scrape shows for package 0, by metric name."""
    return {
        sample.name: sample.value
        for family in snapshot_families(sampler.snapshot)
        for sample in family.samples
        if sample.labels.get("domain_index") == "0"
    }


def errors(sampler: Sampler) -> int:
    return sampler.snapshot.errors_total.get("powercap", 0)


def test_reading_above_the_range_is_not_kept_forever(tmp_path: Path) -> None:
    """The reviewer's reproducer: DRAM 6 uJ, then 1e23 uJ, then 7 uJ again."""
    write_zone(tmp_path, "0", "package-0", 1_000_000)
    dram = write_zone(tmp_path, "0:0", "dram", 6)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    assert exposed(sampler)["geopm_dram_energy_joules_total"] == pytest.approx(6e-6)
    (dram / "energy_uj").write_text(f"{10**23}\n")
    sampler.sample_once()
    assert "geopm_dram_energy_joules_total" not in exposed(sampler)  # no value, not a made-up one
    assert "geopm_dram_power_watts" not in exposed(sampler)
    assert errors(sampler) == 1 and "above max_energy_range_uj" in sampler.snapshot.last_error
    assert sampler.snapshot.up["powercap"]
    (dram / "energy_uj").write_text("7\n")
    sampler.sample_once()
    shown = exposed(sampler)
    assert shown["geopm_dram_energy_joules_total"] == pytest.approx(7e-6)  # continues from 6 uJ
    assert 0 <= shown["geopm_dram_power_watts"] < 1
    assert errors(sampler) == 1
    assert sampler.snapshot.counter_resets_total.get("powercap", 0) == 0


def test_range_bounds_on_the_recorded_capture(tmp_path: Path) -> None:
    """max_energy_range_uj itself is a value the counter takes; one more is not."""
    sysfs = extract_ttar(POWERCAP / "node_exporter_powercap_section.ttar", tmp_path)
    energy = sysfs / "class/powercap/intel-rapl:0/energy_uj"
    sampler = Sampler([PowercapBackend(sysfs)], 1.0)
    sampler.sample_once()
    start = totals(sampler)[PACKAGE0]
    core = totals(sampler)[SignalKey("CPU_CORE_ENERGY", "package", 0)]
    energy.write_text(f"{MAX_RANGE_UJ + 1}\n")
    sampler.sample_once()
    assert PACKAGE0 not in totals(sampler) and errors(sampler) == 1
    assert totals(sampler)[SignalKey("CPU_CORE_ENERGY", "package", 0)] == core
    # 240422.366267 J in the capture; 10 kJ later: below the 20 kW ceiling's 1 s of slack
    energy.write_text("250422366267\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(start + 10000.0, abs=1e-6)


def test_wrap_adds_max_plus_one(tmp_path: Path) -> None:
    """max_energy_range_uj is a value the counter takes, then 0: from it to 2 is 3 uJ."""
    zone = write_zone(tmp_path, "0", "package-0", MAX_RANGE_UJ)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    assert errors(sampler) == 0
    (zone / "energy_uj").write_text("2\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx((MAX_RANGE_UJ + 3) / 1e6, abs=1e-7)
    assert sampler.snapshot.counter_resets_total.get("powercap", 0) == 0


def test_implausible_increase_is_refused_and_reported(tmp_path: Path) -> None:
    """In range, but 200 kJ within a second: more than any zone of a node draws."""
    zone = write_zone(tmp_path, "0", "package-0", 1_000_000)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    (zone / "energy_uj").write_text("200000000000\n")
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(1.0)
    assert errors(sampler) == 1 and "could draw" in sampler.snapshot.last_error
    assert "geopm_cpu_power_watts" not in exposed(sampler)
    (zone / "energy_uj").write_text("200001000000\n")  # counted again from the new base
    sampler.sample_once()
    assert totals(sampler)[PACKAGE0] == pytest.approx(2.0)


@pytest.mark.parametrize("max_range", ["0", "", "abc", "-5", "+262143328850", "1_000"])
def test_bad_range_gives_no_sample(tmp_path: Path, max_range: str) -> None:
    write_zone(tmp_path, "0", "package-0", 1_000_000)
    zone = write_zone(tmp_path, "1", "package-1", 1_000_000)
    (zone / "max_energy_range_uj").write_text(max_range + "\n")
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    assert set(totals(sampler)) == {PACKAGE0}
    assert errors(sampler) == 1 and "max_energy_range_uj" in sampler.snapshot.last_error


@pytest.mark.parametrize("text", ["+5", "1_0", " 1 2", "5.0", "0x10"])
def test_energy_not_written_as_sysfs_writes_it(tmp_path: Path, text: str) -> None:
    """int() takes some of these; no kernel writes them."""
    write_zone(tmp_path, "0", "package-0", 1_000_000)
    write_zone(tmp_path, "1", "package-1", text)
    sampler = Sampler([PowercapBackend(tmp_path)], 1.0)
    sampler.sample_once()
    assert set(totals(sampler)) == {PACKAGE0} and errors(sampler) == 1


GARBAGE = st.one_of(
    st.sampled_from([b"", b"\n", b"nan", b"1e3", b"1_0", b"+5", b"-0", b"0x10", "٣".encode()]),
    st.tuples(
        st.binary(max_size=8), st.sampled_from([b"x", b"\xff", b"-", b"."]), st.binary(max_size=8)
    ).map(b"".join),
)


@st.composite
def readings(draw: st.DrawFn) -> tuple[int, list[tuple[bytes, int | None]]]:
    """A zone's max_energy_range_uj and the energy_uj files it shows, each with the value it
    stands for (None: not a reading). In-range values jump anywhere or step forward (so wrap)."""
    top = draw(st.one_of(st.just(MAX_RANGE_UJ), st.integers(1, 2**40)))
    steps: list[tuple[bytes, int | None]] = []
    last = draw(st.integers(0, top))
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["step", "step", "jump", "above", "negative", "garbage"]))
        if kind == "step":
            last = (last + draw(st.integers(0, top))) % (top + 1)
            steps.append((b"%d\n" % last, last))
        elif kind == "jump":
            last = draw(st.integers(0, top))
            steps.append((b"%d\n" % last, last))
        elif kind == "above":
            steps.append((b"%d\n" % draw(st.integers(top + 1, 2**80)), None))
        elif kind == "negative":
            steps.append((b"%d\n" % draw(st.integers(-(2**40), -1)), None))
        else:
            steps.append((draw(GARBAGE), None))
    return top, steps


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=readings())
def test_counter_never_goes_down_nor_beyond_the_raw_increases(
    tmp_path: Path, case: tuple[int, list[tuple[bytes, int | None]]]
) -> None:
    """Whatever the zone shows, the exposed total only grows, by at most the increase of the
    raw counter (wraps included) between two good readings; each bad reading is an error."""
    top, steps = case
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        write_zone(root, "0", "package-0", 1_000_000)  # a good zone keeps the source up
        dram = write_zone(root, "0:0", "dram", 0, max_range_uj=top) / "energy_uj"
        sampler = Sampler([PowercapBackend(root)], 1.0)
        good: int | None = None
        total: float | None = None
        bad = 0
        for text, value in steps:
            dram.write_bytes(text)
            sampler.sample_once()
            assert sampler.snapshot.up["powercap"]
            shown = totals(sampler).get(DRAM0)
            if value is None:
                bad += 1
                assert shown is None
                continue
            assert shown is not None and math.isfinite(shown)
            if total is not None and good is not None:
                raw_increase = value - good if value >= good else top + 1 - good + value
                assert total <= shown <= total + raw_increase / 1e6 + 1e-9 * max(shown, 1.0)
            good, total = value, shown
        assert errors(sampler) >= bad
        assert all(r.value >= 0 for r in sampler.snapshot.readings if r.unit == "watts")
    finally:
        shutil.rmtree(root, ignore_errors=True)
