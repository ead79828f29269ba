"""hpcmon-post-job command line (not yet implemented)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print("hpcmon-post-job: not yet implemented", file=sys.stderr)
    return 2
