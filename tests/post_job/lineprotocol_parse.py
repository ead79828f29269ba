"""A small line-protocol parser following InfluxDB 1.x's rules, for tests only: turns lines
back into (measurement, tags, fields, time) so what a server stored can be compared with what
the hook wrote, point by point."""

from __future__ import annotations

from typing import Any


def _split(text: str, separators: str, start: int = 0) -> tuple[str, int]:
    """Raw text up to the first unescaped separator (a backslash skips the next character)."""
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char in separators:
            break
        index += 1
    return text[start:index], index


def _unescape_name(raw: str) -> str:
    for special in (",", " ", "="):
        raw = raw.replace("\\" + special, special)
    return raw


def _field_value(raw: str) -> Any:
    if raw.startswith('"'):
        body = raw[1:-1]
        out, index = [], 0
        while index < len(body):
            if body[index] == "\\" and index + 1 < len(body) and body[index + 1] in '\\"':
                out.append(body[index + 1])
                index += 2
            else:
                out.append(body[index])
                index += 1
        return "".join(out)
    if raw in ("true", "false"):
        return raw == "true"
    if raw.endswith("i"):
        return int(raw[:-1])
    return float(raw)


def parse_line(line: str) -> tuple[str, dict[str, str], dict[str, Any], int | None]:
    head, index = _split(line, " ")
    parts, position = [], 0
    while position <= len(head):
        part, position = _split(head, ",", position)
        parts.append(part)
        position += 1
    measurement = _unescape_name(parts[0])
    tags = {}
    for part in parts[1:]:
        key, end = _split(part, "=")
        tags[_unescape_name(key)] = _unescape_name(part[end + 1 :])
    fields: dict[str, Any] = {}
    index += 1
    while index < len(line) and line[index] != " ":
        key, end = _split(line, "=", index)
        value_start = end + 1
        if line[value_start : value_start + 1] == '"':
            scan = value_start + 1
            while line[scan] != '"':
                scan += 2 if line[scan] == "\\" else 1
            value_end = scan + 1
        else:
            _, value_end = _split(line, ", ", value_start)
        fields[_unescape_name(key)] = _field_value(line[value_start:value_end])
        index = value_end + (1 if line[value_end : value_end + 1] == "," else 0)
    rest = line[index:].strip()
    return measurement, tags, fields, int(rest) if rest else None
