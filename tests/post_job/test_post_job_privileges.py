"""The epilog reads a job's inputs as the job's user, bounded (issue 22), tried for real.

A job of user ``nobody`` (uid 65534) with a real Darshan log of theirs and, beside it, what a
user can plant in the world-writable log tree and their scratch: links named like the job's
Darshan log, VizTracer trace and GEOPM report leading to root-only files (a real log of someone
else, a file holding a random token), a log owned by another user. The hook runs as root (it
drops to the job's user) and as the job's user itself (it reads as itself, and says nothing
about dropping). Points are checked in a real InfluxDB 1.6.7; the token is looked for in
stdout, stderr, the line-protocol output, the spool and the report.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

from tests.post_job.test_post_job_epilog import slurm_env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
OWN_LOG = DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"
OTHER_LOG = DATA / "darshan" / "logs" / "imbalanced-io.darshan"
NOBODY = 65534
ROOT = os.geteuid() == 0
JOB = "4242"


def job_user() -> tuple[int, int, str]:
    """The job's user: nobody when the tests can become it (root), else the invoking user."""
    if ROOT:
        entry = pwd.getpwuid(NOBODY)
    else:
        entry = pwd.getpwuid(os.getuid())
    return entry.pw_uid, entry.pw_gid, entry.pw_name


def _become(uid: int, gid: int):
    def drop() -> None:
        os.setgroups([gid])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

    return drop


def _python_for(uid: int, gid: int) -> list[str]:
    """An interpreter the job's user can run, with this virtualenv's packages: this one if it
    can, else the system's of the same version without its own site-packages (a pyenv
    interpreter under a private home cannot be run by another user)."""
    packages = Path(pytest.__file__).parents[1]  # the site-packages the tests run with
    bootstrap = f"import site; site.addsitedir({str(packages)!r}); "
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        try:
            probe = subprocess.run(
                [python, "-S", "-c", bootstrap + "import hpcmon.post_job.cli"],
                preexec_fn=_become(uid, gid) if ROOT else None,
                capture_output=True,
                cwd="/",
                timeout=120,
            )
        except OSError:  # cannot even be started by that user
            continue
        if probe.returncode == 0:
            return [python, "-S", "-c", bootstrap + HOOK_MAIN]
    pytest.fail("no Python interpreter the job's user can run with this virtualenv")


HOOK_MAIN = "import sys; from hpcmon.post_job.cli import main; sys.exit(main(sys.argv[1:]))"


@dataclass
class Site:
    base: Path
    logdir: Path
    scratch: Path
    token: str
    config: Path
    env: dict[str, str]


def _chown(path: Path, uid: int, gid: int) -> None:
    if ROOT:
        os.lchown(path, uid, gid)


@pytest.fixture
def site(influxdb1) -> Iterator[Site]:
    """The node's directories (owned by whoever runs the hook) and the user's planted files."""
    uid, gid, user = job_user()
    base = Path(tempfile.mkdtemp(prefix="hpcmon-privileges-", dir="/tmp"))
    base.chmod(0o755)
    token = "TOKEN-" + secrets.token_hex(12)
    secret = base / "secret"  # root's files, outside the configured directories
    secret.mkdir(mode=0o700)
    (secret / "token").write_text(f"{token}\n" * 1000)
    shutil.copy(OTHER_LOG, secret / "other.darshan")
    today = time.localtime()
    logdir = base / "darshan-logs"  # as darshan-mk-log-dirs makes it: world-writable, sticky
    day = logdir / str(today.tm_year) / str(today.tm_mon) / str(today.tm_mday)
    day.mkdir(parents=True)
    for directory in (logdir, *day.relative_to(logdir).parents, day.relative_to(logdir)):
        (logdir / directory).chmod(0o1777)
    # inside the tree, root's own: a copy of someone else's log and the token, mode 0600
    shutil.copy(OTHER_LOG, day / "root_other_id1_1-1-1.darshan")
    shutil.copy(secret / "token", day / "root_token_id1_1-1-1.darshan")
    for name in ("root_other_id1_1-1-1.darshan", "root_token_id1_1-1-1.darshan"):
        # root's: 0600; without root the test's own files, which only mode 000 keeps from it
        (day / name).chmod(0o600 if ROOT else 0)
    own = day / f"{user}_app_id{JOB}_1-1-1.darshan"
    shutil.copy(OWN_LOG, own)
    own.chmod(0o600)  # readable by the user only: the drop must work both ways
    _chown(own, uid, gid)
    planted = {
        f"{user}_evil_id{JOB}_2-2-2.darshan": secret / "other.darshan",  # leaves the tree
        f"{user}_tok_id{JOB}_3-3-3.darshan": secret / "token",
        f"{user}_in_id{JOB}_4-4-4.darshan": day / "root_other_id1_1-1-1.darshan",  # 0600 root
        f"{user}_intok_id{JOB}_5-5-5.darshan": day / "root_token_id1_1-1-1.darshan",
    }
    for name, target in planted.items():
        (day / name).symlink_to(target)
        _chown(day / name, uid, gid)
    if ROOT:  # another user's log, readable by all, named like the job's
        foreign = day / f"{user}_foreign_id{JOB}_6-6-6.darshan"
        shutil.copy(OTHER_LOG, foreign)
        foreign.chmod(0o644)
        os.chown(foreign, 12345, 12345)
    scratch = base / "scratch" / user  # the user's scratch: traces and GEOPM reports
    scratch.mkdir(parents=True)
    _chown(scratch, uid, gid)
    for name in (f"trace-{JOB}.json", f"geopm-{JOB}.report"):
        (scratch / name).symlink_to(secret / "token")
        _chown(scratch / name, uid, gid)
    hook_uid, hook_gid = (uid, gid) if not ROOT else (0, 0)
    node = base / "node"  # the hook's own directories
    for name in ("spool", "out", "reports"):
        (node / name).mkdir(parents=True, mode=0o755)
        _chown(node / name, hook_uid, hook_gid)
    database = f"privileges_{secrets.token_hex(4)}"
    influxdb1.create_database(database)
    config = base / "post-job.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": "c22",
                "time_limit_seconds": 120.0,
                "spool_dir": str(node / "spool"),
                "writers": {
                    "output": str(node / "out" / "{jobid}.lp"),
                    "influx_v1": {"url": influxdb1.url, "database": database},
                },
                "sources": {
                    "darshan": {"logdir": str(logdir)},
                    "viztracer": {"traces": str(scratch / "trace-{jobid}.json")},
                    "geopm_report": {"reports": str(scratch / "geopm-{jobid}.report")},
                },
                "report": {"dir": str(node / "reports" / "{user}"), "format": "json"},
            }
        )
    )
    config.chmod(0o644)
    env = slurm_env(JOB, user, SLURM_JOB_GID=str(gid), SLURM_JOB_START_TIME=str(int(time.time())))
    env["SLURM_JOB_UID"] = str(uid)
    env["INFLUXDB_DATABASE"] = database  # for the checks below, not read by the hook
    try:
        yield Site(base, logdir, scratch, token, config, env)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_hook(
    site: Site, as_job_user: bool, *extra: str, watch: PeakRss | None = None
) -> subprocess.CompletedProcess:
    """The epilog as Slurm runs it: as root, or as the job's user itself (then the node's
    directories are that user's)."""
    uid, gid, _ = job_user()
    if as_job_user and ROOT:
        for path in [site.base / "node", *(site.base / "node").rglob("*")]:
            os.chown(path, uid, gid)
    python = _python_for(uid, gid) if as_job_user else [sys.executable, "-m", "hpcmon.post_job"]
    command = [*python, "--slurm-epilog", "--config", str(site.config), *extra]
    with subprocess.Popen(
        command,
        env=site.env,
        preexec_fn=_become(uid, gid) if as_job_user and ROOT else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    ) as process:
        if watch is not None:
            watch.start(process.pid)
        stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def logs_in_influx(influxdb1, site: Site) -> set[str]:
    """The Darshan logs the database holds (``log`` is a field: post_job/layout.py)."""
    result = influxdb1.query('SELECT "log" FROM "darshan_job"', db=site.env["INFLUXDB_DATABASE"])
    series = result["results"][0].get("series", [])
    return {value for s in series for _, value in s["values"]}


def everything_written(site: Site) -> str:
    texts = []
    for path in (site.base / "node").rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


MODES = ["root", "job user"] if ROOT else ["job user"]


@pytest.mark.parametrize("mode", MODES)
def test_planted_links_give_no_point_and_no_byte(influxdb1, site: Site, mode: str) -> None:
    _, _, user = job_user()
    proc = run_hook(site, mode == "job user", "--strict")
    lines = proc.stderr.splitlines()
    written = everything_written(site)
    for where, text in (("stdout", proc.stdout), ("stderr", proc.stderr), ("files", written)):
        assert site.token not in text, where
    # the job's own log, readable by the user only, is in InfluxDB; nothing else is
    assert logs_in_influx(influxdb1, site) == {f"{user}_app_id{JOB}_1-1-1"}
    assert f"{user}_app_id{JOB}_1-1-1" in written  # in the line-protocol output too

    def refusal(name: str) -> str:
        [line] = [line for line in lines if f"/{name}: " in line]
        return line

    day_logs = f"{user}_%s_id{JOB}_%s.darshan"
    assert "leading out of the configured directories" in refusal(day_logs % ("evil", "2-2-2"))
    assert "leading out of the configured directories" in refusal(day_logs % ("tok", "3-3-3"))
    assert "not readable by the job's user" in refusal(day_logs % ("in", "4-4-4"))
    assert "not readable by the job's user" in refusal(day_logs % ("intok", "5-5-5"))
    for name in (f"trace-{JOB}.json", f"geopm-{JOB}.report"):
        assert "refused: a symbolic link leading out" in refusal(name)
    if ROOT:
        assert "owned by uid 12345" in refusal(day_logs % ("foreign", "6-6-6"))
    assert proc.returncode == 1  # --strict: the refusals are problems
    assert "drop" not in proc.stderr.lower() and "setuid" not in proc.stderr.lower()
    # the report was written (all points were acknowledged) and carries no byte of the files
    [report] = (site.base / "node" / "reports" / user).glob(f"{JOB}.json")
    assert json.loads(report.read_text())["job_id"] == JOB


def test_report_dir_writable_by_others_is_refused(influxdb1, site: Site) -> None:
    _, _, user = job_user()
    reports = site.base / "node" / "reports" / user
    reports.mkdir(parents=True)
    reports.chmod(0o777)
    reports.chmod(0o777)  # mkdir's mode is masked by the umask
    proc = run_hook(site, not ROOT)
    [line] = [line for line in proc.stderr.splitlines() if "report not written" in line]
    assert "writable by others" in line and str(reports) in line
    assert not list(reports.iterdir())
    assert logs_in_influx(influxdb1, site) == {f"{user}_app_id{JOB}_1-1-1"}


def _report_dir(site: Site, pattern: str) -> None:
    config = yaml.safe_load(site.config.read_text())
    config["report"]["dir"] = pattern
    site.config.write_text(yaml.safe_dump(config))


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in path.rglob("*")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("link", ["report dir", "its parent"])
def test_report_dir_through_a_link_is_refused(influxdb1, site: Site, mode: str, link: str) -> None:
    """``dir: <scratch>/{user}/...``: the user makes the report directory, or a directory on
    its way, a link to root's directory; the report is refused and nothing is written there."""
    uid, gid, user = job_user()
    secret = site.base / "secret"
    (secret / "reports").mkdir(mode=0o755)  # where the parent link would lead
    planted = site.scratch / ("reports" if link == "report dir" else "r")
    planted.symlink_to(secret)
    _chown(planted, uid, gid)
    pattern = "reports" if link == "report dir" else "r/reports"
    _report_dir(site, str(site.base / "scratch" / "{user}" / pattern))
    before = _tree(secret)
    proc = run_hook(site, mode == "job user")
    [line] = [line for line in proc.stderr.splitlines() if "report not written" in line]
    assert line.endswith(f"{planted}: a symbolic link; refused"), line
    assert _tree(secret) == before  # nothing created, written or replaced through the link
    assert logs_in_influx(influxdb1, site) == {f"{user}_app_id{JOB}_1-1-1"}


@pytest.mark.skipif(not ROOT, reason="as the job's user, the user's own directory is the hook's")
def test_report_dir_of_the_job_user_is_refused_as_root(influxdb1, site: Site) -> None:
    """Owned by the user, the directory is theirs to rearrange while root writes in it."""
    _report_dir(site, str(site.base / "scratch" / "{user}"))
    proc = run_hook(site, False)
    [line] = [line for line in proc.stderr.splitlines() if "report not written" in line]
    assert line.endswith(f"{site.scratch}: owned by uid {NOBODY}, not by root; refused"), line
    assert not list(site.scratch.glob(f"{JOB}.*"))


def test_a_report_is_its_user_s_alone(influxdb1, site: Site) -> None:
    """The report names the job's files, sizes and paths: the file is the job user's, 0600;
    a directory the hook makes for it is root's with the job's group, 0750 (0700 when the
    hook is not root): no world bits anywhere."""
    uid, gid, user = job_user()
    proc = run_hook(site, not ROOT)
    made = site.base / "node" / "reports" / user
    assert proc.returncode == 0, proc.stderr
    info = made.lstat()
    assert stat.S_ISDIR(info.st_mode)
    if ROOT:
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, gid, 0o750)
    else:
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.getuid(), 0o700)
    report = (made / f"{JOB}.json").stat()
    assert (report.st_uid, stat.S_IMODE(report.st_mode)) == (uid, 0o600)
    if ROOT:
        assert report.st_gid == gid
        reader = ["runuser", "-u", user, "--", "cat", str(made / f"{JOB}.json")]
        assert json.loads(subprocess.run(reader, capture_output=True, check=True).stdout)
        other = ["runuser", "-u", "daemon", "--", "cat", str(made / f"{JOB}.json")]
        refused = subprocess.run(other, capture_output=True, text=True)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr


def _big_trace(path: Path, mib: int) -> None:
    """A valid VizTracer trace of ``mib`` MiB: complete events of one thread."""
    event = '{"ph":"X","name":"f (/scratch/app.py:1)","ts":%d,"dur":1,"pid":1,"tid":1},'
    chunk = "".join(event % i for i in range(10_000))
    with path.open("w") as handle:
        handle.write('{"traceEvents":[')
        while handle.tell() < mib * 1024 * 1024:
            handle.write(chunk)
        handle.write('{"ph":"X","name":"end","ts":1,"dur":1,"pid":1,"tid":1}]}')


class PeakRss:
    """Polls the RSS of the hook and of its descendants: the largest of each seen."""

    def __init__(self) -> None:
        self.peak = 0  # the largest descendant of the hook (the reading processes)
        self.peak_hook = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._poll, args=(pid,), daemon=True)
        self._thread.start()

    def _poll(self, pid: int) -> None:
        try:
            hook = psutil.Process(pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                self.peak_hook = max(self.peak_hook, hook.memory_info().rss)
                children = hook.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                except psutil.Error:
                    continue
            time.sleep(0.005)

    def __enter__(self) -> PeakRss:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@pytest.mark.parametrize("mode", MODES)
def test_a_trace_over_the_memory_limit_is_one_line(influxdb1, site: Site, mode: str) -> None:
    uid, gid, user = job_user()
    trace = site.scratch / f"trace-{JOB}.json"
    trace.unlink()
    _big_trace(trace, 64)  # read whole, then parsed into ~10 times as much
    _chown(trace, uid, gid)
    limit = 96
    data = yaml.safe_load(site.config.read_text())
    data["memory_limit_mib"] = limit
    site.config.write_text(yaml.safe_dump(data))
    with PeakRss() as rss:
        proc = run_hook(site, mode == "job user", watch=rss)
    over = [line for line in proc.stderr.splitlines() if f"trace-{JOB}.json" in line]
    assert len(over) == 1 and f"memory limit of {limit} MiB" in over[0], proc.stderr
    # the hook's own size is the interpreter with its libraries: it never reads the trace
    assert 0 < rss.peak_hook < 400 * 1024 * 1024
    print(f"peak RSS: hook {rss.peak_hook / 2**20:.0f} MiB, reading {rss.peak / 2**20:.0f} MiB")
    assert 0 < rss.peak < rss.peak_hook + limit * 1024 * 1024, (rss.peak, rss.peak_hook)
    assert logs_in_influx(influxdb1, site) == {f"{user}_app_id{JOB}_1-1-1"}  # still written
    assert proc.returncode == 0


@pytest.mark.skipif(not ROOT, reason="reading as another user needs root")
def test_read_as_uid_on_the_command_line(site: Site, tmp_path: Path) -> None:
    """``--read-as-uid`` drops like the epilog; ``--user`` alone only names the user."""
    uid, gid, user = job_user()
    day = next(site.logdir.rglob(f"{user}_app_*"))
    planted = next(site.logdir.rglob(f"{user}_in_*"))
    out = tmp_path / "out.lp"
    base = [sys.executable, "-m", "hpcmon.post_job", "--job-id", JOB, "--output", str(out)]
    inputs = ["--darshan", str(day), str(planted), "--user", user]
    dropped = subprocess.run(
        [*base, *inputs, "--read-as-uid", str(uid)], capture_output=True, text=True, timeout=300
    )
    assert dropped.returncode == 1
    assert f"{planted}: refused: not readable by the job's user (uid {uid})" in dropped.stderr
    darshan = [line for line in out.read_text().splitlines() if line.startswith("darshan_")]
    logs = set()
    for line in darshan:
        found = re.search(r'\blog="([^"]+)"', line)
        assert found is not None, line
        logs.add(found.group(1))
    assert logs == {day.name.removesuffix(".darshan")}
    as_root = subprocess.run([*base, *inputs], capture_output=True, text=True, timeout=300)
    assert as_root.returncode == 0, as_root.stderr  # --user alone: read as root, as before
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", MODES)
def test_spooled_lines_carry_no_byte_of_the_planted_files(site: Site, mode: str) -> None:
    """InfluxDB down: the job's lines wait in the spool, which holds nothing of the plants."""
    data = yaml.safe_load(site.config.read_text())
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        data["writers"]["influx_v1"]["url"] = f"http://127.0.0.1:{probe.getsockname()[1]}"
    data["writers"]["request_timeout_seconds"] = 1.0
    site.config.write_text(yaml.safe_dump(data))
    proc = run_hook(site, mode == "job user")
    spooled = list((site.base / "node" / "spool").rglob("*.spool"))
    assert spooled, proc.stderr
    written = everything_written(site)
    _, _, user = job_user()
    assert f"{user}_app_id{JOB}_1-1-1" in written
    for text in (proc.stdout, proc.stderr, written):
        assert site.token not in text
