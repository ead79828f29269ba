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
from tests.servers import free_port, http_get, stop_process, wait_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
ROLES = {extra: command for command, (_, extra) in COMMANDS.items()}
HP_OST = (
    ROOT
    / "tests"
    / "data"
    / "jobstats"
    / (
        "HewlettPackard_lustre_exporter__proc_fs_lustre_obdfilter_lustrefs-OST0000_"
        "job_stats__lustre2.10.1.txt"
    )
)
DARSHAN_LOG = ROOT / "tests" / "data" / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"


def _work(command: str, tmp: Path) -> list[str]:
    """Arguments that make each command do its work (not only --help) and then exit."""
    return {
        "hpcmon-exporter": ["--print-series-budget"],
        "hpcmon-post-job": ["--job-id", "1", "--darshan", str(DARSHAN_LOG),
                            "--output", str(tmp / "job.lp")],
        "hpcmon-dashboards": ["generate", "--out", str(tmp / "out")],
        "hpcmon-report": ["--job-id", "1", "--darshan", str(DARSHAN_LOG),
                          "--output", str(tmp / "report.html")],
    }[command]  # fmt: skip


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


@pytest.fixture(scope="module", params=sorted(ROLES))
def role(request, wheel: Path, tmp_path_factory) -> tuple[str, Path]:
    """(extra, the bin/ of a fresh virtualenv holding hpcmon[extra]), one per role."""
    extra = request.param
    bin_dir = _venv(tmp_path_factory.mktemp(f"venv-{extra}"))
    empty = _site_packages_bytes(bin_dir)
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", f"{wheel}[{extra}]"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    size = (_site_packages_bytes(bin_dir) - empty) / 2**20
    print(f"\nhpcmon[{extra}]: {size:.0f} MiB installed")
    return extra, bin_dir


def test_each_role_installs_and_runs(role: tuple[str, Path], tmp_path: Path) -> None:
    extra, bin_dir = role
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
        assert any(
            line.startswith("job_diagnosis,")
            and ",insight=small_reads" in line
            and 'jobid="1"' in line
            for line in hook.stdout.splitlines()
        )
    if extra == "exporter":  # a flush needs the writer's library, imported when it is set up
        (tmp_path / "spool" / "influx-v2").mkdir(parents=True)
        flush = _run(bin_dir, "hpcmon-post-job", "flush", "--spool-dir", str(tmp_path / "spool"),
                     "--influx.url", "http://127.0.0.1:1", "--influx.org", "o",
                     "--influx.bucket", "b")  # fmt: skip
        assert flush.returncode == 2 and len(flush.stderr.strip().splitlines()) == 1, flush.stderr
        assert "'influxdb_client' is missing" in flush.stderr and "hpcmon[post-job]" in flush.stderr


def test_other_commands_work_or_name_their_extra(role: tuple[str, Path], tmp_path: Path) -> None:
    """Every other role's command, in this role's install: its --help and then its work
    either succeed (this extra brings what it needs) or end in the one line naming the
    extra, exit 2; never a traceback, never another failure."""
    extra, bin_dir = role
    others = [(e, c) for e, c in ROLES.items() if e != extra]
    for other_extra, command in sorted(others, key=lambda pair: pair[1] == "hpcmon-post-job"):
        result = _run(bin_dir, command, "--help")
        if result.returncode == 0:  # this role's extra happens to bring what --help needs
            result = _run(bin_dir, command, *_work(command, tmp_path))  # and the work?
        assert "Traceback" not in result.stderr, (command, result.stderr)
        if result.returncode == 0:
            continue  # this role's extra brings all that the other command's work needs
        assert result.returncode == 2, (command, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (command, result.stderr)
        assert f"pip install 'hpcmon[{other_extra}]'" in result.stderr, (command, result.stderr)


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
    """docs/install.md (and the README's summary): one virtualenv at /opt/hpcmon for every
    role on a node."""
    unit = (ROOT / "deploy" / "systemd" / "hpcmon-exporter.service").read_text()
    epilog = (ROOT / "deploy" / "slurm" / "hpcmon-epilog.sh").read_text()
    assert "ExecStart=/opt/hpcmon/bin/hpcmon-exporter" in unit
    assert "${HPCMON_POST_JOB:-/opt/hpcmon/bin/hpcmon-post-job}" in epilog
    for documented in (ROOT / "docs" / "install.md", ROOT / "README.md"):
        assert "python3 -m venv /opt/hpcmon" in documented.read_text()


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


def test_no_folder_at_the_root_is_importable_as_hpcmon() -> None:
    """Issue 21: `python -m hpcmon...` from the repository's root would import a root folder
    named hpcmon before the installed package (the PyPA "src layout" reasoning). Without
    site-packages (-S) nothing but the working directory and the standard library is seen."""
    found = subprocess.run(
        [sys.executable, "-S", "-c",
         "import importlib.util; print(importlib.util.find_spec('hpcmon'))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0 and found.stdout.strip() == "None", found.stdout
    assert not (ROOT / "hpcmon").exists() and not (ROOT / "hpcmon.py").exists()


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """Every role's extra installed from the wheel (not editable) into one fresh venv."""
    bin_dir = _venv(tmp_path_factory.mktemp("all") / "venv")
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", f"{wheel}[all]"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    return bin_dir


@pytest.mark.parametrize("module", sorted({m.rsplit(".", 1)[0] for m, _ in COMMANDS.values()}))
def test_every_part_runs_as_a_module_from_the_repository_root(installed: Path, module) -> None:
    result = subprocess.run(
        [str(installed / "python"), "-m", module, "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
    spec = subprocess.run(
        [str(installed / "python"), "-c", "import hpcmon; print(hpcmon.__file__)"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "site-packages" in spec.stdout, spec.stdout  # the installed package, not the tree


# python -m puts the working directory first by design: next to a foreign hpcmon/, the script
@pytest.mark.parametrize(("where", "how"), [("root", "script"), ("root", "module"),
                                            ("shadow", "script")])  # fmt: skip
def test_installed_exporter_serves_jobstats_from_the_repository_root(
    installed: Path, tmp_path: Path, where: str, how: str
) -> None:
    """Issue 21: started next to a source tree (the repository's root, or any folder with an
    hpcmon/ package of its own), the jobstats sampler child still imports the installed
    hpcmon and the replayed capture is served."""
    cwd = ROOT
    if where == "shadow":
        cwd = tmp_path / "site"
        (cwd / "hpcmon").mkdir(parents=True)
        (cwd / "hpcmon" / "__init__.py").write_text("")
    port = free_port()
    command = [str(installed / "hpcmon-exporter")]
    if how == "module":
        command = [str(installed / "python"), "-m", "hpcmon.exporter"]
    log_path = tmp_path / "exporter.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*command, f"--web.listen-address=127.0.0.1:{port}", "--jobstats.source=file",
             f"--jobstats.path={HP_OST}", "--jobstats.interval=1"],
            cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_port(port, proc, log_path)
        status, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    finally:
        stop_process(proc)
    text = body.decode()
    assert status == 200
    assert 'hpcmon_exporter_collector_success{collector="jobstats"} 1.0' in text, text[-3000:]
    assert "lustre_job_read_bytes_total{" in text
    assert "No module named" not in log_path.read_text()
