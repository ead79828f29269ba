"""hpcmon-dashboards command line (not yet implemented)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print("hpcmon-dashboards: not yet implemented", file=sys.stderr)
    return 2
