"""The one point type every post-job source produces, and its InfluxDB line protocol.

The encoder is ours (not influxdb-client's ``Point``) because the escaping rules are a contract
the spool, the tests and the servers depend on, and the library's differ from what InfluxDB
1.x parses for some tag values (it turns a trailing backslash into an escaped space):

- measurement: ``,`` and space escaped; tag keys, tag values, field keys: ``,`` ``=`` space
  escaped; raw line breaks and tabs in names become the two characters ``\\n`` ``\\r`` ``\\t``
  (a raw one would end the line);
- InfluxDB 1.x cannot store a backslash that ends a tag key or value (it reads it as escaping
  the separator and refuses the line), nor, in a measurement name, one before a comma or space
  (it drops it). Such backslashes are written as U+29F5 (REVERSE SOLIDUS OPERATOR, ``⧵``);
  every other tag value reads back unchanged;
- string fields: ``\\`` and ``"`` escaped, line breaks written as ``\\n``/``\\r``;
- floats in Python's shortest round-trip form without a trailing ``.0``; ``-0.0`` written as
  ``0``; NaN and infinities dropped (InfluxDB cannot store them); integers with ``i``;
- tags and fields in sorted key order, so the same point always gives the same line;
- a character UTF-8 cannot carry (a lone surrogate: a file name that is not UTF-8, decoded
  with ``surrogateescape``, or a JSON ``\\udcXX`` escape in a trace) is written as U+FFFD: the
  server would never get the line, and every line spooled after it would wait behind it.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

FieldValue = float | int | str | bool

UNSTORABLE_BACKSLASH = "\u29f5"
_CONTROL = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})
_MEASUREMENT = str.maketrans({",": "\\,", " ": "\\ ", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_KEY = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ ", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
# a line break in a string field is written as the two characters backslash, n (escaped)
_STRING = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\\\n", "\r": "\\\\r"})


# Backslashes ending a text; in a measurement name also those before a comma or space, which
# InfluxDB 1.x drops there (``m\\ 0`` is stored as ``m 0``) while tag keys and values keep them.
_TRAILING = re.compile(r"\\+\Z")
_MEASUREMENT_UNSTORABLE = re.compile(r"\\+(?=[, ]|\Z)")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate as U+FFFD (see above); ``text`` itself when UTF-8
    can carry it, which nearly every text can (checked cheaply: ASCII first)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_measurement(name: str) -> str:
    return _storable(str(name), _MEASUREMENT_UNSTORABLE).translate(_MEASUREMENT)


def escape_key(key: str) -> str:
    """A tag key, tag value or field key."""
    return _storable(str(key).translate(_CONTROL), _TRAILING).translate(_KEY)


def _storable(text: str, unstorable: re.Pattern[str]) -> str:
    """Backslashes InfluxDB 1.x would read as escaping a separator (it refuses or changes the
    line) become U+29F5; every other backslash is stored as is."""
    if "\\" not in text:
        return text
    return unstorable.sub(lambda run: UNSTORABLE_BACKSLASH * len(run.group()), text)


def format_field(value: FieldValue) -> str | None:
    """A field value in line protocol; None for values InfluxDB cannot store (NaN, inf)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return f"{int(value)}i"
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            return None
        if number == 0.0:
            return "0"  # never "-0"
        text = repr(number)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, str):
        return '"' + value.translate(_STRING) + '"'
    raise ValueError(f"field type {type(value).__name__} is not supported")


@dataclass(slots=True)
class Point:
    measurement: str
    tags: dict[str, str] = field(default_factory=dict)
    fields: dict[str, FieldValue] = field(default_factory=dict)
    time_ns: int | None = None

    def to_line(self) -> str:
        """One line of line protocol ("" when no field can be stored: InfluxDB rejects those)."""
        encoded = []
        for key, value in sorted(self.fields.items()):
            if value is None:
                continue
            text = format_field(value)
            if text is not None:
                encoded.append(f"{escape_key(key)}={text}")
        if not encoded:
            return ""
        head = escape_measurement(self.measurement)
        for key, value in sorted(self.tags.items()):
            if value is not None and value != "":
                head += f",{escape_key(key)}={escape_key(str(value))}"
        line = f"{head} {','.join(encoded)}"
        if self.time_ns is not None:
            line += f" {int(self.time_ns)}"
        return encodable(line)


def to_lines(points: Iterable[Point]) -> str:
    """Line protocol for many points, skipping points with no field (InfluxDB rejects those)."""
    lines = [line for line in (p.to_line() for p in points) if line]
    return "\n".join(lines) + ("\n" if lines else "")
