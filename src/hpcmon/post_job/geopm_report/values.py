"""The scalars of a GEOPM report line: quoted text, numbers (``2e+09``, ``NAN``), region
hashes, ``key: value`` pairs, values with units (1.x) and the report's two time formats."""

from __future__ import annotations

import datetime as dt
import re

from hpcmon.common.timeutil import NS_PER_SECOND, storable_ns
from hpcmon.post_job.geopm_report.model import Value
from hpcmon.post_job.problems import Problems

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_ISO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_NUMBER_WITH_UNIT = re.compile(r"([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s+([A-Za-z/%]+)")
_NUMBER_START = frozenset("0123456789-+.nNiI")


def unquote(text: str) -> str:
    """A YAML scalar as text: outer double or single quotes removed, ``\\"`` undone."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        inner = text[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\") if text[0] == '"' else inner
    return text


def parse_value(text: str) -> Value:
    """A report value: a float when it is a number (``2e+09``, ``NAN`` too), else the text."""
    if text and text[0] in _NUMBER_START:
        try:
            return float(text)
        except ValueError:
            pass
    return unquote(text)


def normalise_hash(text: str) -> str:
    """A region hash as lower-case hex with at least 8 digits (``0x00000000536c798f`` of 1.x
    and ``0x536c798f`` of 2.x name the same region); text that is no number stays as is."""
    raw = unquote(text.strip())
    try:
        number = int(raw, 16) if raw[:2].lower() == "0x" else int(raw)
    except ValueError:
        return raw
    return f"0x{number:08x}" if number >= 0 else raw


def split_key_value(content: str) -> tuple[str, str] | None:
    """``key: value`` (or ``key:``) -> (key, value); None when the line has neither form."""
    key, sep, value = content.partition(": ")
    if sep:
        return key.rstrip(), value.strip()
    if content.endswith(":"):
        return content[:-1].rstrip(), ""
    return None


def append_line(mapping: dict[str, str], key: str, line: str) -> None:
    """Keep a nested block (a multi-line Policy, a frequency map) as text, one line per entry."""
    previous = mapping[key]
    mapping[key] = f"{previous}\n{line}" if previous else line


def parse_start_time(text: str) -> int | None:
    """``Thu May 30 14:38:17 2019`` (the controller's local time, no zone given) as epoch ns,
    read as UTC so the result does not depend on the machine doing the ingest."""
    parts = text.split()
    if len(parts) != 5:
        return None
    _, month_name, day, clock, year = parts
    month = _MONTHS.get(month_name[:3].title())
    hms = clock.split(":")
    if month is None or len(hms) != 3:
        return None
    try:
        moment = dt.datetime(
            int(year), month, int(day), int(hms[0]), int(hms[1]), int(hms[2]), tzinfo=dt.UTC
        )
    except (ValueError, OverflowError):  # a year of 20 digits overflows, it is no ValueError
        return None
    ns = int(moment.timestamp()) * NS_PER_SECOND
    return ns if storable_ns(ns) else None


def parse_iso_time(text: str) -> int | None:
    """``2024-08-14T17:50:00.895968647-0700`` as exact epoch ns (no zone given = UTC)."""
    match = _ISO_TIME.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=dt.UTC
        )
    except (ValueError, OverflowError):
        return None
    offset_seconds = 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset_seconds = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        if zone[0] == "-":
            offset_seconds = -offset_seconds
    fraction_ns = int((fraction or "0")[:9].ljust(9, "0"))
    ns = (int(moment.timestamp()) - offset_seconds) * NS_PER_SECOND + fraction_ns
    return ns if storable_ns(ns) else None


def key_value_or_report(content: str, problems: Problems, lineno: int) -> tuple[str, str] | None:
    pair = split_key_value(content)
    if pair is None:
        problems.add("expected 'key: value'", lineno)
    return pair


def value_with_unit(key: str, text: str) -> tuple[str, Value]:
    """1.x writes some units after the value (``geopmctl memory HWM: 144472 kB``); move the
    unit into the key as the YAML era does (``geopmctl memory HWM (kB)``)."""
    value = parse_value(text)
    if isinstance(value, str):
        match = _NUMBER_WITH_UNIT.fullmatch(text)
        if match is not None:
            try:
                return f"{key} ({match.group(2)})", float(match.group(1))
            except ValueError:
                pass
    return key, value
