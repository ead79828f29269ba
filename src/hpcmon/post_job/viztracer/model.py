"""What a VizTracer trace holds once read: per-thread call lists and the trace's facts.

Calls are plain ``(start_us, -duration_us, name)`` tuples, not objects (see reader.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

Call = tuple[float, float, str]  # (start in us, MINUS the duration in us, name)
ThreadKey = tuple[object, object]  # (pid, tid): forked processes reuse their parent's tid


@dataclass(slots=True)
class ThreadCalls:
    """The timed calls of one (pid, tid), unsorted (VizTracer writes them in exit order)."""

    pid: object
    tid: object
    calls: list[Call] = field(default_factory=list)
    # B events never closed by an E: calls still on the stack when tracing stopped.
    unfinished: list[tuple[float, str]] = field(default_factory=list)


@dataclass(slots=True)
class ViztracerTrace:
    path: Path
    threads: dict[ThreadKey, ThreadCalls]
    process_names: dict[object, str]
    thread_names: dict[ThreadKey, str]
    phase_counts: Counter[str]
    event_count: int
    file_bytes: int
    json_bytes: int
    overflow: bool
    version: str | None
    base_time_ns: int | None  # epoch of ts 0, only in traces saved by the inline API
    errors: list[str]

    @property
    def call_count(self) -> int:
        return sum(len(t.calls) + len(t.unfinished) for t in self.threads.values())

    @property
    def ignored_count(self) -> int:
        """Events that carry no call: instant, counter, object, async, flow... (M excluded)."""
        return sum(n for phase, n in self.phase_counts.items() if phase not in ("X", "B", "E", "M"))

    def complete_from(self) -> float | None:
        """After VizTracer's buffer overflowed: when the trace becomes complete.

        The ring buffer drops the calls that ENDED first, so a process's trace is complete from
        its earliest remaining call end; with several processes, the latest of those.
        """
        earliest_end: dict[object, float] = {}
        for thread in self.threads.values():
            if thread.calls:
                end = min(start - negative_duration for start, negative_duration, _ in thread.calls)
                known = earliest_end.get(thread.pid)
                earliest_end[thread.pid] = end if known is None else min(known, end)
        return max(earliest_end.values()) if earliest_end else None

    def time_range(self) -> tuple[float, float] | None:
        """First start and last end over all calls (microseconds, VizTracer's clock)."""
        first = last = None
        for thread in self.threads.values():
            for start, negative_duration, _ in thread.calls:
                end = start - negative_duration
                if first is None or start < first:
                    first = start
                if last is None or end > last:
                    last = end
            for start, _ in thread.unfinished:
                if first is None or start < first:
                    first = start
                if last is None or start > last:
                    last = start
        if first is None or last is None:
            return None
        return first, last
