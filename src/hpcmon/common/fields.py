"""Numbers read back from points or database rows, which a damaged point may fill with text,
a bool or 1e400: one rule for the hook and the report; and the rule for a figure made of
several values, each of which may be missing."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


def every_known(values: Iterable[T | None]) -> list[T] | None:
    """The values when none is missing (None), else None: a sum or a ratio of several counters
    is known only when each of them is."""
    given = list(values)
    known = [value for value in given if value is not None]
    return known if len(known) == len(given) else None


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
