"""`hpcmon-dashboards generate`: files, determinism, bad configuration; the dashboards against
Grafana's own schema (@grafana/schema 13) and the linter, which must catch what it checks."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.common.config import ConfigError
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate, lint, rules
from hpcmon.dashboards.uids import JOB_UID, JOBS_UID, OVERVIEW_UID

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).parents[1] / "data" / "grafana-schema"
CUSTOM = {
    "cluster_label": "cluster",
    "cluster": "demo",
    "jobid_labels": ["uid", "exe"],
    "rates_from": "gauges",
    "grafana_url": "https://grafana.example.org/",
    "thresholds": {"metadata_storm_ops_per_second": 5000, "small_writes_for": "30m"},
}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcmon.dashboards", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _configs(tmp_path: Path) -> dict[str, dashboards_config.Config]:
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(CUSTOM))
    return {"default": dashboards_config.load(None), "custom": dashboards_config.load(path)}


def test_generate_writes_every_file_the_same_twice(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CUSTOM))
    outputs = []
    for run in ("a", "b"):
        result = _cli(
            "generate", "--out", str(tmp_path / run), "--config", str(tmp_path / "c.yaml")
        )
        assert result.returncode == 0, result.stderr
        outputs.append(
            {
                str(p.relative_to(tmp_path / run)): p.read_bytes()
                for p in sorted((tmp_path / run).rglob("*"))
                if p.is_file()
            }
        )
    assert outputs[0] == outputs[1]
    assert sorted(outputs[0]) == [
        f"dashboards/{JOB_UID}.json",
        f"dashboards/{JOBS_UID}.json",
        "dashboards/hpcmon-longterm.json",
        f"dashboards/{OVERVIEW_UID}.json",
        "provisioning/dashboards/hpcmon.yaml",
        "provisioning/datasources/hpcmon.yaml",
        "rules/hpcmon-alerts.yaml",
        "rules/hpcmon-longterm.yaml",
        "rules/hpcmon-recording.yaml",
    ]
    assert _cli("lint", str(tmp_path / "a")).returncode == 0


@pytest.mark.parametrize(
    "content, message",
    [
        ("thresholds:\n  metadata_storm_ops_per_second: lots\n", "expected a number"),
        ("thresholds: {nope: 1}\n", "thresholds.nope: unknown key"),
        ("colour: blue\n", "colour: unknown key"),
        ('"col\\nour": blue\n', "'col\\nour': unknown key"),  # one line, whatever the key
        ("jobid_labels: [job-id]\n", "not a usable label name"),
        ("jobid_labels: [target]\n", "not a usable label name"),
        ("jobid_labels: [account]\n", "not a usable label name"),  # the join with Slurm's
        ("slurm_jobid_label: slurm_job\n", "'jobid' or one of jobid_labels"),
        ("rates_from: both\n", "rates_from"),
        ("thresholds: {metadata_storm_for: ten minutes}\n", "not a Prometheus duration"),
        ("grafana_url: grafana\n", "expected an http(s) URL"),
        ("top_jobs: 0\n", "whole number from 1 to 1000"),
        ("- a list\n", "top level must be a mapping"),
        ("a: [unclosed\n", "invalid YAML"),
        (b"cluster: \xff\xfe\n", "bad config"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path: Path, content, message) -> None:
    path = tmp_path / "bad.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = _cli("generate", "--out", str(tmp_path / "out"), "--config", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_config_and_bad_usage_exit_2(tmp_path: Path) -> None:
    result = _cli("generate", "--out", str(tmp_path), "--config", str(tmp_path / "none.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    assert _cli("generate").returncode == 2
    assert _cli("explode").returncode == 2


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
_keys = st.sampled_from(
    ["thresholds", "jobid_labels", "cluster_label", "rates_from", "top_jobs", "grafana_url",
     "rule_interval", "cluster", "metadata_storm_ops_per_second", "x"]
)  # fmt: skip


@given(st.dictionaries(_keys, _values, max_size=4))
def test_any_config_loads_or_says_why(tmp_path_factory, data) -> None:
    """Whatever a YAML file holds, loading gives a configuration or a ConfigError."""
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        config = dashboards_config.load(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))
        return
    generated = generate.files(config)
    assert len(generated) == 9


def _validators() -> tuple[jsonschema.Draft7Validator, dict]:
    dashboard = jsonschema.Draft7Validator(
        json.loads((SCHEMAS / "dashboard.schema.json").read_text())
    )
    panel = {}
    for path in SCHEMAS.glob("panel-*.schema.json"):
        _, kind, part = path.name.split(".")[0].split("-")
        panel[(kind, part)] = jsonschema.Draft7Validator(json.loads(path.read_text()))
    return dashboard, panel


def _schema_errors(board: dict) -> list[str]:
    dashboard, panel = _validators()
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in dashboard.iter_errors(board)]
    for item in lint.panels(board):
        kind = item["type"].replace("-", "")
        if (kind, "options") in panel:
            errors += [
                f"{item['title']} options: {e.message}"
                for e in panel[(kind, "options")].iter_errors(item.get("options", {}))
            ]
        if (kind, "fieldconfig") in panel:
            custom = item["fieldConfig"]["defaults"].get("custom", {})
            errors += [
                f"{item['title']} custom: {e.message}"
                for e in panel[(kind, "fieldconfig")].iter_errors(custom)
            ]
    return errors


def test_dashboards_validate_against_grafana_schema(tmp_path: Path) -> None:
    for name, config in _configs(tmp_path).items():
        for uid, board in generate.dashboards(config).items():
            assert _schema_errors(board) == [], f"{name} {uid}"
            assert board["uid"] == uid and board["schemaVersion"] >= 39


def test_schema_check_is_real() -> None:
    """Grafana-6-era output of grafanalib fails the schema: string datasource, legacy keys."""
    board = generate.dashboards(dashboards_config.Config())[OVERVIEW_UID]
    broken = copy.deepcopy(board)
    broken["panels"][1]["datasource"] = "Prometheus"
    assert _schema_errors(broken)
    broken = copy.deepcopy(board)
    bargauge = next(p for p in lint.panels(broken) if p["type"] == "bargauge")
    bargauge["options"]["fieldOptions"] = {"calcs": ["last"]}
    assert _schema_errors(broken)
    broken = copy.deepcopy(board)
    broken["rows"] = []
    assert _schema_errors(broken)


def test_dashboards_lint_clean(tmp_path: Path) -> None:
    for config in _configs(tmp_path).values():
        boards = generate.dashboards(config)
        for board in boards.values():
            assert lint.lint(board, set(boards)) == []


def _mutations():
    """(what breaks, how) for each check of the linter."""

    def first(kind):
        return lambda b: next(p for p in lint.panels(b) if p["type"] == kind)

    def graph(b):
        first("timeseries")(b)["type"] = "graph"

    def datasource_string(b):
        first("timeseries")(b)["datasource"] = "Prometheus"

    def no_unit(b):
        first("stat")(b)["fieldConfig"]["defaults"]["unit"] = ""

    def overlap(b):
        panels = [p for p in lint.panels(b) if p["type"] != "row"]
        panels[1]["gridPos"] = dict(panels[0]["gridPos"])

    def duplicate_id(b):
        panels = list(lint.panels(b))
        panels[2]["id"] = panels[1]["id"]

    def duplicate_ref(b):
        panel = first("timeseries")(b)
        panel["targets"].append(dict(panel["targets"][0]))

    def fixed_rate(b):
        target = first("timeseries")(b)["targets"][0]
        target["expr"] = target["expr"].replace("$__rate_interval", "5m")

    def unparsable(b):
        first("timeseries")(b)["targets"][0]["expr"] += " +"

    def unknown_uid(b):
        b["links"][0]["url"] = b["links"][0]["url"].replace("hpcmon-job", "elsewhere")

    def no_jobid(b):
        b["links"][0]["url"] = "/d/hpcmon-job/hpcmon-job"

    def no_time(b):
        table = first("table")(b)
        link = table["fieldConfig"]["overrides"][0]["properties"][0]["value"][0]
        link["url"] = link["url"].replace("&${__url_time_range}", "")

    def no_variable(b):
        b["templating"]["list"] = [v for v in b["templating"]["list"] if v["type"] != "datasource"]

    def old_schema(b):
        b["schemaVersion"] = 36

    return [graph, datasource_string, no_unit, overlap, duplicate_id, duplicate_ref, fixed_rate,
            unparsable, unknown_uid, no_jobid, no_time, no_variable, old_schema]  # fmt: skip


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_lint_catches(mutate) -> None:
    boards = generate.dashboards(dashboards_config.Config())
    board = copy.deepcopy(boards[OVERVIEW_UID])
    mutate(board)
    assert lint.lint(board, set(boards))


def test_lint_command_reports_problems(tmp_path: Path) -> None:
    generate.write(dashboards_config.Config(), tmp_path)
    path = tmp_path / "dashboards" / f"{OVERVIEW_UID}.json"
    board = json.loads(path.read_text())
    board["schemaVersion"] = 12
    path.write_text(json.dumps(board))
    result = _cli("lint", str(tmp_path))
    assert result.returncode == 1 and "schemaVersion 12" in result.stdout


def test_provisioned_datasources_are_the_dashboards_defaults(tmp_path: Path) -> None:
    config = _configs(tmp_path)["custom"]
    files = generate.files(config)
    sources = yaml.safe_load(files["provisioning/datasources/hpcmon.yaml"])["datasources"]
    uids = {s["type"]: s["uid"] for s in sources}
    for board in generate.dashboards(config).values():
        for variable in board["templating"]["list"]:
            if variable["type"] == "datasource":
                assert variable["current"]["value"] == uids[variable["query"]]
    provider = yaml.safe_load(files["provisioning/dashboards/hpcmon.yaml"])["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == config.dashboards_path


def test_alerts_link_to_the_drill_down_with_job_and_window(tmp_path: Path) -> None:
    config = _configs(tmp_path)["custom"]
    for rule in rules.alert_rules(config):
        annotations = rule["annotations"]
        assert {"summary", "description", "dashboard"} <= set(annotations)
        assert rule["labels"]["severity"] in ("warning", "critical")
        link = annotations["dashboard"]
        assert link.startswith("https://grafana.example.org/d/")
        assert "from={{" in link and "&to={{" in link
        if "jobid" in annotations["summary"]:
            assert f"/d/{JOB_UID}/" in link and "var-jobid={{ $labels.jobid | urlquery }}" in link
        assert "cluster" not in rule["expr"] or config.cluster_label == "cluster"
    default = rules.rule_files(dashboards_config.Config())
    assert "cluster" not in json.dumps(default)  # the exporter's own labels only


def test_substituted_queries_keep_label_replace_s_references() -> None:
    """Grafana replaces its variables and leaves `$1` (label_replace's first group, in the
    Slurm joins on slurm_job) alone; so does the tests' stand-in for it."""
    query = 'label_replace(x{account=~"$account"}, "slurm_job", "$1", "jobid", "(.+)")'
    assert lint.substitute_variables(query, {"account": "climate"}) == (
        'label_replace(x{account=~"climate"}, "slurm_job", "$1", "jobid", "(.+)")'
    )
