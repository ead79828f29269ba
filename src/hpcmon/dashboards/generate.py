"""Everything Grafana and Prometheus need, written from one configuration, byte-identical for
the same configuration (sorted JSON keys, fixed YAML order, no timestamps)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from . import grafana, job, jobs, longterm, overview, provisioning, rules
from .config import Config


def dashboards(config: Config) -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON model."""
    built = [overview.build(config), job.build(config), longterm.build(config), jobs.build(config)]
    models: dict[str, dict[str, Any]] = {}
    for board in built:
        if board.uid is None:
            raise ValueError(f"dashboard {board.title!r} has no uid")
        models[board.uid] = grafana.to_json(board)
    return models


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def files(config: Config) -> dict[str, str]:
    """Relative path -> content of every generated file."""
    out = {
        f"dashboards/{uid}.json": json.dumps(model, indent=2, sort_keys=True) + "\n"
        for uid, model in dashboards(config).items()
    }
    for name, content in rules.rule_files(config).items():
        out[f"rules/{name}"] = _yaml(content)
    out["provisioning/datasources/hpcmon.yaml"] = _yaml(provisioning.datasources(config))
    out["provisioning/dashboards/hpcmon.yaml"] = _yaml(provisioning.dashboard_providers(config))
    return out


def write(config: Config, out_dir: Path) -> list[Path]:
    written = []
    for relative, content in sorted(files(config).items()):
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(content, encoding="utf-8")
        os.replace(temporary, path)
        written.append(path)
    return written
