"""Linux powercap (RAPL) zones under ``<sysfs>/class/powercap/intel-rapl:*`` -> energy samples.

Read: ``name``, ``energy_uj`` and ``max_energy_range_uj``, per zone. The kernel's counter
runs from 0 to ``max_energy_range_uj`` and then starts again at 0, so a reading outside that
range (or not a count, or a zone without a range) is no sample: it is reported and the zone's
counter waits for the next good reading, never taking a bogus value in. AMD packages
appear under the same ``intel-rapl`` control type. Since Linux 5.10 ``energy_uj`` is readable
by root only (CVE-2020-8694), so a permission error is reported as such, zone by zone.
Zones are listed again at every read: hot-plugged or reloaded drivers add and remove them.
"""

from __future__ import annotations

import errno
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from hpcmon.exporter.geopm.model import BackendError, Sample, SampleBatch, SignalKey

SOURCE = "powercap"
ZONE_PREFIX = "intel-rapl:"
_PACKAGE_NAME = re.compile(r"package-(\d+)$")
_NOT_SIGNAL_CHAR = re.compile(r"[^A-Z0-9]+")

PERMISSION_HINT = (
    "permission denied (energy_uj is readable by root only since Linux 5.10): "
    "run the exporter as root or make energy_uj readable, e.g. with a udev rule"
)


@dataclass(frozen=True, slots=True)
class Zone:
    """What is fixed about a zone: where it is, which signal it stands for, its counter's top
    (``max_energy_range_uj``; None when missing, 0 or not a count)."""

    path: str
    key: SignalKey
    max_uj: int | None


def _read_text(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read(4096).decode("ascii", "replace").strip()


def _microjoules(text: str) -> int | None:
    """A count as sysfs writes it (ASCII digits only), else None: ``int()`` would also take
    ``+5``, ``1_0`` or spaces inside, which no kernel writes."""
    return int(text) if text.isascii() and text.isdigit() else None


def _describe(error: OSError) -> str:
    if error.errno in (errno.EACCES, errno.EPERM):
        return PERMISSION_HINT
    return error.strerror or str(error)


def zone_signal(zone_id: str, name: str, parent_name: str | None) -> SignalKey:
    """The GEOPM-style signal a zone stands for, from its id (``0`` or ``0:1``) and names.

    ``package-N`` -> CPU_ENERGY package N, ``psys`` -> BOARD_ENERGY board, ``dram`` ->
    DRAM_ENERGY of its package, ``core``/``uncore`` -> CPU_CORE/UNCORE_ENERGY of its package.
    """
    parts = zone_id.split(":")
    last = parts[-1]
    own_index = int(last) if last.isascii() and last.isdigit() else 0
    package = _PACKAGE_NAME.match(name)
    if package:
        return SignalKey("CPU_ENERGY", "package", int(package.group(1)))
    parent_package = _PACKAGE_NAME.match(parent_name or "")
    package_index = int(parent_package.group(1)) if parent_package else own_index
    lowered = name.lower()
    if lowered == "psys":
        return SignalKey("BOARD_ENERGY", "board", own_index if len(parts) == 1 else 0)
    if lowered == "dram":
        return SignalKey("DRAM_ENERGY", "package", package_index)
    if lowered in ("core", "uncore"):
        return SignalKey(f"CPU_{lowered.upper()}_ENERGY", "package", package_index)
    word = _NOT_SIGNAL_CHAR.sub("_", name.upper()).strip("_") or "ZONE"
    return SignalKey(
        f"POWERCAP_{word}_ENERGY",
        "package" if parent_name else "board",
        package_index if parent_name else own_index,
    )


class PowercapBackend:
    source = SOURCE
    paced = False

    def __init__(self, sysfs: str | os.PathLike[str] = "/sys") -> None:
        self.root = Path(sysfs) / "class" / "powercap"
        self._zones: dict[str, Zone] = {}
        self._epoch = 0

    def open(self) -> None:
        if not self._zone_ids():
            raise BackendError(
                f"{self.root}: no {ZONE_PREFIX}* zones (no RAPL driver, or wrong --path.sysfs)"
            )

    def close(self) -> None:
        self._zones.clear()

    def _zone_ids(self) -> list[str]:
        try:
            return sorted(
                entry.name[len(ZONE_PREFIX) :]
                for entry in os.scandir(self.root)
                if entry.name.startswith(ZONE_PREFIX)
            )
        except OSError:
            return []

    def _zone(self, zone_id: str) -> Zone:
        """Zone metadata, read once per zone appearance (names and ranges do not change)."""
        path = os.path.join(self.root, ZONE_PREFIX + zone_id)
        known = self._zones.get(zone_id)
        if known is not None:
            return known
        name = _read_text(os.path.join(path, "name"))
        parent_name = None
        if ":" in zone_id:
            parent = os.path.join(self.root, ZONE_PREFIX + zone_id.rsplit(":", 1)[0], "name")
            try:
                parent_name = _read_text(parent)
            except OSError:
                parent_name = None
        try:
            max_uj = _microjoules(_read_text(os.path.join(path, "max_energy_range_uj"))) or None
        except OSError:
            max_uj = None
        zone = Zone(path, zone_signal(zone_id, name, parent_name), max_uj)
        if max_uj is not None:  # else read again next time: a glitch must not last forever
            self._zones[zone_id] = zone
        return zone

    @staticmethod
    def _sample(zone: Zone, raw: str) -> Sample | str:
        """The zone's sample, or why its reading is none."""
        microjoules = _microjoules(raw)
        if microjoules is None:
            return f"{zone.path}/energy_uj: not a count of microjoules: {raw[:40]!r}"
        if zone.max_uj is None:
            return (
                f"{zone.path}/max_energy_range_uj: missing, 0 or not a count: "
                "readings cannot be checked nor wraps corrected"
            )
        if microjoules > zone.max_uj:
            return f"{zone.path}/energy_uj: {raw[:40]} above max_energy_range_uj {zone.max_uj}"
        # The counter takes max_energy_range_uj + 1 values (0 to max), hence the wrap range.
        wrap = (zone.max_uj + 1) / 1e6
        return Sample(zone.key, microjoules / 1e6, True, "joules", wrap)

    def read(self) -> SampleBatch:
        batch = SampleBatch(self.source, time.monotonic(), self._epoch)
        zone_ids = self._zone_ids()
        if not zone_ids:
            self._zones.clear()
            raise BackendError(f"{self.root}: no {ZONE_PREFIX}* zones")
        for gone in set(self._zones) - set(zone_ids):
            del self._zones[gone]
        seen: set[SignalKey] = set()
        for zone_id in zone_ids:
            try:
                zone = self._zone(zone_id)
                raw = _read_text(os.path.join(zone.path, "energy_uj"))
            except OSError as exc:
                self._zones.pop(zone_id, None)
                if exc.errno != errno.ENOENT:  # a zone that just went away is no error
                    where = os.path.join(self.root, ZONE_PREFIX + zone_id)
                    batch.errors.append(f"{where}: {_describe(exc)}")
                continue
            if zone.key in seen:
                batch.errors.append(
                    f"{zone.path}: duplicate zone for {zone.key.signal} "
                    f"{zone.key.domain} {zone.key.index}, ignored"
                )
                continue
            seen.add(zone.key)
            sample = self._sample(zone, raw)
            if isinstance(sample, str):
                batch.errors.append(sample)
                # NaN: the zone is there but gave no value; its counter is left as it was.
                sample = Sample(zone.key, math.nan, True, "joules")
            batch.samples.append(sample)
        batch.time = time.monotonic()
        if not any(math.isfinite(s.value) for s in batch.samples):
            raise BackendError("; ".join(batch.errors[:3]) or f"{self.root}: no readable zone")
        return batch
