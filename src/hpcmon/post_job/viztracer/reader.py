"""Read a VizTracer trace (.json or .json.gz) into per-thread call lists.

VizTracer writes Chrome Trace Event Format: mostly ``X`` (complete) events in function *exit*
order plus ``M`` metadata; ``B`` only for calls still running when tracing stopped, and other
phases (``i``, ``C``, ``N``/``O``/``D``, ...) only with special options. This reader keeps the
timed calls (X, and B/E pairs), the process/thread names and the buffer-overflow flag, and only
counts the rest. It never raises for bad input: problems are returned as error strings naming
the file, and whatever could be read is kept (a truncated file keeps its complete events).

Calls are plain ``(start_us, -duration_us, name)`` tuples, not objects: a trace can hold
millions of them and the cleaning must stay within a small multiple of ``json.load``'s time.
The duration is stored negated so that plain tuple order is the order nesting needs (start
ascending, the longer, outer call first at equal starts): sorting 1.2M such tuples takes
0.06 s, against 0.42 s with a key function.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hpcmon.post_job.files import read_input
from hpcmon.post_job.problems import Problems, SourceError
from hpcmon.post_job.viztracer.model import ThreadCalls, ThreadKey, ViztracerTrace

# Timestamps and durations beyond ~31 years in microseconds are garbage, not data.
MAX_MICROSECONDS = 1e15


def read_trace(path: str | Path) -> ViztracerTrace:
    """Read one trace; raises SourceError only when nothing at all could be read."""
    path = Path(path)
    errors: list[str] = []
    raw, file_bytes = read_input(path, errors)
    document = _parse_json(raw, path, errors)
    json_bytes = len(raw)
    del raw
    if isinstance(document, list):  # Chrome also accepts a bare array of events
        document = {"traceEvents": document}
    if not isinstance(document, dict):
        raise SourceError(f"{path}: not a trace: top level is {type(document).__name__}")
    events = document.get("traceEvents")
    if not isinstance(events, list):
        raise SourceError(f"{path}: not a trace: no traceEvents array")
    metadata = document.get("viztracer_metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    trace = ViztracerTrace(
        path=path,
        threads={},
        process_names={},
        thread_names={},
        phase_counts=Counter(),
        event_count=len(events),
        file_bytes=file_bytes,
        json_bytes=json_bytes,
        overflow=metadata.get("overflow") is True,
        version=str(metadata["version"]) if "version" in metadata else None,
        base_time_ns=_base_time_ns(metadata.get("baseTimeNanoseconds")),
        errors=errors,
    )
    _collect_events(events, trace)
    if trace.overflow:
        errors.append(
            f"{path}: VizTracer's buffer overflowed (viztracer_metadata.overflow): the "
            "oldest calls were dropped, so per-function totals are lower bounds and calls "
            f"that started before ts {trace.complete_from()} us may miss children"
        )
    return trace


def _parse_json(raw: bytes, path: Path, errors: list[str]) -> object:
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except (ValueError, RecursionError) as exc:  # also a 5,000-digit number, nesting 5,000 deep
        if isinstance(exc, json.JSONDecodeError):
            where = f"line {exc.lineno} column {exc.colno}"
            fatal = f"invalid JSON at {where}: {exc.msg}"
            broken = f"invalid or truncated JSON at {where} ({exc.msg})"
        else:
            fatal = broken = (
                f"a number too long or nesting too deep for JSON readers ({type(exc).__name__})"
            )
        salvaged = _salvage_events(raw.decode("utf-8", "replace"))
        if salvaged is None:
            raise SourceError(f"{path}: {fatal}") from exc
        errors.append(f"{path}: {broken}; kept the {len(salvaged):,} complete events before it")
        return {"traceEvents": salvaged}


def _salvage_events(text: str) -> list[object] | None:
    """The complete events of a traceEvents array that breaks off (None if there is none)."""
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else -1
    if start < 0:
        return None
    decoder = json.JSONDecoder()
    events: list[object] = []
    position = start + 1
    length = len(text)
    while position < length:
        while position < length and text[position] in " \t\r\n,":
            position += 1
        if position >= length or text[position] == "]":
            break
        try:
            event, position = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):  # JSONDecodeError, or a value no reader takes
            break
        events.append(event)
    return events


def _shown_id(value: object) -> str:
    """A pid or tid for a message: a number as such; anything else is the file's own text,
    never quoted."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63:
        return str(value)
    return "(not a number)"


def _base_time_ns(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 < value < 2**63:
        return None
    return int(value)


def _number(value: object) -> float:
    """A timestamp as the X branch checks it: a JSON number within range (strings, None and NaN
    raise TypeError or ValueError)."""
    if not isinstance(value, int | float):  # what the comparison raises TypeError for
        raise TypeError("not a number")
    if not -MAX_MICROSECONDS < value < MAX_MICROSECONDS:
        raise ValueError("out of range")
    return float(value)


def _collect_events(events: list, trace: ViztracerTrace) -> None:
    """One pass over the events: X into per-thread lists; everything else is rarer and handled
    by ``_other_event``. The X branch is the hot loop (a million events), so it is kept flat:
    comparisons both validate (a string or None raises TypeError, NaN fails) and range-check.
    """
    threads = trace.threads
    begin_end: dict[ThreadKey, list[tuple[float, int, str, str]]] = {}
    malformed: Counter[str] = Counter()
    last_pid = last_tid = last_calls = None
    complete = 0
    for event in events:
        try:
            if event["ph"] == "X":
                start = event["ts"]
                duration = event["dur"]
                name = event["name"]
                pid = event["pid"]
                tid = event["tid"]
                if not (
                    0.0 <= duration < MAX_MICROSECONDS
                    and -MAX_MICROSECONDS < start < MAX_MICROSECONDS
                ):
                    raise ValueError("duration or timestamp out of range")
                if type(name) is not str:
                    name = str(name)
                if tid != last_tid or pid != last_pid or last_calls is None:
                    thread = threads.get((pid, tid))
                    if thread is None:
                        thread = threads[pid, tid] = ThreadCalls(pid, tid)
                    last_pid, last_tid, last_calls = pid, tid, thread.calls
                last_calls.append((start, -duration, name))
                complete += 1
            else:
                _other_event(event, trace, begin_end)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            malformed[_malformed_reason(event, exc)] += 1
    if complete:
        trace.phase_counts["X"] += complete
    for key, pairs in begin_end.items():
        _pair_begin_end(key, pairs, trace)
    reasons = Problems(
        trace.path, more="skipped {weight:,} more malformed event(s) of {count:,} other kinds"
    )
    for reason, count in malformed.most_common():
        reasons.append(f"{trace.path}: skipped {count:,} malformed event(s): {reason}", count)
    trace.errors.extend(reasons)


def _other_event(
    event: dict,
    trace: ViztracerTrace,
    begin_end: dict[ThreadKey, list[tuple[float, int, str, str]]],
) -> None:
    """M metadata is read, B/E are set aside for pairing, other phases are only counted."""
    phase = event["ph"]
    if phase == "M":
        _read_metadata(event, trace)
    elif phase == "B" or phase == "E":
        key = (event["pid"], event["tid"])
        when = _number(event["ts"])
        name = event.get("name", "")
        pending = begin_end.setdefault(key, [])
        pending.append((when, len(pending), phase, name if isinstance(name, str) else str(name)))
    trace.phase_counts[str(phase)] += 1


def _malformed_reason(event: object, exc: Exception) -> str:
    """A short reason without the bad value itself, so that reasons stay few."""
    if not isinstance(event, dict):
        return f"event is a {type(event).__name__}, not an object"
    ph = event.get("ph")
    # the trace's own bytes are never quoted: only the phases and fields the format defines
    phase = repr(ph) if isinstance(ph, str) and ph in _PHASES else "of an unknown kind"
    if isinstance(exc, KeyError):
        if exc.args and exc.args[0] in _FIELDS:
            return f"missing field {exc.args[0]!r} in phase {phase}"
        return f"a missing field in phase {phase}"
    return f"non-numeric, negative or out-of-range value in phase {phase}"


# Trace Event Format phases and the event fields the reader looks up.
_PHASES = frozenset("BEXiIMCbneSTpFstfPOND(),RGc")
_FIELDS = frozenset(("ph", "ts", "dur", "pid", "tid", "name", "args"))


def _read_metadata(event: dict, trace: ViztracerTrace) -> None:
    args = event.get("args")
    if not isinstance(args, dict) or "name" not in args:
        return
    label = str(args["name"])
    if event.get("name") == "process_name":
        trace.process_names[event["pid"]] = label
    elif event.get("name") == "thread_name":
        key = (event["pid"], event["tid"])
        trace.thread_names[key] = label


def _pair_begin_end(
    key: ThreadKey, events: list[tuple[float, int, str, str]], trace: ViztracerTrace
) -> None:
    """Turn B/E events into calls: each E closes the latest open B of its thread."""
    thread = trace.threads.get(key)
    if thread is None:
        thread = trace.threads[key] = ThreadCalls(key[0], key[1])
    open_calls: list[tuple[float, str]] = []
    unmatched_ends = 0
    for when, _, phase, name in sorted(events, key=lambda e: (e[0], e[1])):
        if phase == "B":
            open_calls.append((when, name))
        elif open_calls:
            start, begin_name = open_calls.pop()
            thread.calls.append((start, start - when, begin_name))
        else:
            unmatched_ends += 1
    thread.unfinished.extend(open_calls)
    if unmatched_ends:
        trace.errors.append(
            f"{trace.path}: {unmatched_ends:,} E event(s) without a B on "
            f"pid {_shown_id(key[0])} tid {_shown_id(key[1])} were skipped"
        )
