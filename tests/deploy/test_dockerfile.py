"""The Dockerfile (issue 15), checked without a container runtime.

No image can be built here, so the test reads the Dockerfile and .dockerignore, builds the
wheel the way the Dockerfile's build stage does from the files the build context would hold,
installs that wheel alone, and runs its entry points with the command lines the chart renders.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from tests.deploy.test_helm_chart import (
    CHART,
    case_values,
    flush_command,
    of_kind,
    pod_container,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Which target serves which part of the chart, and the entry point it must run.
TARGETS = {"exporter": "hpcmon-exporter", "post-job": "hpcmon-post-job"}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions of each named stage, in file order (the last one is the default target)."""
    found: dict[str, list[tuple[str, str]]] = {}
    current = None
    for name, args in instructions((ROOT / "Dockerfile").read_text()):
        if name == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", args, re.IGNORECASE)
            assert match, f"unnamed stage: FROM {args}"
            current = match.group(2)
            found[current] = []
        if current is not None:
            found[current].append((name, args))
    return found


def only(stage: list[tuple[str, str]], instruction: str) -> str:
    (value,) = [args for name, args in stage if name == instruction]
    return value


def default_arg(name: str) -> str:
    for instruction, args in instructions((ROOT / "Dockerfile").read_text()):
        if instruction == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}")


def test_base_image_is_a_slim_python_of_a_supported_version() -> None:
    image = default_arg("PYTHON_IMAGE")
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(-\w+)?", image)
    assert match, image
    needed = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert needed, PYPROJECT["project"]["requires-python"]
    assert (int(match[1]), int(match[2])) >= (int(needed[1]), int(needed[2]))
    for stage in stages().values():
        assert stage[0][1].split()[0] == "${PYTHON_IMAGE}"


def test_targets_run_the_project_entry_points_as_non_root() -> None:
    found = stages()
    assert list(found)[-1] == "exporter", "the default target must be the chart's default image"
    scripts = PYPROJECT["project"]["scripts"]
    for target, entry_point in TARGETS.items():
        stage = found[target]
        assert json.loads(only(stage, "ENTRYPOINT")) == [entry_point]
        assert entry_point in scripts
        user = only(stage, "USER")
        assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), f"{target}: USER {user} is not numeric"
        label = only(stage, "LABEL")
        assert f'org.opencontainers.image.title="hpcmon-{target}"' in label
        assert f'org.opencontainers.image.licenses="{PYPROJECT["project"]["license"]}"' in label
    assert only(found["exporter"], "EXPOSE") == "19325"


def test_each_role_installs_the_wheel_with_its_extra() -> None:
    found = stages()
    extras = PYPROJECT["project"]["optional-dependencies"]
    for target in TARGETS:
        (copy,) = [args for name, args in found[target] if name == "COPY"]
        stage = re.search(r"--from=(\S+)", copy)
        assert stage, copy
        source = stage.group(1)
        (install,) = [args for name, args in found[source] if name == "RUN"]
        match = re.search(r"/wheels/hpcmon-\*\.whl\)\[([\w-]+)\]", install)
        assert match and match.group(1) == target and target in extras, install
        assert any("--from=wheel /wheels" in a for n, a in found[source] if n == "COPY")
    (build,) = [args for name, args in found["wheel"] if name == "RUN"]
    assert re.fullmatch(r"pip wheel .*--no-deps .*--wheel-dir /wheels \.", build), build


def test_chart_default_images_are_these_targets_at_the_package_version() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart_yaml["appVersion"] == PYPROJECT["project"]["version"]
    assert values["image"]["repository"].rsplit("/", 1)[-1] == "hpcmon-exporter"
    assert values["postJob"]["flush"]["image"]["repository"].rsplit("/", 1)[-1] == "hpcmon-post-job"
    assert values["exporter"]["port"] == 19325
    everything = render(case_values("everything-on-values.yaml"))
    for obj in of_kind(everything, "DaemonSet"):
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "flush":
                # The post-job image's program in a shell loop: the slim base has /bin/sh.
                assert container["image"].split("/")[-1].startswith("hpcmon-post-job:")
                assert container["command"][:2] == ["/bin/sh", "-c"]
                assert "hpcmon-post-job flush --config " in container["command"][2]
                continue
            assert "command" not in container, "the chart must run the image's ENTRYPOINT"
    for obj in of_kind(everything, "CronJob"):
        (container,) = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        assert "command" not in container


def pattern_regex(pattern: str) -> str:
    """A .dockerignore pattern as a regex: '**' any path, '*' and '?' within one name."""
    regex = ""
    for token in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
        if token.startswith("**"):
            regex += "(.*/)?" if token.endswith("/") else ".*"
        elif token == "*":
            regex += "[^/]*"
        elif token == "?":
            regex += "[^/]"
        else:
            regex += re.escape(token)
    return regex


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = pattern_regex(pattern[1:] if negate else pattern)
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def build_context() -> list[str]:
    """Files of the work tree (tracked or not ignored) that .dockerignore sends to the build."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return [
        path
        for path in listed
        if path and (ROOT / path).is_file() and not dockerignore_excludes(path, patterns)
    ]


def test_dockerignore_sends_the_sources_and_nothing_else() -> None:
    context = build_context()
    assert "pyproject.toml" in context and "README.md" in context
    assert "src/hpcmon/exporter/cli.py" in context and "src/hpcmon/post_job/cli.py" in context
    for path in context:
        assert not path.startswith(("tests/", "helm/", "benchmarks/", ".git", ".venv")), path
        assert "__pycache__" not in path


def build_requirements_installed() -> bool:
    """Whether this interpreter already has the build backend pyproject.toml asks for."""
    for text in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(text)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built as the Dockerfile's wheel stage does, installed alone (no dependencies)."""
    source = tmp_path_factory.mktemp("context")
    context = build_context()
    for name, args in stages()["wheel"]:
        if name != "COPY":
            continue
        *sources, destination = args.split()
        for item in sources:
            item = item.rstrip("/")
            for path in context:
                if path == item:  # a file: into the destination directory
                    target = source / destination / Path(path).name
                elif path.startswith(item + "/"):  # a directory: its content into the destination
                    target = source / destination / Path(path).relative_to(item)
                else:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / path, target)
    wheels = tmp_path_factory.mktemp("wheels")
    # Without the backend installed here, pip fetches it from the index as `docker build` does.
    isolation = ["--no-build-isolation"] if build_requirements_installed() else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation]
        + ["--wheel-dir", str(wheels), "."],
        cwd=source,
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("hpcmon-*.whl")
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        timeout=600,
    )
    (target / "wheel-name").write_text(wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        (target / "entry_points.txt").write_bytes(archive.read(entry_points))
    return target


def test_wheel_declares_the_entry_points_the_images_run(installed_wheel: Path) -> None:
    entry_points = configparser.ConfigParser()
    entry_points.read(installed_wheel / "entry_points.txt")
    scripts = dict(entry_points["console_scripts"])
    for entry_point in TARGETS.values():
        assert scripts[entry_point] == PYPROJECT["project"]["scripts"][entry_point]
        assert (installed_wheel / "bin" / entry_point).exists()


def run_installed(installed_wheel: Path, command: list[str]) -> subprocess.CompletedProcess:
    """A command with the installed wheel first on the path, away from the repository."""
    env = dict(os.environ, PYTHONPATH=str(installed_wheel))
    return subprocess.run(
        command, cwd=installed_wheel, env=env, capture_output=True, text=True, timeout=120
    )


def test_installed_wheel_is_what_runs(installed_wheel: Path) -> None:
    result = run_installed(
        installed_wheel,
        [
            sys.executable,
            "-P",
            "-c",
            "import hpcmon.exporter.cli, hpcmon.post_job.cli; print(hpcmon.exporter.cli.__file__)",
        ],
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(installed_wheel)


@pytest.mark.parametrize(
    "case", ["default", "lustre-servers-values.yaml", "everything-on-values.yaml"]
)
def test_wheel_entry_points_accept_the_chart_command_lines(
    installed_wheel: Path, case: str
) -> None:
    objects = render(case_values(case))
    commands = []
    for obj in of_kind(objects, "DaemonSet"):
        pod = obj["spec"]["template"]["spec"]
        args = [a.replace("$(HOST_IP)", "192.0.2.1") for a in pod_container(pod)["args"]]
        commands.append(["hpcmon-exporter", *args])
        if len(pod["containers"]) > 1:
            commands.append(flush_command(pod_container(pod, "flush")))
    for obj in of_kind(objects, "CronJob"):
        (container,) = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        commands.append(["hpcmon-post-job", *container["args"]])
    assert commands
    for entry_point, *args in commands:
        script = installed_wheel / "bin" / entry_point
        # argparse reads the flags in order, so '--help' at the end exits 0 only if every
        # flag before it exists and its value has the right type and choice.
        result = run_installed(
            installed_wheel, [sys.executable, "-P", str(script), *args, "--help"]
        )
        assert result.returncode == 0, f"{entry_point} {args}: {result.stderr}"
        bad = run_installed(
            installed_wheel, [sys.executable, "-P", str(script), *args, "--no-such-flag"]
        )
        assert bad.returncode == 2
