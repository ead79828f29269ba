"""geopmdpy.pio stand-in (see geopmdpy/pio.py): batch reads of a modelled platform.

Model: every ``*_ENERGY`` signal of a domain instance grows at the power set for its kind
(``CPU``, ``DRAM``, ``GPU``) from a start value (CPU packages start at the energies of the
recorded geopmsession trace); ``*_POWER`` is GEOPM's derivative of that energy over the last
two batches (NaN on the first); ``TIME`` is seconds since the first batch.
"""

import math
import time
from pathlib import Path

from . import topo

_SIGNALS_FILE = (
    Path(__file__).resolve().parents[2]
    / "geopmdpy-3.2.2_TestPrometheusExporter_MOCK_SIGNAL_NAMES.txt"
)
SIGNALS = sorted(set(_SIGNALS_FILE.read_text().split()))
RECORDED_ENERGY = [51985.06903076172, 216490.1282958984]

# geopm::Agg::m_type_e / string_format_e / IOGroup::m_signal_behavior_e values used here.
_AGG_SUM, _AGG_AVERAGE, _AGG_EXPECT_SAME = 0, 1, 12
_FORMAT_DOUBLE, _FORMAT_INTEGER = 0, 1
_CONSTANT, _MONOTONE, _VARIABLE = 0, 1, 2

_config = {
    "power": {"CPU": 100.0, "DRAM": 10.0, "GPU": 250.0},
    "clock": time.monotonic,
    "fail_read": None,
}
_pushed = []
_batch_started = False
_values = None
_previous = {}  # (name, domain, idx) -> (time, energy) of the previous batch
_origin = None


def _standin_configure(power=None, clock=None, counts=None, fail_read=None):
    """Test hook (not in the real module): power per kind, clock, domain counts, failures."""
    if power is not None:
        _config["power"] = dict(power)
    if clock is not None:
        _config["clock"] = clock
    if counts is not None:
        topo._COUNTS.update(counts)
    _config["fail_read"] = fail_read


def _kind(name):
    return name.split("::")[-1].split("_")[0]


def _base(name):
    return name.split("::")[-1]


def signal_names():
    return list(SIGNALS)


def signal_domain_type(signal_name):
    if signal_name not in SIGNALS:
        raise RuntimeError("geopm_pio_signal_domain_type() failed: <geopm> Invalid argument")
    kind = _kind(signal_name)
    if kind == "GPU":
        return topo.DOMAIN_GPU
    if kind in ("CPU", "DRAM"):
        return topo.DOMAIN_PACKAGE
    return topo.DOMAIN_BOARD


def signal_info(signal_name):
    if signal_name not in SIGNALS:
        raise RuntimeError("geopm_pio_signal_info() failed: <geopm> Invalid argument")
    base = _base(signal_name)
    if base.endswith("ENERGY") or base == "TIME" or "CYCLES" in base:
        return (_AGG_SUM, _FORMAT_DOUBLE, _MONOTONE)
    if any(word in base for word in ("MAX", "MIN", "STEP", "STICKER", "FREQ_")):
        return (_AGG_EXPECT_SAME, _FORMAT_INTEGER, _CONSTANT)
    return (_AGG_AVERAGE, _FORMAT_DOUBLE, _VARIABLE)


def signal_description(signal_name):
    if signal_name not in SIGNALS:
        raise RuntimeError("geopm_pio_signal_description() failed: <geopm> Invalid argument")
    base = _base(signal_name)
    units = "none"
    if base == "TIME":
        units = "seconds"
    elif "ENERGY" in base:
        units = "joules"
    elif "POWER" in base:
        units = "watts"
    elif "FREQ" in base:
        units = "hertz"
    elif "TEMPERATURE" in base:
        units = "celsius"
    domain = topo.domain_name(signal_domain_type(signal_name))
    return (
        f"    description: stand-in signal\n    units: {units}\n    aggregation: sum\n"
        f"    domain: {domain}\n    iogroup: StandIn"
    )


def push_signal(signal_name, domain_type, domain_idx):
    """Checks in PlatformIOImp::push_signal's order, with its messages."""
    domain_type = topo.domain_type(domain_type)
    prefix = "geopm_pio_push_signal() failed: <geopm> Invalid argument: "
    if _batch_started:
        raise RuntimeError(
            prefix + "PlatformIOImp::push_signal(): pushing signals after read_batch() or adjust()."
        )
    if not 0 <= domain_idx < topo.num_domain(domain_type):
        raise RuntimeError(prefix + "PlatformIOImp::push_signal(): domain_idx is out of range")
    # Unknown, or asked at a domain finer than its native one (not nested in it).
    if signal_name not in SIGNALS or not topo._contains(
        domain_type, signal_domain_type(signal_name)
    ):
        raise RuntimeError(
            prefix + f'PlatformIOImp::push_signal(): no support for signal name "{signal_name}" '
            f'and domain type "{domain_type}"'
        )
    request = (signal_name, domain_type, domain_idx)
    if request in _pushed:
        return _pushed.index(request)
    _pushed.append(request)
    return len(_pushed) - 1


def _energy(kind, domain_idx, elapsed):
    start = (
        RECORDED_ENERGY[domain_idx]
        if kind == "CPU" and domain_idx < 2
        else 1000.0 * (domain_idx + 1)
    )
    return start + _config["power"].get(kind, 0.0) * elapsed


def read_batch():
    global _batch_started, _values, _origin
    if _config["fail_read"]:
        raise RuntimeError("geopm_pio_read_batch() failed: " + _config["fail_read"])
    _batch_started = True
    now = _config["clock"]()
    if _origin is None:
        _origin = now
    elapsed = now - _origin
    values = []
    for name, domain, idx in _pushed:
        base, kind = _base(name), _kind(name)
        if base == "TIME":
            values.append(elapsed)
        elif base.endswith("ENERGY"):
            values.append(_energy(kind, idx, elapsed))
        elif base.endswith("POWER"):
            energy = _energy(kind, idx, elapsed)
            last = _previous.get((name, domain, idx))
            _previous[(name, domain, idx)] = (now, energy)
            if last is None or now <= last[0]:
                values.append(math.nan)
            else:
                values.append((energy - last[1]) / (now - last[0]))
        else:
            values.append(0.0)
    _values = values


def sample(signal_idx):
    if _values is None:
        raise RuntimeError(
            "geopm_pio_sample() failed: <geopm> Runtime error: "
            "PlatformIOImp::sample(): read_batch() not called prior to call to sample()"
        )
    if not 0 <= signal_idx < len(_values):
        raise RuntimeError(
            "geopm_pio_sample() failed: <geopm> Invalid argument: "
            "PlatformIOImp::sample(): signal_idx out of range"
        )
    return _values[signal_idx]


def reset():
    global _batch_started, _values, _origin
    _pushed.clear()
    _previous.clear()
    _batch_started = False
    _values = None
    _origin = None
