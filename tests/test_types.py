"""The type checker an editor runs (pyright, with the project's own settings in pyproject.toml)
finds every import of hpcmon and no type error, in the package, its tests, devtools and the
benchmarks: what `make lint` runs, proved here so a change that breaks it does not land."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Slow (runs pyright over the project (make lint runs it too)): not in `make check`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PYRIGHT = shutil.which("pyright", path=str(Path(sys.executable).parent))


def run_pyright() -> dict:
    if PYRIGHT is None:
        pytest.skip("pyright is not installed (the test extra installs it)")
    done = subprocess.run(
        [PYRIGHT, "--outputjson"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: errors found; other: it failed
    return json.loads(done.stdout)


def test_pyright_resolves_every_hpcmon_import_and_finds_no_error() -> None:
    found = run_pyright()
    diagnostics = found["generalDiagnostics"]
    unresolved = [
        d["message"]
        for d in diagnostics
        if d.get("rule") == "reportMissingImports" and "hpcmon" in d["message"]
    ]
    assert unresolved == []
    errors = [
        f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in diagnostics
        if d["severity"] == "error"
    ]
    assert errors == []
    # the package itself is what was checked, not an empty selection
    assert found["summary"]["filesAnalyzed"] > 250
