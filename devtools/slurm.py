"""A private Slurm cluster on loopback: munged, slurmctld and one slurmd per node, all on this
host, for the tests and the demo that need real jobs and a real Epilog.

Debian's own packages (slurmctld, slurmd, slurm-client, munge: ./scripts/install-servers.sh)
run as foreground children of this process, never as system services: their own munge key
and socket, one slurm.conf, state, spool, pid and log files in a temporary directory, removed
at exit. slurmd runs jobs as other uids and the Epilog as root, so a cluster needs root.
Nothing here knows about hpcmon: the caller passes the Epilog.

What Slurm 22.05 gives an Epilog: slurmd runs it as root, in slurmd's working directory,
with only SLURM_* variables (no PATH, no HOME; SLURM_CONF is set). A caller that needs more
passes a wrapper script that sets them. EpilogSlurmctld gets no SLURM_CONF: Slurm commands
there need it set by the script (this cluster's is ``SlurmCluster.conf_path``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools.servers import _require, _wait_until, _workdir, free_port, loopback_env
from hpcmon.common.process import stop_process

log = logging.getLogger(__name__)

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
PARTITION = "debug"
# Job states after which nothing of the job runs any more (scontrol's JobState).
FINISHED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


def slurm_installed() -> bool:
    """Whether the Debian packages are there (tests skip otherwise)."""
    return all(shutil.which(b) for b in BINARIES)


def cgroup_usable() -> bool:
    """Whether proctrack/cgroup may work here: a writable cgroup v1 freezer hierarchy (what
    Slurm 22.05 uses on v1), or a writable unified (v2) hierarchy at /sys/fs/cgroup."""
    root = Path("/sys/fs/cgroup")
    for top in (root / "freezer", root):
        if not (top / "cgroup.procs").exists():
            continue
        probe = top / f"hpcmon-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
            return True
        except OSError:
            continue
    return False


def parse_key_values(line: str) -> dict[str, str]:
    """One record of ``scontrol show ... -o``: space-separated Key=Value pairs, where a value
    may contain spaces (Command, Reason): a word without '=' continues the value before."""
    info: dict[str, str] = {}
    key = None
    for word in line.strip().split(" "):
        name, sep, value = word.partition("=")
        if sep and name[:1].isupper():
            key = name
            info[key] = value
        elif key is not None:
            info[key] += " " + word
    return info


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"({path} missing)"


def _spawn(args: list[str], out_path: Path, env: Mapping[str, str]) -> subprocess.Popen:
    """A foreground daemon in its own session, its stderr appended to ``out_path``."""
    with open(out_path, "ab") as out:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=out_path.parent,
            env=dict(env),
            start_new_session=True,
        )


@dataclass
class SlurmCluster:
    workdir: Path
    conf_path: Path
    env: dict[str, str]  # for client commands: SLURM_CONF, no proxies
    node_names: list[str]
    proctrack: str  # "cgroup" or "linuxproc"
    munge_socket: Path
    _controller: subprocess.Popen | None = None
    _nodes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _munged: subprocess.Popen | None = None

    @property
    def controller_log(self) -> Path:
        return self.workdir / "slurmctld.log"

    @property
    def node_logs(self) -> dict[str, Path]:
        return {name: self.workdir / f"slurmd-{name}.log" for name in self.node_names}

    @property
    def jobs_dir(self) -> Path:
        """Mode 1777: the default working directory of jobs, whatever their uid."""
        return self.workdir / "jobs"

    # ------------------------------------------------------------ client commands
    def run(
        self, args: Sequence[str], check: bool = True, timeout: float = 30, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command (``["squeue", "-h"]``) against this cluster."""
        proc = subprocess.run(
            list(args),
            env=self.env,
            capture_output=True,
            text=True,
            errors="replace",  # a job name may hold any bytes
            timeout=timeout,
            input=input,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {proc.returncode}: {proc.stderr}")
        return proc

    def sbatch(
        self,
        script_text: str,
        *,
        nodes: int = 1,
        uid: int = 65534,
        gid: int = 65534,
        job_name: str | None = None,
        account: str | None = None,
        partition: str | None = None,
        chdir: str | Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> str:
        """Submit a batch script as ``uid``/``gid`` (root may submit for another user), run
        in ``chdir`` (default ``jobs_dir``), where its slurm-ID.out goes. Returns the job id."""
        args = [
            "sbatch",
            "--parsable",
            f"--nodes={nodes}",
            f"--uid={uid}",
            f"--gid={gid}",
            f"--chdir={chdir or self.jobs_dir}",
        ]
        for option, value in (("job-name", job_name), ("account", account)):
            if value:
                args.append(f"--{option}={value}")
        if partition:
            args.append(f"--partition={partition}")
        out = self.run([*args, *extra_args], input=script_text).stdout
        return out.strip().split(";")[0]  # --parsable: "ID" or "ID;cluster"

    def job_info(self, jobid: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (22.05's scontrol has no --json); {} when the
        controller does not know the job (any more). A new line in a value (a job name may
        hold one) reads as a space."""
        proc = self.run(["scontrol", "show", "job", "-o", str(jobid)], check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            return {}
        return parse_key_values(proc.stdout.strip().replace("\n", " "))

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's state (idle, allocated, completing, down*, drained, ...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def wait_nodes_idle(self, timeout: float = 30) -> None:
        """Until every node is idle: no job on it and its Epilog finished."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                states = self.node_states()
                if all(states.get(name) == "idle" for name in self.node_names):
                    return
            time.sleep(0.1)
        raise TimeoutError(f"nodes not idle after {timeout}s: {states}\n{self.logs_tail()}")

    def wait_job_done(self, jobid: str, timeout: float = 60) -> dict[str, str]:
        """Until the job has ended and every node is idle again, so its Epilogs have run;
        returns its last ``job_info``."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while info.get("JobState") not in FINISHED_STATES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {jobid} not done after {timeout}s: {info}")
            time.sleep(0.1)
            info = self.job_info(jobid) or info
        self.wait_nodes_idle(max(deadline - time.monotonic(), 1.0))
        return self.job_info(jobid) or info

    # ------------------------------------------------------------ daemons
    def start_controller(self, timeout: float = 30) -> None:
        """Start slurmctld (again, after ``stop_controller``: it reloads its saved state)."""
        if self._controller is not None and self._controller.poll() is None:
            return
        out_path = self.workdir / "slurmctld.out"
        self._controller = _spawn(
            [_require("slurmctld"), "-D", "-f", str(self.conf_path)], out_path, self.env
        )

        def answers() -> bool:
            return self.run(["scontrol", "ping"], check=False, timeout=10).returncode == 0

        _wait_until(answers, "slurmctld not answering", self._controller, out_path, timeout)
        if self._nodes:  # a restart: until the running slurmd have registered again

            def registered() -> bool:
                states = self.node_states().values()
                return all(s != "unknown" and not s.endswith("*") for s in states)

            _wait_until(registered, "nodes not registered", self._controller, out_path, timeout)

    def stop_controller(self) -> None:
        """Stop slurmctld only; the nodes keep running, clients fail to connect."""
        if self._controller is not None:
            stop_process(self._controller, timeout=15)

    def start_nodes(self, timeout: float = 30) -> None:
        """Start the slurmd that do not run, until every node is idle."""
        for name in self.node_names:
            proc = self._nodes.get(name)
            if proc is None or proc.poll() is not None:
                self._nodes[name] = _spawn(
                    [_require("slurmd"), "-D", "-N", name, "-f", str(self.conf_path)],
                    self.workdir / f"slurmd-{name}.out",
                    self.env,
                )
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self._nodes.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"slurmd {name} exited with {proc.returncode}:\n"
                        + _tail(self.workdir / f"slurmd-{name}.out")
                    )
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                states = self.node_states()
                if all(states.get(name) == "idle" for name in self.node_names):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not idle after {timeout}s\n{self.logs_tail()}")
            time.sleep(0.1)

    def logs_tail(self, chars: int = 1500) -> str:
        """The end of every daemon log, for failure messages."""
        paths = [self.controller_log, *self.node_logs.values()]
        return "\n".join(f"--- {path.name}\n{_tail(path, chars)}" for path in paths)

    def stop(self) -> None:
        """Cancel the jobs, stop every daemon, kill what job steps left, remove cgroups."""
        if self._controller is not None and self._controller.poll() is None:
            with contextlib.suppress(Exception):
                self.run(["scancel", "--quiet", f"--partition={PARTITION}"], check=False)
                self.wait_nodes_idle(timeout=10)
        for proc in self._nodes.values():
            stop_process(proc, timeout=15)
        self.stop_controller()
        _kill_leftovers(self.conf_path)
        _remove_cgroups(self.node_names)
        if self._munged is not None:
            stop_process(self._munged, timeout=10)


def _kill_leftovers(conf_path: Path) -> None:
    """SIGKILL what still runs from this cluster once its daemons are stopped (slurmstepd,
    job processes, a hung Epilog): they have sessions of their own, but all inherited
    SLURM_CONF=<this slurm.conf> from the slurmd that started them."""
    marker = f"SLURM_CONF={conf_path}\0".encode()
    spared = {os.getpid()}
    pid = os.getpid()
    while pid > 1:  # never this process's ancestors, whatever their environment
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        spared.add(pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)


def _remove_cgroups(node_names: Sequence[str]) -> None:
    """proctrack/cgroup on cgroup v1 leaves empty slurm_<node>/ directories: remove them."""
    for name in node_names:
        for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{name}"):
            for path in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    path.rmdir()


def _start_munged(munge_dir: Path, env: Mapping[str, str]) -> subprocess.Popen:
    """munged with a key of its own: Slurm authenticates every message through it."""
    munge_dir.mkdir(mode=0o755)  # munged: the socket's directory must be searchable by all
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(128))  # what `mungekey` makes: 1024 random bits
    key.chmod(0o400)  # owned by root, who runs munged here
    socket_path = munge_dir / "munge.socket"
    out_path = munge_dir / "munged.log"  # in the foreground munged logs to stderr
    proc = _spawn(
        [
            _require("munged"),
            "--foreground",
            f"--socket={socket_path}",
            f"--key-file={key}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--log-file={out_path}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        ],
        out_path,
        env,
    )

    def listening() -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(socket_path))
        return True

    _wait_until(listening, "munged not listening", proc, out_path, 15)
    return proc


def _slurm_conf(
    workdir: Path,
    munge_socket: Path,
    cluster_name: str,
    proctrack: str,
    node_names: Sequence[str],
    settings: Mapping[str, object],
    extra_lines: str,
) -> str:
    conf: dict[str, object] = {
        "ClusterName": cluster_name,
        "SlurmctldHost": f"{socket.gethostname()}(127.0.0.1)",
        "SlurmctldPort": free_port(),
        "AuthType": "auth/munge",
        "AuthInfo": f"socket={munge_socket}",
        "CredType": "cred/munge",
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "StateSaveLocation": workdir / "state",
        "SlurmdSpoolDir": workdir / "spool" / "%n",
        "SlurmctldPidFile": workdir / "slurmctld.pid",
        "SlurmdPidFile": workdir / "slurmd-%n.pid",
        "SlurmctldLogFile": workdir / "slurmctld.log",
        "SlurmdLogFile": workdir / "slurmd-%n.log",
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        "MailProg": "/bin/true",
        "AccountingStorageType": "accounting_storage/none",  # no slurmdbd
        "JobAcctGatherType": "jobacct_gather/none",
        "JobCompType": "jobcomp/none",
        "MpiDefault": "none",
        "SwitchType": "switch/none",
        "ProctrackType": f"proctrack/{proctrack}",
        "TaskPlugin": "task/none",  # no CPU binding: three nodes share this host's cores
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",  # one CPU per node: one job per node
        "SlurmdParameters": "config_overrides",  # nodes claim less than the host has
        "SchedulerType": "sched/builtin",
        "SchedulerParameters": "batch_sched_delay=0",  # start a batch job now, not in 3 s
        "ReturnToService": 2,
        "MinJobAge": 600,  # scontrol still shows a finished job for 10 minutes
        "KillWait": 5,
        "UnkillableStepTimeout": 30,
        "PrologEpilogTimeout": 60,  # a hung Epilog drains its node after a minute
        "EpilogMsgTime": 2000,
        # Clients retry a stopped controller for MessageTimeout - 1 seconds before failing.
        "MessageTimeout": 5,
        "InactiveLimit": 0,
        # Clusters running at once share cgroup paths (slurm_n1/uid_U/job_ID): keep their
        # job ids apart.
        "FirstJobId": random.randrange(1000, 9_000_000, 1000),
        **settings,
    }
    lines = [f"{key}={value}" for key, value in conf.items() if value is not None]
    lines.append(extra_lines.rstrip("\n"))
    for name in node_names:
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()}"
            " CPUs=1 RealMemory=100 State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={PARTITION} Nodes={','.join(node_names)} Default=YES"
        " MaxTime=INFINITE State=UP"
    )
    return "\n".join(line for line in lines if line) + "\n"


@contextlib.contextmanager
def _started(
    proctrack: str,
    nodes: int,
    settings: Mapping[str, object],
    extra_lines: str,
    env: Mapping[str, str],
    cluster_name: str,
    node_prefix: str,
) -> Iterator[SlurmCluster]:
    """One attempt: a cluster in a new directory, stopped and removed at exit."""
    with _workdir("hpcmon-slurm-") as workdir:
        workdir.chmod(0o755)  # jobs of other uids reach jobs/ and slurm.conf
        (workdir / "state").mkdir()
        (workdir / "spool").mkdir()
        (workdir / "jobs").mkdir()
        (workdir / "jobs").chmod(0o1777)
        conf_path = workdir / "slurm.conf"
        node_names = [f"{node_prefix}{i}" for i in range(1, nodes + 1)]
        cluster = SlurmCluster(
            workdir=workdir,
            conf_path=conf_path,
            env={**env, "SLURM_CONF": str(conf_path)},
            node_names=node_names,
            proctrack=proctrack,
            munge_socket=workdir / "munge" / "munge.socket",
        )
        conf_path.write_text(
            _slurm_conf(
                workdir,
                cluster.munge_socket,
                cluster_name,
                proctrack,
                node_names,
                settings,
                extra_lines,
            )
        )
        # Read by proctrack/cgroup: v1 or v2 as mounted; no systemd scope on v2.
        (workdir / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        try:
            cluster._munged = _start_munged(workdir / "munge", env)
            cluster.start_controller()
            cluster.start_nodes()
            yield cluster
        finally:
            cluster.stop()


@contextlib.contextmanager
def run_slurm(
    nodes: int = 3,
    epilog: str | Path | None = None,
    epilog_slurmctld: str | Path | None = None,
    extra_conf: Mapping[str, object] | str = "",
    env: Mapping[str, str] | None = None,
    proctrack: str | None = None,
    cluster_name: str = "hpcmon",
    node_prefix: str = "n",
) -> Iterator[SlurmCluster]:
    """munged, slurmctld and ``nodes`` slurmd (n1, n2, ...: ``node_prefix`` and a number) on
    loopback, every node idle in one default partition ``debug``; all stopped, and their
    directory removed, at exit, also after a failed start. slurmd keeps a job's cgroups under
    its node's name (slurm_<node>/): two Slurms on one host with other node names never meet.

    ``epilog``: the executable slurmd runs as root on each node of a job once it ends (with
    Slurm's own environment, not ``env``, which goes to the daemons and clients);
    ``epilog_slurmctld``: the one slurmctld runs once per job. ``extra_conf``: slurm.conf
    settings (a dict overrides the defaults) or lines. ``proctrack``: "cgroup" or
    "linuxproc"; by default cgroup where the machine allows it, else (or if slurmd fails
    with it) linuxproc."""
    if os.geteuid() != 0:
        raise RuntimeError("a private Slurm cluster needs root: slurmd runs jobs as other uids")
    for binary in BINARIES:
        _require(binary)
    settings: dict[str, object] = {"Epilog": epilog, "EpilogSlurmctld": epilog_slurmctld}
    extra_lines = ""
    if isinstance(extra_conf, str):
        extra_lines = extra_conf
    else:
        settings.update(extra_conf)
    if proctrack:
        candidates = [proctrack]
    else:
        candidates = ["cgroup", "linuxproc"] if cgroup_usable() else ["linuxproc"]
    daemon_env = {**loopback_env(), **(env or {})}
    started = False
    for plugin in candidates:
        try:
            with _started(
                plugin, nodes, settings, extra_lines, daemon_env, cluster_name, node_prefix
            ) as c:
                started = True
                log.info("Slurm cluster up: %s, proctrack/%s", c.conf_path, plugin)
                yield c
                return
        except (RuntimeError, TimeoutError) as exc:
            if started or plugin == candidates[-1]:
                raise
            log.warning("Slurm with proctrack/%s failed, trying the next: %s", plugin, exc)
