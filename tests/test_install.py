"""The built wheel, installed as a site would: each role's extra into a fresh virtualenv, its
command's --help works, the other commands name the extra they lack (one line, exit 2), and
the wheel ships no tests or benchmarks. Prints the installed size of each role."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpcmon.entry import COMMANDS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
ROLES = {extra: command for command, (_, extra) in COMMANDS.items()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the files git knows (a stale build/ of the tree stays out)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (found,) = out.glob("hpcmon-*.whl")
    return found


def test_wheel_ships_the_packages_and_no_tests(wheel: Path) -> None:
    """One import name, hpcmon; no tests, benchmarks, demo, replay, test servers or writers."""
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/")[0] for name in names}
    assert tops == {"hpcmon", "hpcmon-0.1.0.dist-info"}
    for part in (
        "exporter/cli.py",
        "post_job/cli.py",
        "dashboards/cli.py",
        "report/cli.py",
        "common/jobid.py",
        "entry.py",
        "report/schema.json",
    ):
        assert f"hpcmon/{part}" in names
    assert not [n for n in names if "/tests/" in n or "devtools" in n or "benchmarks" in n]
    assert not {"hpcmon/demo.py", "hpcmon/servers.py", "hpcmon/exporter/replay.py",
                "hpcmon/post_job/recorder/writer.py"} & names  # fmt: skip


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return path / "bin"


def _site_packages_bytes(bin_dir: Path) -> int:
    lib = bin_dir.parent / "lib"
    return sum(p.stat().st_size for p in lib.rglob("*") if p.is_file())


def _run(bin_dir: Path, command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / command), *args], capture_output=True, text=True, timeout=120, cwd="/"
    )


@pytest.mark.parametrize("extra", sorted(ROLES))
def test_each_role_installs_and_runs(wheel: Path, tmp_path: Path, extra: str) -> None:
    bin_dir = _venv(tmp_path / "venv")
    empty = _site_packages_bytes(bin_dir)
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", f"{wheel}[{extra}]"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    size = (_site_packages_bytes(bin_dir) - empty) / 2**20
    print(f"\nhpcmon[{extra}]: {size:.0f} MiB installed")
    own = _run(bin_dir, ROLES[extra], "--help")
    assert own.returncode == 0, own.stderr
    assert "usage" in own.stdout.lower()
    module = COMMANDS[ROLES[extra]][0].rsplit(".", 1)[0]  # hpcmon.exporter, ...
    as_module = _run(bin_dir, "python", "-m", module, "--help")
    assert as_module.returncode == 0 and as_module.stdout == own.stdout, as_module.stderr
    if extra == "post-job":  # the job's diagnosis runs the report's rules with this extra
        log = ROOT / "tests" / "data" / "darshan" / "logs" / "skew-autobench-ior.darshan"
        hook = _run(bin_dir, "hpcmon-post-job", "--job-id", "1", "--darshan", str(log))
        assert hook.returncode == 0, hook.stderr
        assert "job_diagnosis,insight=small_reads,jobid=1 " in hook.stdout
    for other_extra, command in ROLES.items():
        if other_extra == extra:
            continue
        result = _run(bin_dir, command, "--help")
        if result.returncode == 0:
            continue  # this role's extra happens to bring what that command needs too
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().count("\n") == 0, result.stderr
        assert f"hpcmon[{other_extra}]" in result.stderr and "Traceback" not in result.stderr


def test_bare_install_names_the_extra_of_every_command(wheel: Path, tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv")
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    for extra, command in ROLES.items():
        result = _run(bin_dir, command, "--help")
        assert result.returncode == 2
        assert f"pip install 'hpcmon[{extra}]'" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_systemd_unit_and_epilog_use_the_documented_install_location() -> None:
    """README "Install": one virtualenv at /opt/hpcmon for every role on a node."""
    unit = (ROOT / "deploy" / "systemd" / "hpcmon-exporter.service").read_text()
    epilog = (ROOT / "deploy" / "slurm" / "hpcmon-epilog.sh").read_text()
    assert "ExecStart=/opt/hpcmon/bin/hpcmon-exporter" in unit
    assert "${HPCMON_POST_JOB:-/opt/hpcmon/bin/hpcmon-post-job}" in epilog
    assert "python3 -m venv /opt/hpcmon" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(not Path("/lib/systemd/system/prometheus.service").exists(), reason="no unit")
def test_debian_services_of_the_test_servers_stay_disabled() -> None:
    """scripts/install-servers.sh: the packages' own services would start at boot listening on
    all interfaces; the tests and the demo use private loopback instances instead."""
    for unit in ("prometheus", "influxdb", "victoria-metrics"):
        assert not Path(f"/etc/systemd/system/multi-user.target.wants/{unit}.service").exists()
        assert not list(Path("/etc").glob(f"rc[2-5].d/S*{unit}"))


def test_a_broken_installation_is_one_line_not_a_traceback(monkeypatch, capsys) -> None:
    from hpcmon import entry

    monkeypatch.setitem(entry.COMMANDS, "hpcmon-broken", ("hpcmon.nonexistent", "exporter"))
    assert entry.run("hpcmon-broken") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hpcmon-broken: hpcmon is incompletely installed: "
                   "No module named 'hpcmon.nonexistent'"]  # fmt: skip
