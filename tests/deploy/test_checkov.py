"""The chart and the image under a real policy scanner: checkov (issue 22).

Every value set the chart tests render (the defaults, helm/hpcmon/ci/*.yaml and the documented
examples) is rendered with Helm's own SDK and scanned with checkov's Kubernetes checks, the
Dockerfile with its Dockerfile checks. The scan is clean: each check either passes or is
skipped where the exception is made (a checkov.io/skipN annotation or a checkov:skip comment)
with its reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_helm_chart import CASES, ROOT, case_values, chart, rendered

# Slow (runs checkov on the chart and the Dockerfile): not in `make check`.
pytestmark = pytest.mark.slow

# checkov lives in its own virtualenv (`make venv`; pyproject's `scan` extra explains why)
CHECKOV = Path(os.environ.get("HPCMON_CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))


def checkov(*args: str) -> list[dict]:
    """checkov's JSON reports (one per framework), offline (no guideline download)."""
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run `make venv` (or set HPCMON_CHECKOV)")
    proc = subprocess.run(
        [str(CHECKOV), *args, "--output", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LOG_LEVEL": "ERROR"},
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    reports = json.loads(proc.stdout)
    return reports if isinstance(reports, list) else [reports]


def failures(reports: list[dict]) -> list[str]:
    return [
        f"{f['check_id']} {f['resource']} ({f['file_path']})"
        for report in reports
        for f in report["results"]["failed_checks"]
    ]


def skips(reports: list[dict]) -> list[dict]:
    return [s for report in reports for s in report["results"].get("skipped_checks", [])]


@pytest.fixture(scope="module")
def chart_reports(tmp_path_factory) -> list[dict]:
    """One scan over every value set, one directory each (checkov's graph checks, such as
    CKV2_K8S_6's NetworkPolicy per pod, see only the objects of their own value set)."""
    base = tmp_path_factory.mktemp("rendered")
    for case in CASES:
        directory = base / case.removesuffix(".yaml")
        directory.mkdir()
        for index, obj in enumerate(rendered(case)):
            path = directory / f"{index:02d}-{obj['kind']}-{obj['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(obj))
    try:
        return checkov("--directory", str(base), "--framework", "kubernetes")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_rendered_value_set_passes_checkov(chart_reports) -> None:
    summary = chart_reports[0]["summary"]
    assert summary["parsing_errors"] == 0 and summary["passed"] > 1000
    assert failures(chart_reports) == []


def test_every_exception_in_the_chart_has_its_reason(chart_reports) -> None:
    skipped = skips(chart_reports)
    assert {s["check_id"] for s in skipped} >= {"CKV_K8S_11", "CKV_K8S_15", "CKV_K8S_43"}
    for skip in skipped:
        assert len(skip["check_result"]["suppress_comment"].strip()) > 20, skip["check_id"]


def test_probes_are_skipped_only_where_the_flush_container_runs(chart_reports) -> None:
    """CKV_K8S_8/9 are skipped for the compute pod's flush container (it serves nothing); value
    sets without it still have checkov check the exporters' probes."""
    probed = {
        s["file_path"] for s in skips(chart_reports) if s["check_id"] in ("CKV_K8S_8", "CKV_K8S_9")
    }
    assert probed
    for path in probed:
        assert "-DaemonSet-" in path and path.endswith("-compute.yaml"), path
        case = path.strip("/").split("/")[0]
        values = chart().merge_values(case_values(case if case == "default" else f"{case}.yaml"))
        assert values["compute"]["postJob"]["flush"]["enabled"], path
    assert not any(p.startswith("/default/") for p in probed)


def test_the_network_policies_are_what_passes_ckv2_k8s_6(chart_reports) -> None:
    """Not skipped: every pod of the chart is selected by one of its NetworkPolicies."""
    assert "CKV2_K8S_6" not in {s["check_id"] for s in skips(chart_reports)}
    for case in CASES:
        policies = [o for o in rendered(case) if o["kind"] == "NetworkPolicy"]
        workloads = [o for o in rendered(case) if o["kind"] in ("DaemonSet", "Deployment")]
        assert len(policies) >= 1 or not workloads, case


def test_dockerfile_passes_checkov() -> None:
    reports = checkov("--file", str(ROOT / "Dockerfile"), "--framework", "dockerfile")
    assert failures(reports) == []
    assert reports[0]["summary"]["passed"] > 10
    for skip in skips(reports):
        assert len(skip["check_result"]["suppress_comment"].strip()) > 20, skip["check_id"]
