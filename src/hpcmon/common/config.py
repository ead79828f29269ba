"""YAML configuration loading with errors that name the file and the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    pass


def shown_key(key: object) -> str:
    """A key of a user's file as it can stand in a one-line message: as written, or quoted
    (``repr``) when it holds a line break or another character that does not print."""
    text = str(key)
    return text if text.isprintable() else repr(text)


def load_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Load a YAML file whose top level must be a mapping (empty file = empty mapping)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {_one_line(exc)}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. a YAML date out of range
        raise ConfigError(f"{path}: invalid YAML: {type(exc).__name__}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, not {type(data).__name__}")
    return data


def _one_line(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line (the problem and where)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())
