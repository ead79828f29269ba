"""The one error type and the one capped problem collector every post-job source uses.

A source meets two kinds of trouble. An input that cannot be read at all raises
``SourceError`` (its message names the file and the problem; the source turns it into one
error line and goes on with the job's other inputs). Damage inside an input that is otherwise
read becomes problem lines in a ``Problems`` collector, which keeps the first
``MAX_PROBLEMS_PER_INPUT`` and sums up the rest in one line, so a garbage file cannot flood
the job's log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

MAX_PROBLEMS_PER_INPUT = 10
"""Problem lines kept per input (file, trace directory); the rest become one summary line."""


class SourceError(ValueError):
    """The input cannot be read at all (the message names the file and the problem)."""


class Problems:
    """Problem lines about one input, capped at ``limit``; list-like (``append``/``extend``,
    iteration) so readers can collect into it as into a list of strings.

    ``more`` is the summary line for what the cap dropped, after ``"<input>: "``; it may use
    ``{count}`` (lines dropped) and ``{weight}`` (the sum of their weights, e.g. events).
    """

    def __init__(
        self,
        source: str | Path,
        *,
        limit: int = MAX_PROBLEMS_PER_INPUT,
        more: str = "... and {count:,} more problems",
    ) -> None:
        self.source = source
        self.limit = limit
        self.more = more
        self.kept: list[str] = []
        self.dropped = 0
        self.dropped_weight = 0

    def append(self, line: str, weight: int = 1) -> None:
        """Keep ``line`` (a whole "<file>: <problem>" line) unless the cap is reached."""
        if len(self.kept) < self.limit:
            self.kept.append(line)
        else:
            self.dropped += 1
            self.dropped_weight += weight

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)

    def add(self, message: str, lineno: int | None = None) -> None:
        """Keep ``"<source>[:<lineno>]: <message>"``."""
        where = f"{self.source}:{lineno}" if lineno is not None else f"{self.source}"
        self.append(f"{where}: {message}")

    @property
    def total(self) -> int:
        return len(self.kept) + self.dropped

    def lines(self) -> list[str]:
        """The kept lines, then one summary line when the cap dropped any."""
        if not self.dropped:
            return list(self.kept)
        summary = self.more.format(count=self.dropped, weight=self.dropped_weight)
        return [*self.kept, f"{self.source}: {summary}"]

    def __iter__(self) -> Iterator[str]:
        return iter(self.lines())

    def __len__(self) -> int:
        return len(self.lines())

    def __bool__(self) -> bool:
        return self.total > 0
