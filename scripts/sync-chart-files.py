#!/usr/bin/env python3
"""Refresh helm/hpcmon/files/ from `hpcmon-dashboards generate`.

The chart reads its dashboards, rule files and Grafana provisioning from that folder with
.Files.Get/.Files.Glob. It is the generator's output copied verbatim, never edited by hand:
tests/deploy/test_helm_generated.py regenerates it and fails when the two differ.

    .venv/bin/python scripts/sync-chart-files.py [--config FILE] [--check]
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART_FILES = ROOT / "helm" / "hpcmon" / "files"


def generate(out: Path, config: Path | None = None) -> None:
    """Run the generator (from this repository) into ``out``; raise with its message if it fails."""
    command = [sys.executable, "-P", "-m", "hpcmon.dashboards", "generate", "--out", str(out)]
    if config is not None:
        command += ["--config", str(config)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        message = result.stderr.strip() or f"exit status {result.returncode}"
        raise RuntimeError(f"hpcmon-dashboards generate failed: {message}")


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def differences(generated: Path, chart_files: Path) -> list[str]:
    """Relative paths that are missing, extra or different in ``chart_files``."""
    want, have = tree(generated), tree(chart_files) if chart_files.is_dir() else {}
    return sorted(
        [f"missing {p}" for p in want.keys() - have.keys()]
        + [f"extra {p}" for p in have.keys() - want.keys()]
        + [f"differs {p}" for p in want.keys() & have.keys() if want[p] != have[p]]
    )


def replace(generated: Path, chart_files: Path) -> None:
    """Make ``chart_files`` an exact copy of ``generated`` (a new folder, then one rename)."""
    staging = chart_files.with_name(chart_files.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(generated, staging)
    assert not filecmp.dircmp(generated, staging).diff_files
    shutil.rmtree(chart_files, ignore_errors=True)
    staging.rename(chart_files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="generator config (thresholds, datasources)")
    parser.add_argument(
        "--check", action="store_true", help="only report differences; exit 1 if any"
    )
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hpcmon-generate-") as scratch:
        generated = Path(scratch)
        try:
            generate(generated, options.config)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"sync-chart-files: {exc}", file=sys.stderr)
            return 2
        changes = differences(generated, CHART_FILES)
        if options.check:
            for change in changes:
                print(change)
            return 1 if changes else 0
        if changes:
            replace(generated, CHART_FILES)
        print(
            f"sync-chart-files: {len(tree(CHART_FILES))} files in "
            f"{CHART_FILES.relative_to(ROOT)}, {len(changes)} changed"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
