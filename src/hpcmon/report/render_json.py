"""``--format json``: the report structure as JSON (schema documented in docs/report.md)."""

from __future__ import annotations

import json


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2, allow_nan=False) + "\n"
