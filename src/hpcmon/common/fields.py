"""Numbers read back from points or database rows, which a damaged point may fill with text,
a bool or 1e400: one rule for the hook and the report."""

from __future__ import annotations

import math
from collections.abc import Mapping


def finite_field(row: Mapping[str, object], name: str) -> float | None:
    """The field as a finite float, or None (absent, text, bool, non-finite or absurd)."""
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) < 1e300 else None
