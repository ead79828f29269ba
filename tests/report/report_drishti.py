"""Drishti (drishti-io) as its users run it: the codes it raises on one Darshan log."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

from hpcmon.report.insights import RULES

COVERED = {r.drishti for r in RULES if r.drishti}


def drishti_codes(log: Path, workdir: Path) -> set[str] | None:
    """The covered codes Drishti raises (all at its high or warn level), from its CSV export;
    None when Drishti fails on the log."""
    binary = shutil.which("drishti") or str(Path(sys.executable).parent / "drishti")
    run = subprocess.run(
        [binary, "--csv", "--export_dir", str(workdir), str(log)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = list(workdir.glob(f"{log.stem}*.csv"))
    if run.returncode != 0 or len(found) != 1:
        return None
    with open(found[0]) as handle:
        header, *rows = list(csv.reader(handle))
    values = dict(zip(header, rows[-1], strict=True))
    return {code for code, value in values.items() if value == "True"} & COVERED
