"""geopmdpy backend against a stand-in geopmdpy package that follows the real pio/topo API
(libgeopmd cannot be installed here), and the auto backend choice."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from hpcmon.exporter.geopm.collector import make_backends
from hpcmon.exporter.geopm.geopmdpy_backend import GeopmdpyBackend
from hpcmon.exporter.geopm.model import BackendError, Request, SignalKey
from hpcmon.exporter.geopm.sampler import Sampler
from tests.exporter.test_geopm_helpers import STANDIN, write_zone

RECORDED_PACKAGE0_J = 51985.06903076172  # CPU_ENERGY-package-0 in the recorded trace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _forget_geopmdpy() -> None:
    for name in [n for n in sys.modules if n == "geopmdpy" or n.startswith("geopmdpy.")]:
        del sys.modules[name]


@pytest.fixture
def pio(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    _forget_geopmdpy()
    monkeypatch.syspath_prepend(str(STANDIN))
    import geopmdpy.pio as module

    clock = Clock()
    module._standin_configure(
        power={"CPU": 100.0, "DRAM": 10.0, "GPU": 250.0},
        clock=clock,
        counts={"gpu": 8, "package": 2},
    )
    monkeypatch.setattr(module, "clock", clock, raising=False)  # for the tests to advance it
    yield module
    module.reset()
    _forget_geopmdpy()


def by_signal(sampler: Sampler) -> dict[tuple[str, int], float]:
    return {(r.key.signal, r.key.index): r.value for r in sampler.snapshot.readings}


def test_stand_in_follows_the_push_before_read_rule(pio: ModuleType) -> None:
    pio.push_signal("CPU_ENERGY", "package", 0)
    pio.read_batch()
    with pytest.raises(RuntimeError, match="push_signal"):
        pio.push_signal("CPU_POWER", "package", 0)
    pio.reset()
    with pytest.raises(RuntimeError, match="no support for signal name"):
        pio.push_signal("NOT_A_SIGNAL", "board", 0)


def test_first_power_sample_is_nan_and_not_exposed(pio: ModuleType) -> None:
    sampler = Sampler([GeopmdpyBackend()], 1.0)
    sampler.sample_once()
    first = by_signal(sampler)
    assert first[("CPU_ENERGY", 0)] == RECORDED_PACKAGE0_J
    assert ("CPU_POWER", 0) not in first  # GEOPM's derivative is NaN on the first batch
    assert ("GPU_POWER", 7) not in first
    pio.clock.now += 2.0
    sampler.sample_once()
    second = by_signal(sampler)
    assert second[("CPU_ENERGY", 0)] == pytest.approx(RECORDED_PACKAGE0_J + 200.0)
    assert second[("CPU_POWER", 1)] == pytest.approx(100.0)
    assert second[("GPU_ENERGY", 7)] == pytest.approx(8000.0 + 500.0)
    assert second[("GPU_POWER", 7)] == pytest.approx(250.0)
    assert second[("DRAM_POWER", 0)] == pytest.approx(10.0)
    assert sampler.snapshot.up == {"geopmdpy": True}


def test_units_and_monotone_from_the_api(pio: ModuleType) -> None:
    backend = GeopmdpyBackend(
        [
            Request("TIME", "board", 0),
            Request("CPU_FREQUENCY_STATUS", "package", None),
            Request("GPU_UTILIZATION", "gpu", 3),
        ]
    )
    backend.open()
    batch = backend.read()
    described = {(s.key.signal, s.key.index): (s.monotone, s.unit) for s in batch.samples}
    assert described == {
        ("TIME", 0): (True, "seconds"),
        ("CPU_FREQUENCY_STATUS", 0): (False, "hertz"),
        ("CPU_FREQUENCY_STATUS", 1): (False, "hertz"),
        ("GPU_UTILIZATION", 3): (False, ""),
    }
    backend.close()
    backend.open()  # reset() makes pushing allowed again
    assert len(backend.read().samples) == 4


def test_unavailable_signals(pio: ModuleType) -> None:
    backend = GeopmdpyBackend(
        [Request("BOARD_ENERGY", "board", 0), Request("CPU_ENERGY", "package", 5)]
    )
    with pytest.raises(BackendError, match="none of the requested signals"):
        backend.open()


def test_a_refused_request_does_not_stop_the_others(pio: ModuleType) -> None:
    """GEOPM refuses a signal at a domain finer than its native one (CPU_ENERGY is read per
    package, not per core): that request is skipped, the rest is sampled."""
    with pytest.raises(RuntimeError, match='no support for signal name "CPU_ENERGY"'):
        pio.push_signal("CPU_ENERGY", "core", 0)
    pio.reset()
    backend = GeopmdpyBackend(
        [Request("CPU_ENERGY", "core", None), Request("CPU_ENERGY", "package", 1)]
    )
    backend.open()
    try:
        batch = backend.read()
    finally:
        backend.close()
    assert [(s.key, s.value) for s in batch.samples] == [
        (SignalKey("CPU_ENERGY", "package", 1), 216490.1282958984)  # the recorded start
    ]


def test_read_failure_sets_down_then_recovers(pio: ModuleType) -> None:
    clock = Clock()
    sampler = Sampler([GeopmdpyBackend()], 1.0, clock=clock)
    sampler.sample_once()
    pio._standin_configure(fail_read="<geopm> Runtime error: service went away")
    snapshot = sampler.sample_once()
    assert snapshot.up == {"geopmdpy": False} and snapshot.readings == ()
    assert "service went away" in snapshot.last_error
    pio._standin_configure()
    clock.now += 0.5
    assert not sampler.sample_once().up["geopmdpy"]  # still backing off (1 s)
    clock.now += 1.0
    snapshot = sampler.sample_once()
    assert snapshot.up["geopmdpy"]
    energies = [
        r.value for r in snapshot.readings if r.key == SignalKey("CPU_ENERGY", "package", 0)
    ]
    assert energies == [pytest.approx(RECORDED_PACKAGE0_J)]  # re-based, not double counted
    assert snapshot.errors_total["geopmdpy"] == 1


def options(**values: object) -> argparse.Namespace:
    defaults: dict[str, object] = {
        "geopm_backend": "auto",
        "geopm_interval": 1.0,
        "geopm_signals": None,
        "geopm_session_path": "geopmsession",
        "path_sysfs": "/nonexistent",
    }
    defaults.update(values)
    return argparse.Namespace(**defaults)


def test_auto_prefers_geopmdpy(pio: ModuleType, tmp_path: Path) -> None:
    write_zone(tmp_path, "0", "package-0", 1_000_000)
    sampler = Sampler(make_backends(options(path_sysfs=str(tmp_path))), 1.0)
    assert sampler.sample_once().up == {"geopmdpy": True, "powercap": False}


def test_auto_falls_back_to_powercap_then_down(tmp_path: Path) -> None:
    _forget_geopmdpy()
    write_zone(tmp_path, "0", "package-0", 1_000_000)
    sampler = Sampler(make_backends(options(path_sysfs=str(tmp_path))), 1.0)
    snapshot = sampler.sample_once()
    assert snapshot.up == {"geopmdpy": False, "powercap": True}
    assert snapshot.errors_total["geopmdpy"] == 1
    down = Sampler(make_backends(options(path_sysfs=str(tmp_path / "empty"))), 1.0)
    assert down.sample_once().up == {"geopmdpy": False, "powercap": False}
