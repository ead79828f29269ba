"""`make bench`: run every benchmarks/bench_*.py in turn (one at a time, so figures are not
disturbed by each other) and print where each one's figures were written."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if any(name in s.stem for name in argv)]
    failed = []
    for script in scripts:
        print(f"\n######## {script.stem}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(
            f"######## {script.stem}: exit {code}, {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        if code:
            failed.append(script.stem)
    print(f"\nresults: {HERE.parent / 'bench-results'}/*.json")
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
