"""Start real servers (Prometheus, InfluxDB 1.x, VictoriaMetrics, vmagent, vmalert) on free
loopback ports.

Used by the test fixtures and by `make demo`; the binaries come from Debian packages.

Each server gets a temporary data directory and is stopped (and its directory removed) when
the context exits. Tests use them through the fixtures in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from hpcmon.common.process import stop_process

# Under pytest-xdist each worker takes its ports from a range of its own, below the kernel's
# ephemeral range (32768-60999 on Linux): a port one worker was given and has not bound yet is
# never given to another worker, nor to an outgoing connection.
WORKER_PORTS_START, WORKER_PORTS_EACH, WORKER_PORT_RANGES = 16384, 2000, 8


def _worker_ports() -> Iterator[int] | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under xdist
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        return None
    first = WORKER_PORTS_START + int(worker[2:]) % WORKER_PORT_RANGES * WORKER_PORTS_EACH
    offset = random.randrange(WORKER_PORTS_EACH)  # a rerun does not start on the same ports
    # in turn, so a port handed out is handed out again only after all the others
    return itertools.cycle(
        first + (offset + i) % WORKER_PORTS_EACH for i in range(WORKER_PORTS_EACH)
    )


_PORTS = _worker_ports()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on: the kernel's choice, or the test worker's next."""
    if _PORTS is not None:
        for _ in range(WORKER_PORTS_EACH):
            port = next(_PORTS)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Everything here talks to loopback: never through a proxy from the environment.
_LOOPBACK_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def loopback_env() -> dict[str, str]:
    """The environment for children that talk to loopback servers: proxy settings removed."""
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with _LOOPBACK_OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait_until(
    ready: Callable[[], bool], what: str, proc: subprocess.Popen, log_path: Path, timeout: float
) -> None:
    """Poll ``ready`` until it holds; fail early, with the log's tail, if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            program = proc.args[0] if isinstance(proc.args, list) else proc.args
            raise RuntimeError(
                f"{program} exited with {proc.returncode}:\n"
                + log_path.read_text(errors="replace")[-3000:]
            )
        with contextlib.suppress(OSError):
            if ready():
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} after {timeout}s:\n" + log_path.read_text(errors="replace")[-3000:])


def wait_http(
    url: str,
    proc: subprocess.Popen,
    log_path: Path,
    timeout: float = 60.0,
    ok: tuple[int, ...] = (200, 204),
) -> None:
    _wait_until(
        lambda: http_get(url, timeout=1.0)[0] in ok, f"{url} not ready", proc, log_path, timeout
    )


@dataclass
class Server:
    name: str
    url: str
    port: int
    workdir: Path
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc, timeout=15)


def _require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise RuntimeError(
            f"{binary} not installed: run ./scripts/install-servers.sh (make test does)"
        )
    return path


@contextlib.contextmanager
def _workdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _spawn(args: list[str], workdir: Path) -> tuple[subprocess.Popen, Path]:
    log_path = workdir / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
    )
    log.close()
    return proc, log_path


@contextlib.contextmanager
def _serving(server: Server, health_url: str, log_path: Path) -> Iterator[None]:
    """Once the server answers its health URL, until the block ends; then it is stopped."""
    try:
        wait_http(health_url, server.proc, log_path)
        yield
    finally:
        server.stop()


# ---------------------------------------------------------------- Prometheus
class PromQLServer(Server):
    """The Prometheus query API, which VictoriaMetrics serves too."""

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = str(at)
        # A loaded 2-core machine can take seconds on a site-scale query: wait, do not fail.
        status, body = http_get(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=30.0
        )
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body[:500]!r}")
        return data["data"]["result"]

    def wait_for(self, expr: str, timeout: float = 60.0, min_results: int = 1) -> list[dict]:
        """Poll until the query returns at least ``min_results`` series."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= min_results:
                return result
            time.sleep(0.25)
        raise TimeoutError(f"{expr!r} gave {len(result)} series after {timeout}s")


@dataclass
class Prometheus(PromQLServer):
    def targets(self) -> list[dict]:
        _, body = http_get(f"{self.url}/api/v1/targets")
        return json.loads(body)["data"]["activeTargets"]


@contextlib.contextmanager
def run_prometheus(
    scrape_configs: list[dict], scrape_interval: str = "1s", rule_files: list[str] | None = None
) -> Iterator[Prometheus]:
    binary = _require("prometheus")
    with _workdir("hpcmon-prom-") as workdir:
        port = free_port()
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": scrape_configs,
        }
        if rule_files:
            config["rule_files"] = rule_files
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        proc, log_path = _spawn(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            workdir,
        )
        server = Prometheus("prometheus", f"http://127.0.0.1:{port}", port, workdir, proc)
        with _serving(server, f"{server.url}/-/ready", log_path):
            yield server


# ---------------------------------------------------------------- InfluxDB 1.x
# The documented site configuration (docs/site-scale.md, "InfluxDB for a site"): the TSI
# index; InfluxDB's own default limits, which 1.6.7 enforces only with the inmem index.
INFLUXDB_CONF = """\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"
[meta]
  dir = "{workdir}/meta"
[data]
  dir = "{workdir}/data"
  wal-dir = "{workdir}/wal"
  query-log-enabled = false
  index-version = "{index}"
  max-series-per-database = {max_series_per_database}
  max-values-per-tag = {max_values_per_tag}
[http]
  enabled = true
  bind-address = "127.0.0.1:{port}"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
"""
INFLUXDB_DATA_DEFAULTS = {
    "index": "tsi1",
    "max_series_per_database": 1_000_000,
    "max_values_per_tag": 100_000,
}


@dataclass
class InfluxDB1(Server):
    config_path: Path | None = None
    rpc_port: int = 0
    data_settings: dict | None = None  # [data] keys of INFLUXDB_DATA_DEFAULTS

    def query(self, q: str, db: str | None = None, epoch: str = "ns") -> dict:
        params = {"q": q, "epoch": epoch}
        if db:
            params["db"] = db
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.url}/query", data=data, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def create_database(self, name: str) -> None:
        self.query(f'CREATE DATABASE "{name}"')

    def series(self, q: str, db: str) -> list[dict]:
        """Result series of one query, or [] when empty."""
        result = self.query(q, db=db)["results"][0]
        if "error" in result:
            raise RuntimeError(result["error"])
        return result.get("series", [])

    def write_config(self) -> None:
        assert self.config_path is not None
        _write_influxdb_config(
            self.config_path, self.workdir, self.port, self.rpc_port, self.data_settings or {}
        )

    def start_again(self, **data_settings: object) -> None:
        """Start the stopped server on the same data; ``data_settings`` (e.g. a bigger
        max_series_per_database) change its configuration first."""
        if data_settings:
            self.data_settings = {**(self.data_settings or {}), **data_settings}
            self.write_config()
        binary = _require("influxd")
        self.proc, log_path = _spawn(
            [binary, "run", "-config", str(self.config_path)], self.workdir
        )
        wait_http(f"{self.url}/ping", self.proc, log_path)


def _write_influxdb_config(
    path: Path, workdir: Path, port: int, rpc_port: int, data_settings: Mapping[str, object]
) -> None:
    path.write_text(
        INFLUXDB_CONF.format(
            workdir=workdir,
            port=port,
            rpc_port=rpc_port,
            **{**INFLUXDB_DATA_DEFAULTS, **data_settings},
        )
    )


@contextlib.contextmanager
def run_influxdb1(**data_settings: object) -> Iterator[InfluxDB1]:
    """InfluxDB 1.x with the site configuration; ``data_settings`` override its [data] keys
    (index, max_series_per_database, max_values_per_tag)."""
    binary = _require("influxd")
    unknown = set(data_settings) - set(INFLUXDB_DATA_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown InfluxDB [data] settings: {sorted(unknown)}")
    with _workdir("hpcmon-influx-") as workdir:
        port, rpc_port = free_port(), free_port()
        config_path = workdir / "influxdb.conf"
        _write_influxdb_config(config_path, workdir, port, rpc_port, data_settings)
        proc, log_path = _spawn([binary, "run", "-config", str(config_path)], workdir)
        server = InfluxDB1(
            "influxdb",
            f"http://127.0.0.1:{port}",
            port,
            workdir,
            proc,
            config_path,
            rpc_port,
            dict(data_settings),
        )
        with _serving(server, f"{server.url}/ping", log_path):
            yield server


# ---------------------------------------------------------------- VictoriaMetrics
@dataclass
class VictoriaMetrics(PromQLServer):
    data_path: Path

    def flush(self) -> None:
        """Make just-written samples visible to queries."""
        http_get(f"{self.url}/internal/force_flush")

    def export(self, match: str) -> list[dict]:
        """Raw samples of matching series (JSON lines of /api/v1/export)."""
        self.flush()
        status, body = http_get(
            f"{self.url}/api/v1/export?{urllib.parse.urlencode({'match[]': match})}"
        )
        if status != 200:
            raise RuntimeError(f"export {match!r} failed: {body[:300]!r}")
        return [json.loads(line) for line in body.decode().splitlines() if line.strip()]

    def start_again(self) -> None:
        binary = _require("victoria-metrics")
        self.proc, log_path = _spawn(_vm_args(binary, self.data_path, self.port), self.workdir)
        wait_http(f"{self.url}/health", self.proc, log_path)


def _vm_args(binary: str, data_path: Path, port: int) -> list[str]:
    return [
        binary,
        f"-storageDataPath={data_path}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.latencyOffset=0s",
        "-loggerLevel=ERROR",
        "-search.disableCache",
    ]


@contextlib.contextmanager
def run_victoria_metrics() -> Iterator[VictoriaMetrics]:
    binary = _require("victoria-metrics")
    with _workdir("hpcmon-vm-") as workdir:
        port = free_port()
        data_path = workdir / "data"
        proc, log_path = _spawn(_vm_args(binary, data_path, port), workdir)
        server = VictoriaMetrics(
            "victoria-metrics", f"http://127.0.0.1:{port}", port, workdir, proc, data_path
        )
        with _serving(server, f"{server.url}/health", log_path):
            yield server


# ---------------------------------------------------------------- vmagent, vmalert
@dataclass
class VMAgent(Server):
    """A vmagent scraping and remote-writing; its queue stays on disk across restarts."""

    args: list[str] | None = None

    def targets(self) -> list[dict]:
        _, body = http_get(f"{self.url}/api/v1/targets")
        return json.loads(body)["data"]["activeTargets"]

    def start_again(self) -> None:
        self.proc, log_path = _spawn(list(self.args or []), self.workdir)
        wait_http(f"{self.url}/health", self.proc, log_path)


@contextlib.contextmanager
def run_vmagent(
    scrape_configs: list[dict],
    remote_write_url: str,
    extra_args: Sequence[str] = (),
    scrape_interval: str = "2s",
) -> Iterator[VMAgent]:
    binary = _require("vmagent")
    with _workdir("hpcmon-vmagent-") as workdir:
        port = free_port()
        config = {"global": {"scrape_interval": scrape_interval}, "scrape_configs": scrape_configs}
        (workdir / "scrape.yml").write_text(yaml.safe_dump(config))
        args = [
            binary,
            f"-promscrape.config={workdir / 'scrape.yml'}",
            f"-remoteWrite.url={remote_write_url}",
            f"-remoteWrite.tmpDataPath={workdir / 'queue'}",
            "-remoteWrite.flushInterval=500ms",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=ERROR",
            *extra_args,
        ]
        proc, log_path = _spawn(args, workdir)
        server = VMAgent("vmagent", f"http://127.0.0.1:{port}", port, workdir, proc, args)
        with _serving(server, f"{server.url}/health", log_path):
            yield server


@dataclass
class VMAlert(Server):
    def alerts(self) -> list[dict]:
        _, body = http_get(f"{self.url}/api/v1/alerts")
        return json.loads(body)["data"]["alerts"]


@contextlib.contextmanager
def run_vmalert(
    rule_files: Sequence[str],
    datasource_url: str,
    notifier_url: str,
    evaluation_interval: str = "2s",
) -> Iterator[VMAlert]:
    """vmalert reading and writing back (recording rules, ALERTS) to one VictoriaMetrics."""
    binary = _require("vmalert")
    with _workdir("hpcmon-vmalert-") as workdir:
        port = free_port()
        args = [
            binary,
            *(f"-rule={path}" for path in rule_files),
            f"-datasource.url={datasource_url}",
            f"-remoteWrite.url={datasource_url}",
            f"-remoteRead.url={datasource_url}",
            f"-notifier.url={notifier_url}",
            f"-evaluationInterval={evaluation_interval}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=ERROR",
        ]
        proc, log_path = _spawn(args, workdir)
        server = VMAlert("vmalert", f"http://127.0.0.1:{port}", port, workdir, proc)
        with _serving(server, f"{server.url}/health", log_path):
            yield server


# ---------------------------------------------------------------- hpcmon-exporter
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ExporterProcess:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def wait_port(port: int, proc: subprocess.Popen, log_path: Path, timeout: float = 30.0) -> None:
    """Until something listens on the loopback port (works for HTTP, TLS and basic auth alike)."""

    def listening() -> bool:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True

    _wait_until(listening, f"nothing listens on port {port}", proc, log_path, timeout)


HOST_TREE_FLAGS = ("--path.procfs", "--path.sysfs", "--path.cgroupfs")


def own_host_trees(args: Sequence[str], workdir: Path) -> list[str]:
    """``--path.*`` flags for an empty tree under `workdir` for each host tree `args` leave out
    (a flag given as ``--path.sysfs=X`` or ``--path.sysfs X`` counts)."""
    given = {arg.split("=", 1)[0] for arg in args}
    flags = []
    for flag in HOST_TREE_FLAGS:
        if flag not in given:
            tree = workdir / "host" / flag.removeprefix("--path.")
            tree.mkdir(parents=True, exist_ok=True)
            flags.append(f"{flag}={tree}")
    return flags


def start_exporter(
    args: Sequence[str],
    workdir: Path,
    env: Mapping[str, str] | None = None,
    log_name: str = "exporter.log",
) -> ExporterProcess:
    """``python -m hpcmon.exporter ARGS`` started on a free port (not waited for), with `env`
    added to its environment (e.g. a Slurm cluster's SLURM_CONF); its output in
    workdir/`log_name`. The exporter reads the host's /proc, /sys and cgroups only where ARGS
    name them: each tree ARGS leave out is an empty one of its own, so a Slurm job or a RAPL
    zone of this machine never shows up."""
    port = free_port()
    log_path = workdir / log_name
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-P",  # the installed hpcmon, never a folder in the working directory
                "-m",
                "hpcmon.exporter",
                f"--web.listen-address=127.0.0.1:{port}",
                *own_host_trees(args, workdir),
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env={**loopback_env(), **(env or {})},
        )
    return ExporterProcess(proc, port, log_path)


@contextlib.contextmanager
def run_exporter(
    args: Sequence[str],
    workdir: Path,
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    log_name: str = "exporter.log",
) -> Iterator[ExporterProcess]:
    """An exporter of `start_exporter`, once it listens; stopped when the block ends."""
    exporter = start_exporter(args, workdir, env, log_name)
    try:
        wait_port(exporter.port, exporter.proc, exporter.log_path, timeout)
        yield exporter
    finally:
        stop_process(exporter.proc)
