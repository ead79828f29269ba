"""The systemd units of deploy/systemd/, checked by systemd itself: `systemd-analyze verify`.

verify loads each unit as systemd would and reports unknown keys, values it cannot parse and
commands that are not there; it exits 0 on most of these, so a clean check is exit 0 and no
output. It runs against a root made here (--root): this machine's own units, and the program
the units start as an executable at its /opt/hpcmon path.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hpcmon.post_job.cli import build_flush_parser
from hpcmon.post_job.epilog_config import DEFAULT_TIME_LIMIT

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
EXAMPLE_CONFIG = ROOT / "deploy" / "slurm" / "post-job.example.yaml"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
PROGRAMS = ("hpcmon-exporter", "hpcmon-post-job")
FLUSH_UNITS = ["hpcmon-post-job-flush.service", "hpcmon-post-job-flush.timer"]

needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None or not (SYSTEM_UNITS / "sysinit.target").exists(),
    reason="systemd-analyze and the system's units are missing (Debian: apt-get install systemd)",
)


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}}, continuation lines joined."""
    sections: dict[str, dict[str, list[str]]] = {}
    text = (UNITS / name).read_text().replace("\\\n", " ")
    current: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def analyze_verify(root: Path, *names: str) -> subprocess.CompletedProcess:
    assert SYSTEMD_ANALYZE is not None  # its tests are skipped without it
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}", *names],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root / "etc/systemd/system",
    )


@pytest.fixture(scope="module")
def unit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the system's units, ours in /etc/systemd/system and our programs."""
    root = tmp_path_factory.mktemp("systemd-root")
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    shutil.copytree(UNITS, root / "etc/systemd/system")
    (root / "opt/hpcmon/bin").mkdir(parents=True)
    for program in PROGRAMS:
        path = root / "opt/hpcmon/bin" / program
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


@needs_systemd_analyze
@pytest.mark.parametrize("name", sorted(p.name for p in UNITS.glob("*.service")) + FLUSH_UNITS[1:])
def test_systemd_analyze_verify_finds_nothing(unit_root: Path, name: str) -> None:
    result = analyze_verify(unit_root, name)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr


@needs_systemd_analyze
def test_systemd_analyze_verify_is_not_a_rubber_stamp(unit_root: Path) -> None:
    """What verify reports on a unit with a misspelt key and a bad calendar, and without its
    program: all three, so the clean result above means something."""
    units = unit_root / "etc/systemd/system"
    service = (units / FLUSH_UNITS[0]).read_text()
    (units / "broken.service").write_text(
        service.replace("ProtectSystem=", "ProtectSistem=").replace(
            "/opt/hpcmon/bin/hpcmon-post-job", "/opt/hpcmon/bin/missing"
        )
    )
    timer = (units / FLUSH_UNITS[1]).read_text()
    (units / "broken.timer").write_text(timer.replace("OnCalendar=*:0/5", "OnCalendar=every 5"))
    try:
        result = analyze_verify(unit_root, "broken.service", "broken.timer")
    finally:
        (units / "broken.service").unlink()
        (units / "broken.timer").unlink()
    report = result.stdout + result.stderr
    assert "ProtectSistem" in report
    assert "calendar" in report
    assert "/opt/hpcmon/bin/missing" in report and result.returncode != 0


def test_flush_service_runs_the_epilogs_config_as_root_with_hardening() -> None:
    service = unit(FLUSH_UNITS[0])["Service"]
    assert service["Type"] == ["oneshot"]
    assert "User" not in service  # root: the spool and the token file are root's
    (command,) = service["ExecStart"]
    program, *args = shlex.split(command)
    assert program == "/opt/hpcmon/bin/hpcmon-post-job"
    assert args == ["flush", "--config", "/etc/hpcmon/post-job.yaml"]
    assert build_flush_parser().parse_args(args[1:]).config == "/etc/hpcmon/post-job.yaml"
    for key, value in {
        "NoNewPrivileges": "true",
        "ProtectSystem": "strict",
        "ProtectHome": "true",
        "PrivateTmp": "true",
    }.items():
        assert service[key] == [value], key
    # The only place it writes: the spool of the example config (the epilog's spool_dir).
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    assert [p.lstrip("-") for p in service["ReadWritePaths"]] == [config["spool_dir"]]
    # The run stops itself at time_limit_seconds; systemd's limit is only the backstop.
    (timeout,) = service["TimeoutStartSec"]
    assert int(timeout) > max(config["time_limit_seconds"], DEFAULT_TIME_LIMIT)


def test_flush_timer_spreads_the_nodes_and_catches_up() -> None:
    timer = unit(FLUSH_UNITS[1])
    settings = timer["Timer"]
    assert settings["OnCalendar"] == ["*:0/5"]
    assert settings["OnBootSec"] and settings["Persistent"] == ["true"]
    # 1,000 nodes spread over the whole 5 minutes, not all at once.
    assert settings["RandomizedDelaySec"] == ["5min"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    assert (UNITS / FLUSH_UNITS[0]).exists()  # the service the timer starts, by its name


def test_slurm_exporter_unit_runs_only_the_slurm_collector_unprivileged() -> None:
    """Issue 32: the Slurm collector's host runs it as an ordinary user, with flags the real
    exporter accepts: the Slurm collector on, jobstats (on by default) off."""
    from hpcmon.exporter.cli import available_collectors, build_parser

    service = unit("hpcmon-exporter-slurm.service")["Service"]
    assert service["User"] == ["hpcmon"] and service["Group"] == ["hpcmon"]
    (command,) = service["ExecStart"]
    program, *args = shlex.split(command.replace("$HPCMON_EXPORTER_ARGS", ""))
    assert program == "/opt/hpcmon/bin/hpcmon-exporter"
    collectors = available_collectors()
    options = build_parser(collectors).parse_args(args)
    enabled = [name for name in collectors if getattr(options, f"collector_{name}")]
    assert enabled == ["slurm"]
    assert (options.slurm_interval, options.slurm_timeout) == (30, 10)
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert service[key] == ["true"], key
    assert service["ProtectSystem"] == ["strict"]
