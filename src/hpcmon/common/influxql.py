"""InfluxQL quoting, shared by everything that builds queries (the report, the migration)."""

from __future__ import annotations


def quote_literal(value: str) -> str:
    """An InfluxQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(value: str) -> str:
    """An InfluxQL identifier (a measurement, tag or field name)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
