"""Lustre ``job_stats`` text -> typed records, in one pass and without a YAML loader.

Accepts every layout from Lustre 2.10 to 2.17 (format notes: docs/exporter-lustre.md): integer or
``secs.nsecs`` times, the unindented 2.15.0 header, ``reqs``/``bytes``/``usecs`` units, glued
``max:16777216``, ``hist: {...}``, quoted and ``\\xHH``-escaped ids, ids with spaces, empty
targets on one line, whole ``lctl get_param`` dumps with other parameters in between, and
lines hard-wrapped by a capture tool. A record that cannot be read is counted and skipped; the
rest of its target is kept. Nothing here raises on bad input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from hpcmon.common.jobid import decode_lustre_jobid

# Operations whose ``sum`` is a byte count (the others count calls, ``usecs`` sums latency).
BYTE_OPERATIONS = ("read_bytes", "write_bytes")
# Real Lustre has a few dozen operation names and few layouts of them; a crafted job_stats with
# new names at every sample would grow the caches keyed by them without end: past this many
# entries such a cache starts over (``make_room``).
MAX_CACHED = 4096
MAX_ERROR_MESSAGES = 20
U64_MAX = 2**64 - 1  # Lustre's counters are u64


def make_room(cache: dict) -> None:
    """Before a new key goes into ``cache``: empty it once it holds ``MAX_CACHED`` keys."""
    if len(cache) >= MAX_CACHED:
        cache.clear()


# One operation line. ``\s`` between fields also accepts a value wrapped onto the next line.
# Numbers are u64 in Lustre: more than 20 digits is not a counter, so the line is malformed.
_OP = re.compile(
    r"^[ \t]*(\w+)[ \t]*:[ \t]*\{\s*samples:\s*(\d{1,20}),\s*unit:\s*(\w+)"
    r"(?:,\s*min:\s*(\d{1,20}),\s*max:\s*(\d{1,20}),\s*sum:\s*(\d{1,20})"
    r"(?:,\s*sumsq:\s*(\d{1,20}))?)?"
    # Other fields (hist, future ones) are skipped, but never a known one: an unreadable
    # ``min: x1`` must fail the line, not be skipped and read as 0.
    r"(?:,\s*(?!(?:samples|unit|min|max|sum)\b)\w+:\s*(?:\{[^{}\n]*\}|[^,{}\s]+))*\s*\}[ \t]*$",
    re.MULTILINE,
)
_JOB_START = re.compile(r"^-[ \t]*job_id[ \t]*:", re.MULTILINE)
# ``lctl get_param`` starts every parameter with ``name=`` at the start of a line.
_PARAM = re.compile(r"^([A-Za-z_][\w.-]*)=", re.MULTILINE)
_TARGET_IN_PATH = re.compile(r"([A-Za-z0-9]+-(?:OST|MDT)[0-9a-fA-F]{4}|(?:OST|MDT)[0-9a-fA-F]{4})")
_COMPONENTS = {"obdfilter": "ost", "ost": "ost", "mdt": "mdt"}


@dataclass(slots=True, frozen=True)
class OpStats:
    """One operation of one job: ``samples`` calls; min/max/sum/sumsq in ``unit``."""

    samples: int
    unit: str
    min: int
    max: int
    sum: int
    sumsq: int | None


@dataclass(slots=True)
class JobEntry:
    """One ``- job_id:`` record. Times are seconds (epoch, or since boot on 2.15.0/2.15.1)."""

    jobid: str
    snapshot_time: float | None
    start_time: float | None
    elapsed_time: float | None
    ops: dict[str, OpStats]


@dataclass(slots=True)
class Target:
    """One MDT or OST: its job records, and what could not be read (counted, first few kept)."""

    component: str
    target: str
    jobs: list[JobEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    malformed: int = 0
    sections: int = 1  # how many times the text listed this target (its jobs are merged)

    def add_error(self, message: str) -> None:
        self.malformed += 1
        if len(self.errors) < MAX_ERROR_MESSAGES:
            self.errors.append(message)


@dataclass(slots=True)
class ParsedText:
    """Every target found in one text, plus problems that belong to no target."""

    targets: list[Target]
    errors: list[str]


def _time(value: str) -> float | None:
    """``1652255674`` or ``1723114647.887515895``; None when absent or unreadable."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0.0 <= seconds < 1e12 else None


HEADER_KEYS = ("snapshot_time", "start_time", "elapsed_time")


def _header_time(line: str) -> tuple[str, float | None] | None:
    """``  snapshot_time:   1652255674`` or 2.15.0's ``snapshot_time   : 1686153914.6 secs.nsecs``
    -> (key, seconds or None if unreadable); None for a line that is no header."""
    key, colon, value = line.partition(":")
    key = key.strip()
    if not colon or key not in HEADER_KEYS:
        return None
    words = value.split()
    return key, _time(words[0]) if words else None


def _op_stats(samples: str, unit: str, low: str, high: str, total: str, sumsq: str) -> OpStats:
    if not low:
        stats = OpStats(int(samples), unit, 0, 0, 0, None)
    else:
        stats = OpStats(
            int(samples), unit, int(low), int(high), int(total), int(sumsq) if sumsq else None
        )
    if max(stats.samples, stats.max, stats.sum) > U64_MAX:  # min <= max; sumsq is not used
        raise _Unreadable(f"a value above 2^64-1 in {unit!r} operation")
    return stats


# Most operation lines repeat verbatim between jobs and between samples (idle operations,
# idle jobs), so a parsed line is remembered: OpStats is frozen and can be shared.
_LINE_CACHE: dict[str, tuple[str, OpStats]] = {}
_LINE_CACHE_LIMIT = 50_000


class _Unreadable(Exception):
    """A record that cannot be used; the message says why."""


def _scan_lines(body: str) -> tuple[dict[str, OpStats], dict[str, float | None]] | None:
    """Fast path, one line at a time. None when some line needs the slow path."""
    ops: dict[str, OpStats] = {}
    times: dict[str, float | None] = {}
    cache = _LINE_CACHE
    op_lines = 0
    for line in body.split("\n"):
        hit = cache.get(line)
        if hit is None:
            if "{" not in line:
                header = _header_time(line) if "_time" in line else None
                if header is not None:
                    if header[1] is None:
                        raise _Unreadable(f"bad {header[0]} {line.strip()[:60]!r}")
                    times[header[0]] = header[1]
                continue
            match = _OP.fullmatch(line)
            if match is None:
                return None
            name, *values = match.groups()
            hit = (name, _op_stats(*values))
            if len(cache) >= _LINE_CACHE_LIMIT:
                cache.clear()
            cache[line] = hit
        ops[hit[0]] = hit[1]
        op_lines += 1
    if op_lines != len(ops):
        raise _Unreadable("the same operation twice")
    return ops, times


def _scan_pattern(body: str) -> tuple[dict[str, OpStats], dict[str, float | None]]:
    """Slow path: lines wrapped by a capture tool, or broken lines."""
    ops = {name: _op_stats(*values) for name, *values in _OP.findall(body)}
    missing = body.count("{") - body.count("hist:") - len(ops)
    if missing:
        raise _Unreadable(f"{missing} unreadable operation line(s) or truncated record")
    times: dict[str, float | None] = {}
    for line in body.split("\n"):
        header = _header_time(line) if "{" not in line else None
        if header is not None:
            if header[1] is None:
                raise _Unreadable(f"bad {header[0]} {line.strip()[:60]!r}")
            times[header[0]] = header[1]
    return ops, times


def _jobid(raw: str) -> str:
    """The decoded id; when its bytes are not UTF-8 it stays in Lustre's escaped form
    (``bad\\xff``), so distinct ids never collapse into one U+FFFD label and the label says
    exactly what Lustre printed."""
    jobid = decode_lustre_jobid(raw)
    if "\ufffd" in jobid and "\ufffd" not in raw:
        jobid = raw.strip()
        if len(jobid) >= 2 and jobid[0] == jobid[-1] == '"':
            jobid = jobid[1:-1]
    return jobid


def _parse_entry(block: str, target: Target, origin: str, index: int) -> JobEntry | None:
    """One record: the text after ``- job_id:`` up to the next record."""
    end = block.find("\n")
    jobid = _jobid(block if end < 0 else block[:end])
    if not jobid:
        target.add_error(f"{origin}: {target.target}: record {index}: empty job_id")
        return None
    body = "" if end < 0 else block[end:]
    try:
        found = _scan_lines(body) or _scan_pattern(body)
    except _Unreadable as exc:
        target.add_error(
            f"{origin}: {target.target}: record {index} (job_id {jobid!r}): {exc}; record skipped"
        )
        return None
    ops, times = found
    return JobEntry(
        jobid, times.get("snapshot_time"), times.get("start_time"), times.get("elapsed_time"), ops
    )


def _split_records(text: str) -> list[str]:
    """Text before the first record, then one string per record (after ``- job_id:``)."""
    if text.count("job_id") == text.count("- job_id:"):
        pieces = ("\n" + text).split("\n- job_id:")
        pieces[0] = pieces[0][1:]
        return pieces
    return _JOB_START.split(text)


def parse_job_stats(text: str, component: str, target: str, origin: str) -> Target:
    """The content of one ``job_stats`` file (what follows ``<param>=`` in lctl output)."""
    result = Target(component, target)
    pieces = _split_records(text)
    preamble = pieces[0].strip()
    if preamble not in ("", "job_stats:"):
        result.add_error(
            f"{origin}: {target}: unexpected text before the first record: {preamble[:60]!r}"
        )
    for index, block in enumerate(pieces[1:]):
        entry = _parse_entry(block, result, origin, index)
        if entry is not None:
            result.jobs.append(entry)
    return result


def target_from_param(param: str) -> tuple[str, str] | None:
    """``obdfilter.fs-OST0000.job_stats`` -> ("ost", "fs-OST0000"); None if not job_stats."""
    prefix, _, rest = param.partition(".")
    name, dot, leaf = rest.rpartition(".")
    component = _COMPONENTS.get(prefix)
    if component is None or not dot or leaf != "job_stats" or not name:
        return None
    return component, name


def target_from_path(path: str) -> tuple[str, str]:
    """Best guess for a bare ``job_stats`` file: ``.../obdfilter/fs-OST0000/job_stats``, or a
    target name inside the file name; the component defaults to ``ost``."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-1].startswith("job_stats") and parts[-3] in _COMPONENTS:
        return _COMPONENTS[parts[-3]], parts[-2]
    name = parts[-1]
    found = _TARGET_IN_PATH.search(name)
    lowered = path.lower()
    mdt_at, ost_at = lowered.rfind("mdt"), max(lowered.rfind("obdfilter"), lowered.rfind("ost"))
    if any(mark in lowered for mark in ("/mdt/", "_mdt_", "/mds/", "_mds_")):
        component = "mdt"
    elif any(mark in lowered for mark in ("/obdfilter/", "_obdfilter_", "/oss/", "_oss_")):
        component = "ost"
    else:
        component = "mdt" if mdt_at > ost_at else "ost"
    return component, (found.group(1) if found else name.rsplit(".", 1)[0] or "unknown")


def _param_starts(text: str) -> list[re.Match[str]]:
    """Every ``name=`` that starts a line. Found from the ``=`` signs (rare in job_stats
    text): a multi-line regex search would try every character of a text of 100+ MB."""
    found = []
    at = text.find("=")
    while at >= 0:  # only the first ``=`` of a line can end a name: one look per line
        match = _PARAM.match(text, text.rfind("\n", 0, at) + 1)
        if match is not None and match.end() == at + 1:
            found.append(match)
        line_end = text.find("\n", at)
        at = text.find("=", line_end) if line_end >= 0 else -1
    return found


def iter_get_param(
    text: str, origin: str, errors: list[str], params: list[re.Match[str]] | None = None
) -> Iterator[Target]:
    """``lctl get_param ...`` output: every ``*.job_stats=`` parameter, others ignored.

    One target at a time, so a caller can pack each before the next is parsed."""
    params = _param_starts(text) if params is None else params
    sections: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for number, match in enumerate(params):
        where = target_from_param(match.group(1))
        if where is not None:
            end = params[number + 1].start() if number + 1 < len(params) else len(text)
            sections.setdefault(where, []).append((match.end(), end))
    if not sections and text.strip():
        errors.append(f"{origin}: no '<mdt|obdfilter>.<target>.job_stats=' parameter found")
    for (component, name), spans in sections.items():
        target = parse_job_stats(text[spans[0][0] : spans[0][1]], component, name, origin)
        for start, end in spans[1:]:  # a target listed twice: keep the jobs of every section
            more = parse_job_stats(text[start:end], component, name, origin)
            target.jobs += more.jobs
            target.errors += more.errors[: MAX_ERROR_MESSAGES - len(target.errors)]
            target.malformed += more.malformed
            target.sections += 1
        yield target


def parse_get_param(text: str, origin: str) -> ParsedText:
    errors: list[str] = []
    return ParsedText(list(iter_get_param(text, origin, errors)), errors)


def iter_text(
    text: str,
    origin: str,
    errors: list[str],
    component: str | None = None,
    target: str | None = None,
    *,
    bare: bool = True,
) -> Iterator[Target]:
    """Either ``lctl get_param`` output or a bare ``job_stats`` file named by ``origin``,
    target by target; problems that belong to no target are appended to ``errors``.

    ``bare=False``: only ``lctl get_param`` output is valid (text without a job_stats
    parameter is an error, never a target named after ``origin``). CRLF reads as LF."""
    try:
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        params = _param_starts(text) if component is None else []
        if params or not bare:
            yield from iter_get_param(text, origin, errors, params)
            return
        if component is None or target is None:
            component, target = target_from_path(origin)
        yield parse_job_stats(text, component, target, origin)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not take the scrape down
        errors.append(f"{origin}: internal parser error: {exc!r}")


def parse_text(
    text: str, origin: str, component: str | None = None, target: str | None = None
) -> ParsedText:
    """All of ``iter_text`` at once."""
    errors: list[str] = []
    return ParsedText(list(iter_text(text, origin, errors, component, target)), errors)
