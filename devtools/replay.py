"""Replay recorded jobstats captures with counters that advance over time.

For demos and manual tests: the ``file`` source of the exporter re-reads the output at every
sample, so Prometheus sees real job ids and record layouts with live rates. Each job grows at
its own steady speed (derived from its id, so runs are repeatable), proportional to what the
capture recorded; ``snapshot_time`` is set to the wall clock.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_COUNTER = re.compile(r"((?:samples|sum|sumsq):\s*)(\d+)")
_JOB_ID = re.compile(r"^- job_id:\s*\"?([^\"\n]*?)\"?\s*$", re.MULTILINE)
_OPERATION_LINE = re.compile(r"^(\s*)(\w+):(\s*\{[^}\n]*\})", re.MULTILINE)
STORM_REQUEST_BYTES = 4096  # a storm job's reads and writes are this small by default
_SNAPSHOT = re.compile(r"^(\s*snapshot_time\s*:\s*)\d+(\.\d+)?", re.MULTILINE)
_JOB_SPLIT = re.compile(r"^(?=- job_id:)", re.MULTILINE)
_PARAM = re.compile(r"^((?:obdfilter|mdt)\.[^.\s]+\.job_stats)=", re.MULTILINE)


@dataclass
class _Section:
    param: str
    jobs: list[tuple[str, float]]  # (entry text, growth per second as a fraction of the capture)


def _speed(entry: str) -> float:
    """A repeatable per-job growth speed between 0.02% and 0.5% of the recorded value per second."""
    return 0.0002 + (zlib.crc32(entry.split("\n", 1)[0].encode()) % 1000) / 1000 * 0.0048


def load_sections(paths: Sequence[Path]) -> list[_Section]:
    """Split captures into targets; a bare procfs file becomes a target named after its path."""
    sections: list[_Section] = []
    for path in paths:
        text = path.read_text(errors="replace")
        params = list(_PARAM.finditer(text))
        if params:
            bodies = [
                (m.group(1), text[m.end() : params[i + 1].start() if i + 1 < len(params) else None])
                for i, m in enumerate(params)
            ]
        else:
            kind = "mdt" if "/mdt/" in str(path) or "MDT" in path.name else "obdfilter"
            target = re.search(r"([A-Za-z0-9]+-(?:OST|MDT)[0-9a-fA-F]{4})", path.name)
            name = target.group(1) if target else path.stem.replace(".", "_")
            bodies = [(f"{kind}.{name}.job_stats", text)]
        for param, body in bodies:
            entries = [e for e in _JOB_SPLIT.split(body) if e.startswith("- job_id:")]
            sections.append(_Section(param, [(e.rstrip("\n"), _speed(e)) for e in entries]))
    return sections


def _snapshot(match: re.Match[str], now: float) -> str:
    """Keep the capture's own layout: integer seconds (<= 2.14) or ``secs.nsecs`` (2.15+)."""
    return match.group(1) + (f"{now:.9f}" if match.group(2) else str(int(now)))


def _storm(entry: str, added: int, request_bytes: int) -> str:
    """Add `added` operations to each one-line operation of the entry (reads and writes of
    `request_bytes` each)."""

    def grow(match: re.Match[str]) -> str:
        body = re.sub(
            r"(samples:\s*)(\d+)",
            lambda m: f"{m.group(1)}{int(m.group(2)) + added}",
            match.group(3),
        )
        if match.group(2) in ("read_bytes", "write_bytes"):
            body = re.sub(
                r"(sum:\s*)(\d+)",
                lambda m: f"{m.group(1)}{int(m.group(2)) + added * request_bytes}",
                body,
            )
        return match.group(1) + match.group(2) + ":" + body

    return _OPERATION_LINE.sub(grow, entry)


def render(
    sections: Sequence[_Section],
    elapsed: float,
    now: float,
    storms: Mapping[str, float] | None = None,
    storm_elapsed: float | None = None,
    storm_request_bytes: int = STORM_REQUEST_BYTES,
) -> str:
    """The captures `elapsed` seconds on. `storms`: job id -> operations per second added to
    each of that job's operations (reads and writes of `storm_request_bytes`) for the last
    `storm_elapsed` seconds (default: all along): an I/O storm to alert on."""
    storm_seconds = elapsed if storm_elapsed is None else max(0.0, storm_elapsed)
    out: list[str] = []
    for section in sections:
        out.append(f"{section.param}=\njob_stats:\n")
        for entry, speed in section.jobs:
            factor = 1.0 + speed * elapsed
            grown = _COUNTER.sub(
                lambda m, f=factor: f"{m.group(1)}{int(int(m.group(2)) * f)}", entry
            )
            job = _JOB_ID.search(grown)
            if storms and job and job.group(1) in storms:
                added = int(storms[job.group(1)] * storm_seconds)
                grown = _storm(grown, added, storm_request_bytes)
            out.append(_SNAPSHOT.sub(lambda m: _snapshot(m, now), grown) + "\n")
    return "".join(out)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(captures: Sequence[Path], out: Path, interval: float, stop_after: float | None) -> None:
    sections = load_sections(captures)
    started = time.time()
    while True:
        now = time.time()
        write_atomically(out, render(sections, now - started, now))
        if stop_after is not None and now - started >= stop_after:
            return
        time.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("captures", nargs="+", type=Path, help="job_stats or lctl get_param files")
    parser.add_argument("--out", type=Path, required=True, help="file the exporter reads")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    args = parser.parse_args(argv)
    run(args.captures, args.out, args.interval, args.duration)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
