"""Issue 33: the documentation site builds strictly, the README's links resolve in it, and the
generated reference pages are what the code produces now (so the docs cannot drift).

The reference is checked twice: against the generator run now (devtools/docs_reference.py
--check), and against what the commands themselves show, independently of the generator: the
flags each command's --help prints, the metric names the dashboards are built from, the alert
names of the rules generator, and the measurements and fields the real hook writes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcmon.common import metric_names
from hpcmon.dashboards.rules import ALERT_NAMES

# Slow (builds the documentation site and its reference): not in `make check`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
MKDOCS = Path(sys.executable).parent / "mkdocs"
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def test_the_reference_pages_are_what_the_code_produces_now() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "devtools.docs_reference", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


COMMANDS = [
    ["hpcmon-exporter"],
    ["hpcmon-exporter", "--print-series-budget"],
    ["hpcmon-post-job"],
    ["hpcmon-post-job", "flush"],
    ["hpcmon-post-job", "migrate"],
    ["hpcmon-report"],
    ["hpcmon-dashboards"],
    ["hpcmon-dashboards", "generate"],
    ["hpcmon-dashboards", "lint"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_flag_a_command_prints_is_in_the_reference(command: list[str]) -> None:
    """The flags as the installed command's --help prints them, each in commands.md."""
    executable = Path(sys.executable).parent / command[0]
    run = subprocess.run(
        [str(executable), *command[1:], "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    option_lines = re.findall(r"^  (-.*?)(?:  |$)", run.stdout, re.M)  # "  -h, --help  ..."
    flags = {flag for line in option_lines for flag in re.findall(r"--[a-z][\w.-]*", line)}
    flags.discard("--help")
    page = (REFERENCE / "commands.md").read_text()
    documented = set(re.findall(r"`(--[a-z][\w.-]*)", page))
    assert flags <= documented, sorted(flags - documented)


def test_every_metric_the_dashboards_and_rules_use_is_in_the_reference() -> None:
    page = (REFERENCE / "metrics.md").read_text()
    missing = [name for name in metric_names.ALL if f"`{name}`" not in page]
    assert not missing


def test_every_alert_is_in_the_reference() -> None:
    page = (REFERENCE / "rules.md").read_text()
    assert len(ALERT_NAMES) > 0  # the check below is not vacuous
    assert [name for name in ALERT_NAMES if f"### {name}\n" not in page] == []


def test_every_measurement_and_field_the_hook_writes_is_in_the_reference(tmp_path: Path) -> None:
    """The real command on the demo job's inputs (every source), as line protocol."""
    from devtools.demo import POST_JOB_INPUTS
    from tests.post_job.lineprotocol_parse import parse_line

    out = tmp_path / "job.lp"
    hook = Path(sys.executable).parent / "hpcmon-post-job"
    run = subprocess.run(
        [str(hook), "--job-id", "7", "--cluster", "c", "--user", "u", *POST_JOB_INPUTS,
         "--recorder.per-rank-functions", "--output", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    written: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        measurement, tags, fields, _ = parse_line(line)
        written.setdefault(measurement, set()).update(tags, fields)
    assert len(written) > 10
    page = (REFERENCE / "measurements.md").read_text()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    assert set(written) <= set(sections), sorted(set(written) - set(sections))
    for measurement, keys in written.items():
        documented = set(re.findall(r"`([^`]+)`", sections[measurement]))
        assert keys <= documented, (measurement, sorted(keys - documented))


def _links(markdown: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", markdown)


def test_the_site_builds_strictly_and_the_readme_links_resolve_in_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    run = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = _links(readme)
    into_docs = [link for link in links if link.startswith("docs/")]
    assert len(into_docs) >= 10
    for link in links:
        if "://" in link:
            continue
        target, _, anchor = link.partition("#")
        if not target.startswith("docs/"):
            assert (ROOT / target).exists(), link
            continue
        page = Path(target[len("docs/") :])
        assert page.suffix == ".md", link
        built = site / page.with_suffix("") / "index.html"
        if page.name == "index.md":
            built = site / page.parent / "index.html"
        assert built.exists(), (link, built)
        if anchor:
            assert f'id="{anchor}"' in built.read_text(), link
