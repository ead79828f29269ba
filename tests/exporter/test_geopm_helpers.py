"""Fixture trees for the GEOPM/powercap tests, built from the recorded sysfs captures.

The captures in tests/data/geopm/powercap/ are ttar archives (prometheus/node_exporter and
prometheus/procfs test fixtures) with a flattened ``path<TAB>value`` copy made upstream of
this project; the tests here check that the extraction gives exactly the flattened data.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "geopm"
POWERCAP = DATA / "powercap"
STANDIN = DATA / "standin"
SESSION_STANDIN = DATA / "bin" / "geopmsession"


def extract_ttar(archive: Path, destination: Path) -> Path:
    """Unpack a ttar archive; paths are re-rooted after their ``sys/`` component, so the
    returned directory is what ``--path.sysfs`` takes."""
    lines = archive.read_text().splitlines()
    index = 0

    def target(path: str) -> Path:
        relative = path.split("sys/", 1)[1] if "sys/" in path else ""
        return destination / relative

    while index < len(lines):
        line = lines[index]
        if line.startswith("Directory: "):
            target(line[len("Directory: ") :]).mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            path = target(line[len("Path: ") :])
            count = int(lines[index + 1].split(":", 1)[1])
            body = lines[index + 2 : index + 2 + count]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(b + "\n" for b in body))
            index += 1 + count
        index += 1
    return destination


def flat_fixture(tsv: Path) -> dict[str, str | None]:
    """The flattened capture: relative path after ``sys/`` -> value (None for directories)."""
    result: dict[str, str | None] = {}
    for line in tsv.read_text().splitlines():
        path, _, value = line.partition("\t")
        relative = path.split("sys/", 1)[1].rstrip("/")
        result[relative] = None if value == "<dir>" else value
    return result


def write_zone(
    sysfs: Path, zone: str, name: str, energy_uj: int | str, max_range_uj: int | None = 262143328850
) -> Path:
    """A powercap zone as the kernel lays it out (only the files the exporter reads)."""
    path = sysfs / "class" / "powercap" / f"intel-rapl:{zone}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    if max_range_uj is not None:
        (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return path


@contextlib.contextmanager
def as_user(uid: int = 65534) -> Iterator[None]:
    """Run the block with an unprivileged effective uid (tests run as root here)."""
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)


def test_node_exporter_capture_extracts_to_its_flat_listing(tmp_path: Path) -> None:
    root = extract_ttar(POWERCAP / "node_exporter_powercap_section.ttar", tmp_path)
    expected = flat_fixture(POWERCAP / "node_exporter_powercap_fixture_flat.tsv")
    for relative, value in expected.items():
        path = root / relative
        if value is None:
            assert path.is_dir(), relative
        else:
            assert path.read_text().strip() == value, relative


def test_procfs_capture_extracts_to_its_flat_listing(tmp_path: Path) -> None:
    root = extract_ttar(POWERCAP / "procfs_powercap_section.ttar", tmp_path)
    expected = flat_fixture(POWERCAP / "procfs_powercap_fixture_flat.tsv")
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert files == {k for k, v in expected.items() if v is not None}
    assert (root / "class/powercap/intel-rapl:a/name").read_text() == "package-10\n"
