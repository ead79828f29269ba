"""The chart's pods, played on a node made of files: the rendered DaemonSets run for real.

Kubernetes cannot run here, so each test lays out a node's host paths in a temporary folder
(Lustre job_stats under /proc, RAPL zones under /sys as the kernel links them, Slurm's cgroup
tree, a prolog's job directory), resolves the rendered pod's hostPath volumes and mount paths
onto it, and runs the exporter with the rendered arguments (the listen address aside); the
group mode's init container runs its own shell command on the same files, the lctl mode's
wrapper really chroots into the node's root, a real Prometheus scrapes a TLS pod the way
the rendered ServiceMonitor says, and the flush CronJob's command empties a spool into a real
InfluxDB 1.6.7.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.servers import http_get, loopback_env, run_exporter
from hpcmon.exporter.geopm.model import BackendError
from hpcmon.exporter.geopm.powercap import PowercapBackend
from hpcmon.post_job.spool import Spool
from tests.deploy.test_helm_chart import case_values, chart, of_kind, pod_container, render

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"
JOB_STATS = (
    DATA / "jobstats" / "HewlettPackard_lustre_exporter__proc_fs_lustre_obdfilter_"
    "lustrefs-OST0000_job_stats__lustre2.10.1.txt"
)
PROC_STATUS = DATA / "geopm" / "node_jobs" / "proc_pid_status_uid1000.txt"
ZONES = {"0": ("package-0", 5_000_000), "1": ("package-1", 7_000_000)}


@pytest.fixture
def node() -> Iterator[Path]:
    """A node's host paths; traversable by an unprivileged uid (pytest's tmp_path is not)."""
    root = Path(tempfile.mkdtemp(prefix="hpcmon-node-"))
    root.chmod(0o755)
    ost = root / "proc/fs/lustre/obdfilter/lustrefs-OST0000"
    ost.mkdir(parents=True)
    shutil.copy(JOB_STATS, ost / "job_stats")
    (ost / "job_stats").chmod(0o644)  # as Lustre creates it (lprocfs_job_stats_init)
    (root / "proc/1234").mkdir()
    shutil.copy(PROC_STATUS, root / "proc/1234/status")
    job = root / "sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242"
    job.mkdir(parents=True)
    (job / "cgroup.procs").write_text("1234\n")
    (root / "sys/class/powercap").mkdir(parents=True)
    for zone, (name, energy) in ZONES.items():
        path = root / f"sys/devices/virtual/powercap/intel-rapl/intel-rapl:{zone}"
        path.mkdir(parents=True)
        (path / "name").write_text(name + "\n")
        (path / "max_energy_range_uj").write_text("262143328850\n")
        (path / "energy_uj").write_text(f"{energy}\n")
        (path / "energy_uj").chmod(0o400)  # root only, as since Linux 5.10
        (root / f"sys/class/powercap/intel-rapl:{zone}").symlink_to(path)
    for directory in root.rglob("*"):
        if directory.is_dir() and not directory.is_symlink():
            directory.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def daemonset(case: str | dict[str, Any], role: str) -> dict[str, Any]:
    """The pod spec of a role's DaemonSet, for an example values file or values given here."""
    values = case if isinstance(case, dict) else case_values(case)
    (found,) = [
        obj
        for obj in of_kind(render(values), "DaemonSet")
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == role
    ]
    return found["spec"]["template"]["spec"]


def host_mounts(
    pod: dict[str, Any],
    container: dict[str, Any],
    node: Path,
    sources: dict[str, Path] | None = None,
) -> dict[str, Path]:
    """Mount path -> where its hostPath volume lies on the node (checked as the kubelet does),
    or the folder standing for its Secret or ConfigMap (by name) in ``sources``."""
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" in volume:
            mounts[mount["mountPath"]] = (sources or {})[volume["secret"]["secretName"]]
            continue
        if "configMap" in volume:
            mounts[mount["mountPath"]] = (sources or {})[volume["configMap"]["name"]]
            continue
        host_path = volume.get("hostPath")
        if host_path is None:
            continue
        on_node = node / host_path["path"].lstrip("/")
        if host_path.get("type") == "DirectoryOrCreate":
            on_node.mkdir(parents=True, exist_ok=True)
        assert on_node.is_dir(), f"hostPath {host_path['path']} is not a directory on the node"
        mounts[mount["mountPath"]] = on_node
    return mounts


def on_node(text: str, mounts: dict[str, Path]) -> str:
    """A path in the container, or a flag holding one, as the same file on the node."""
    flag, equals, value = text.partition("=")
    path = value if equals else flag
    for mount_path in sorted(mounts, key=len, reverse=True):
        if path == mount_path or path.startswith(mount_path + "/"):
            path = str(mounts[mount_path]) + path[len(mount_path) :]
            break
    return f"{flag}={path}" if equals else path


def exporter_args(
    pod: dict[str, Any], node: Path, sources: dict[str, Path] | None = None
) -> list[str]:
    exporter = pod_container(pod)
    mounts = host_mounts(pod, exporter, node, sources)
    return [
        on_node(arg, mounts)
        for arg in exporter["args"]
        if not arg.startswith("--web.listen-address=")  # a free loopback port instead
    ]


def scrape_until(address: str, ready, timeout: float = 30.0) -> dict[tuple, float]:
    """{(name, sorted labels): value} of the first scrape for which ``ready`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_get(f"http://{address}/metrics")
        samples = {}
        if status == 200:
            for family in text_string_to_metric_families(body.decode()):
                for sample in family.samples:
                    samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
            if ready(samples):
                return samples
        assert time.monotonic() < deadline, f"no ready scrape within {timeout} s"
        time.sleep(0.2)


def value(samples: dict[tuple, float], name: str, **labels: str) -> float | None:
    for (sample_name, sample_labels), sample_value in samples.items():
        if sample_name == name and labels.items() <= dict(sample_labels).items():
            return sample_value
    return None


def test_lustre_pod_exports_the_nodes_job_stats(node: Path, tmp_path: Path) -> None:
    pod = daemonset("lustre-servers-values.yaml", "lustre")
    assert pod["securityContext"]["runAsUser"] != 0
    with run_exporter(exporter_args(pod, node), tmp_path) as exporter:
        samples = scrape_until(
            exporter.address,
            lambda s: value(s, "lustre_jobstats_up", target="lustrefs-OST0000") == 1,
        )
    assert (
        value(samples, "lustre_job_write_bytes_total", target="lustrefs-OST0000", jobid="24")
        == 215147593728
    )


def test_compute_pod_exports_the_nodes_power_and_jobs(node: Path, tmp_path: Path) -> None:
    pod = daemonset("default", "compute")
    assert pod["securityContext"]["runAsUser"] == 0  # reads the 0400 energy_uj as their owner
    with run_exporter(exporter_args(pod, node), tmp_path) as exporter:
        samples = scrape_until(
            exporter.address,
            lambda s: (
                value(s, "geopm_up", source="powercap") == 1
                and value(s, "hpc_node_job_info", jobid="4242") == 1
            ),
        )
    assert value(samples, "hpc_node_job_info", jobid="4242", uid="1000") == 1
    total = value(samples, "geopm_cpu_energy_joules_total", domain_index="0")
    assert total is not None and total >= ZONES["0"][1] / 1e6


def chroot_shell(root: Path) -> None:
    """This machine's /bin/sh and the libraries it loads, inside ``root`` (a host's root)."""
    shell = Path("/bin/sh").resolve()
    needed = [shell]
    listing = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, check=True)
    for line in listing.stdout.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/"):
            needed.append(Path(path))
    for path in needed:
        copy = root / str(path).lstrip("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path.resolve(), copy)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin/sh").exists():
        (root / "bin/sh").symlink_to(shell)


# lctl as a Lustre OSS has it, for the chart's chroot: nothing but the shell's builtins.
HOST_LCTL = """#!/bin/sh
[ "$1" = get_param ] || exit 64
if [ "$2" != "obdfilter.*.job_stats" ]; then
  echo "error: get_param: param_path '$2': No such file or directory" >&2; exit 2
fi
printf 'obdfilter.lustrefs-OST0000.job_stats=\\n'
while IFS= read -r line; do printf '%s\\n' "$line"; done < /var/lib/job_stats
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root, as the chart's lctl mode does")
def test_lctl_mode_runs_the_hosts_lctl_through_the_charts_chroot(node: Path, tmp_path: Path):
    values: dict[str, dict[str, Any]] = {"compute": {"enabled": False}, "lustre": {"enabled": True}}
    values["lustre"]["jobstats"] = {"source": "lctl", "lctlPath": "/usr/sbin/lctl"}
    (wrapper_map,) = [
        obj
        for obj in of_kind(render(values), "ConfigMap")
        if obj["metadata"]["name"].endswith("-lctl")
    ]
    pod = daemonset(values, "lustre")
    assert "SYS_CHROOT" in pod_container(pod)["securityContext"]["capabilities"]["add"]
    # The host: its own shell and lctl, a job_stats capture.
    chroot_shell(node)
    (node / "usr/sbin").mkdir(parents=True)
    (node / "usr/sbin/lctl").write_text(HOST_LCTL)
    (node / "usr/sbin/lctl").chmod(0o755)
    (node / "var/lib").mkdir(parents=True)
    shutil.copy(JOB_STATS, node / "var/lib/job_stats")
    # The ConfigMap volume: the wrapper, with the pod's /host resolved onto the node.
    volume = tmp_path / "lctl-configmap"
    volume.mkdir()
    mounts = host_mounts(pod, pod_container(pod), node, {wrapper_map["metadata"]["name"]: volume})
    for name, text in wrapper_map["data"].items():
        (volume / name).write_text(text.replace("chroot /host ", f"chroot {mounts['/host']} "))
        (volume / name).chmod(0o555)
    args = exporter_args(pod, node, {wrapper_map["metadata"]["name"]: volume})
    with run_exporter(args, tmp_path) as exporter:
        samples = scrape_until(
            exporter.address,
            lambda s: value(s, "lustre_jobstats_up", target="lustrefs-OST0000") == 1,
        )
    assert (
        value(samples, "lustre_job_write_bytes_total", target="lustrefs-OST0000", jobid="24")
        == 215147593728
    )


@contextlib.contextmanager
def as_pod_user(context: dict[str, Any]) -> Iterator[None]:
    """This process with the pod's uid, gid and supplementary groups (tests run as root)."""
    groups = os.getgroups()
    os.setgroups(context.get("supplementalGroups", []))
    os.setegid(context["runAsGroup"])
    os.seteuid(context["runAsUser"])
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the init container's chgrp")
def test_group_mode_init_container_lets_the_exporter_read_energy(node: Path) -> None:
    pod = daemonset("compute-nodes-values.yaml", "compute")
    sysfs = node / "sys"
    with as_pod_user(pod["securityContext"]), pytest.raises(BackendError, match="permission"):
        PowercapBackend(sysfs).read()  # the pod's user alone cannot read energy_uj

    (init,) = pod["initContainers"]
    mounts = host_mounts(pod, init, node)
    shell, option, script = init["command"]
    for mount_path, path in mounts.items():
        script = script.replace(mount_path, str(path))
    subprocess.run([shell, option, script], check=True, timeout=60)

    group = pod["securityContext"]["supplementalGroups"][0]
    for zone in ZONES:
        energy = sysfs / f"class/powercap/intel-rapl:{zone}/energy_uj"
        assert (energy.stat().st_gid, energy.stat().st_mode & 0o777) == (group, 0o440)
    with as_pod_user(pod["securityContext"]):
        after = PowercapBackend(sysfs).read()
    assert after.errors == []
    assert len(after.samples) == len(ZONES)


def scrape_config(
    endpoint: dict[str, Any], job: str, target: str, meta: dict, **auth
) -> dict[str, Any]:
    """What prometheus-operator makes of a ServiceMonitor endpoint, for one discovered target:
    scheme, path, TLS, basic auth and the relabelings, with its discovery metadata as labels."""
    relabelings = [
        {
            "source_labels": rule["sourceLabels"],
            "regex": rule["regex"],
            "target_label": rule["targetLabel"],
            "replacement": rule["replacement"],
            "action": rule["action"],
        }
        for rule in endpoint["relabelings"]
    ]
    config = {
        "job_name": job,
        "scheme": endpoint["scheme"],
        "metrics_path": endpoint["path"],
        "static_configs": [{"targets": [target], "labels": meta}],
        "relabel_configs": relabelings,
    }
    if "tlsConfig" in endpoint:
        config["tls_config"] = {
            "ca_file": auth["ca_file"],
            "server_name": endpoint["tlsConfig"]["serverName"],
            "insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"],
        }
    if "basicAuth" in endpoint:
        config["basic_auth"] = {"username": auth["username"], "password": auth["password"]}
    return config


@pytest.mark.integration
def test_prometheus_scrapes_the_tls_pod_the_way_the_servicemonitor_says(
    node: Path, tmp_path: Path, prometheus_factory
) -> None:
    case = "everything-on-values.yaml"
    values = chart().merge_values(case_values(case))
    web = values["exporter"]["webConfig"]
    endpoint = of_kind(render(case_values(case)), "ServiceMonitor")[0]["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    # The two Secrets the values name: the web config with its certificate, the scrape login.
    secret = tmp_path / web["secretName"]
    secret.mkdir()
    server_name = endpoint["tlsConfig"]["serverName"]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", f"/CN={server_name}", "-addext", f"subjectAltName=DNS:{server_name}"]
        + ["-keyout", str(secret / "tls.key"), "-out", str(secret / "tls.crt")],
        check=True,
        capture_output=True,
    )
    password = "scrape-me"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    pod = daemonset(case, "compute")
    mounts = host_mounts(pod, pod_container(pod), node, {web["secretName"]: secret})
    # The file names its certificate by its path in the pod, as the chart's README says.
    (secret / web["key"]).write_text(
        "tls_server_config:\n"
        f"  cert_file: {on_node('/etc/hpcmon/web/tls.crt', mounts)}\n"
        f"  key_file: {on_node('/etc/hpcmon/web/tls.key', mounts)}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    job = values["compute"]["job"]
    with run_exporter(exporter_args(pod, node, {web["secretName"]: secret}), tmp_path) as exporter:
        config = scrape_config(
            endpoint,
            job,
            exporter.address,
            {"__meta_kubernetes_pod_node_name": "node01"},
            ca_file=str(secret / "tls.crt"),
            username="prometheus",
            password=password,
        )
        wrong = dict(config, job_name="wrong-password")
        wrong["basic_auth"] = {"username": "prometheus", "password": "guess"}
        prometheus = prometheus_factory([config, wrong])
        (up,) = prometheus.wait_for(f'up{{job="{job}"}} == 1', timeout=60)
        assert up["metric"]["instance"] == "node01"  # the ServiceMonitor's relabeling
        prometheus.wait_for(f'geopm_up{{job="{job}",source="powercap"}} == 1', timeout=60)
        prometheus.wait_for('up{job="wrong-password"} == 0', timeout=60)


@pytest.mark.integration
def test_external_hosts_are_named_by_their_hostname_under_the_rules_job(
    node: Path, tmp_path: Path, prometheus_factory
) -> None:
    case = "external-hosts-values.yaml"
    objects = render(case_values(case))
    (monitor,) = of_kind(objects, "ServiceMonitor")
    (service,) = of_kind(objects, "Service")
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    (slice_,) = [s for s in of_kind(objects, "EndpointSlice") if s["addressType"] == "IPv4"]
    hostname = slice_["endpoints"][0]["hostname"]
    endpoint = monitor["spec"]["endpoints"][0]
    # The exporter of a Lustre server outside Kubernetes, played by a Lustre pod's command.
    with run_exporter(
        exporter_args(daemonset("lustre-servers-values.yaml", "lustre"), node), tmp_path
    ) as exporter:
        configs = [
            scrape_config(endpoint, job, exporter.address, {meta: hostname}) | {"job_name": role}
            for role, meta in (
                ("endpoints", "__meta_kubernetes_endpoint_hostname"),
                ("endpointslice", "__meta_kubernetes_endpointslice_endpoint_hostname"),
            )
        ]
        prometheus = prometheus_factory(configs)
        found = prometheus.wait_for("up == 1", timeout=60, min_results=2)
    assert {series["metric"]["instance"] for series in found} == {hostname}
    assert job == "hpcmon-jobstats"  # what the generated rules' up{job=...} expects


@pytest.mark.integration
def test_flush_cronjob_replays_the_shared_spool_into_influxdb(
    node: Path, tmp_path: Path, influxdb1
) -> None:
    influxdb1.create_database("hpc_helm")
    flush = {
        "enabled": True,
        "spool": {"hostPath": "/var/spool/hpcmon"},
        "influx": {"v1": {"url": influxdb1.url, "database": "hpc_helm"}},
    }
    (cronjob,) = of_kind(render({"postJob": {"flush": flush}}), "CronJob")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # What epilogs left behind while InfluxDB was away: two spooled batches.
    (node / "var/spool/hpcmon").mkdir(parents=True)
    spool = Spool(node / "var/spool/hpcmon", "influx-v1")
    lines = [
        f"hpcmon_helm_flush,jobid=77 bytes={i}i {1_700_000_000 + i}000000000" for i in range(6)
    ]
    spool.add(lines[:3])
    spool.add(lines[3:])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    mounts = host_mounts(pod, container, node) | {"/tmp": tmp}  # the emptyDir
    args = [on_node(arg, mounts) for arg in container["args"]]
    env = dict(loopback_env(), PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    result = subprocess.run(
        [sys.executable, "-m", "hpcmon.post_job", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert spool.pending() == []
    series = influxdb1.series('SELECT count("bytes") FROM "hpcmon_helm_flush"', db="hpc_helm")
    assert series[0]["values"][0][1] == len(lines)


@pytest.mark.integration
def test_compute_flush_container_replays_the_nodes_spool_into_influxdb(
    node: Path, tmp_path: Path, influxdb1
) -> None:
    """The compute pod's flush container, its shell loop as rendered: the epilog's config and
    spool on the node, one run that empties the spool into a real InfluxDB, and SIGTERM during
    the sleep that ends the loop at once with status 0."""
    influxdb1.create_database("hpc_node_flush")
    pod = daemonset({"compute": {"postJob": {"flush": {"enabled": True}}}}, "compute")
    flush = pod_container(pod, "flush")
    (node / "etc/hpcmon").mkdir(parents=True)  # the host's config directory (type Directory)
    mounts = host_mounts(pod, flush, node) | {"/tmp": tmp_path}  # the emptyDir
    spool_dir = on_node("/var/spool/hpcmon-post-job", mounts)
    # The node's epilog config: paths in it are host paths, which the pod mounts as they are.
    Path(on_node("/etc/hpcmon/post-job.yaml", mounts)).write_text(
        f"time_limit_seconds: 30\nspool_dir: {spool_dir}\n"
        f"writers:\n  influx_v1:\n    url: {influxdb1.url}\n    database: hpc_node_flush\n"
    )
    # What epilogs on this node left behind while InfluxDB was away.
    spool = Spool(Path(spool_dir), "influx-v1")
    lines = [
        f"hpcmon_node_flush,jobid=78 bytes={i}i {1_700_000_000 + i}000000000" for i in range(4)
    ]
    spool.add(lines[:2])
    spool.add(lines[2:])
    # The image's hpcmon-post-job on PATH, this checkout behind it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hpcmon-post-job").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m hpcmon.post_job "$@"\n'
    )
    (bin_dir / "hpcmon-post-job").chmod(0o755)
    shell, option, script = flush["command"]
    config = on_node("/etc/hpcmon/post-job.yaml", mounts)
    assert "'/etc/hpcmon/post-job.yaml'" in script
    script = script.replace("'/etc/hpcmon/post-job.yaml'", f"'{config}'")
    env = dict(loopback_env(), PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    loop = subprocess.Popen([shell, option, script], cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 60
        while spool.pending() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert spool.pending() == []
        query = 'SELECT count("bytes") FROM "hpcmon_node_flush"'
        assert influxdb1.series(query, db="hpc_node_flush")[0]["values"][0][1] == len(lines)
        time.sleep(1)  # the run is over; the loop sleeps its interval
        assert loop.poll() is None
        loop.terminate()
        assert loop.wait(timeout=10) == 0
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
