"""The chart carries what `hpcmon-dashboards generate` writes, and nothing edited by hand.

The generator runs into a temporary folder; helm/hpcmon/files/ must equal it byte for byte
(scripts/sync-chart-files.py refreshes it), the rendered PrometheusRules must be the generated
rule files and the dashboard ConfigMaps the generated JSON.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.deploy.test_helm_chart import CHART, RELEASE, case_values, of_kind, render

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sync-chart-files.py"


def sync_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_chart_files", SCRIPT)
    assert spec is not None and spec.loader is not None, SCRIPT
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    sync_script().generate(out)
    return out


def test_chart_files_are_the_generator_output_byte_for_byte(generated: Path) -> None:
    assert sync_script().differences(generated, CHART / "files") == [], (
        "helm/hpcmon/files/ differs from the generator: run scripts/sync-chart-files.py"
    )


def test_generator_writes_what_the_chart_reads(generated: Path) -> None:
    assert list((generated / "dashboards").glob("*.json"))
    assert sorted(p.name for p in (generated / "rules").glob("*.yaml")) == [
        "hpcmon-alerts.yaml",
        "hpcmon-longterm.yaml",
        "hpcmon-recording.yaml",
    ]
    assert list((generated / "provisioning" / "datasources").glob("*.yaml"))


def test_rendered_prometheusrules_are_the_generated_rule_files(generated: Path) -> None:
    rules = {obj["metadata"]["name"]: obj for obj in of_kind(render(), "PrometheusRule")}
    files = sorted((generated / "rules").glob("*.yaml"))
    assert len(rules) == len(files)
    for path in files:
        spec = rules[f"{RELEASE}-{path.stem}"]["spec"]
        assert spec == yaml.safe_load(path.read_text()), path.name
        assert list(spec) == ["groups"]


def test_rendered_dashboards_are_the_generated_json(generated: Path) -> None:
    maps = [
        obj
        for obj in of_kind(render(), "ConfigMap")
        if obj["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    held = {name: text for obj in maps for name, text in obj["data"].items()}
    files = {p.name: p.read_bytes() for p in (generated / "dashboards").glob("*.json")}
    assert len(maps) == len(files)
    assert {name: text.encode() for name, text in held.items()} == files
    for name, text in held.items():
        assert json.loads(text)["uid"] == Path(name).stem


def test_rendered_datasources_are_the_generated_provisioning(generated: Path) -> None:
    objects = render(case_values("everything-on-values.yaml"))
    (datasources,) = [
        obj
        for obj in of_kind(objects, "ConfigMap")
        if obj["metadata"]["labels"].get("grafana_datasource") == "1"
    ]
    files = (generated / "provisioning" / "datasources").glob("*.yaml")
    assert datasources["data"] == {p.name: p.read_text() for p in files}


def test_chart_job_names_are_the_ones_the_generated_rules_expect(generated: Path) -> None:
    from hpcmon.dashboards.config import Config

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["lustre"]["job"] == Config().jobstats_scrape_job
    assert values["externalHosts"]["job"] == Config().jobstats_scrape_job
    alerts = (generated / "rules" / "hpcmon-alerts.yaml").read_text()
    assert f'job="{values["lustre"]["job"]}"' in alerts


def test_sync_script_repairs_a_hand_edited_copy(generated: Path, tmp_path: Path) -> None:
    script = sync_script()
    copy = tmp_path / "files"
    script.replace(generated, copy)
    assert script.differences(generated, copy) == []
    (edited,) = sorted((copy / "rules").glob("hpcmon-alerts.yaml"))
    edited.write_text(edited.read_text().replace("severity: warning", "severity: info", 1))
    (copy / "dashboards" / "hand-made.json").write_text("{}")
    assert script.differences(generated, copy) == [
        "differs rules/hpcmon-alerts.yaml",
        "extra dashboards/hand-made.json",
    ]
    script.replace(generated, copy)
    assert script.differences(generated, copy) == []


def test_sync_script_check_mode_passes_on_the_committed_chart(generated: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
