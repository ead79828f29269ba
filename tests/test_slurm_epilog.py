"""Issue 30: the shipped epilog under a real Slurm (Debian's slurmctld, three slurmd "nodes",
munge; devtools/slurm.py), jobs of uid 65534 that leave a real Darshan log where
darshan-runtime would, InfluxDB 1.6.7. deploy/slurm/hpcmon-epilog.sh is used as it is: the
site wrapper only sets where the hook and its config are (and, here, HPCMON_LOG_STDERR with
stderr to a file per job and node: there is no syslog on a test machine)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.slurm import SlurmCluster, run_slurm
from hpcmon.post_job.slurm import first_node, node_position
from tests import servers
from tests.post_job.lineprotocol_parse import parse_line
from tests.test_slurm_cluster import SLURM_TESTS

pytestmark = SLURM_TESTS

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "deploy" / "slurm" / "hpcmon-epilog.sh"
LOG = REPO / "tests" / "data" / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"
HOOK = Path(sys.executable).parent / "hpcmon-post-job"
DATABASE = "slurm_jobs"
USER = "nobody"
TIME_LIMIT = 20
SQUEUE_TIMEOUT = 2

# The job writes its Darshan log as darshan-runtime names it, mode 0400, in the day's directory.
JOB = """#!/bin/sh
sleep 1
if [ -n "{copy}" ]; then
    day="{logdir}/$(date +%Y)/$(date +%-m)/$(date +%-d)"
    name="$(id -un)_mpi-io-test_id${{SLURM_JOB_ID}}_$(date +%-m-%-d)-$(date +%s)-1234_1.darshan"
    cp "{log}" "$day/$name" && chmod 0400 "$day/$name"
fi
exit {status}
"""
WRAPPER = """#!/bin/sh
export HPCMON_POST_JOB={hook} HPCMON_CONFIG={config} HPCMON_LOG_STDERR=1
exec {script} 2>>"{logs}/$SLURM_JOB_ID-$SLURMD_NODENAME.log"
"""


class Site:
    """A site's files: the Darshan log tree (1777 day directories, as darshan-mk-log-dirs
    makes them), reports, spool, the epilog's config and its logs."""

    def __init__(self, base: Path) -> None:
        self.base = base
        base.chmod(0o755)
        self.logdir = base / "darshan-logs"
        self.spool = base / "spool"
        self.logs = base / "epilog-logs"
        self.lp = base / "lp"
        self.config = base / "post-job.yaml"
        self.log = base / LOG.name  # what the jobs copy: readable by their uid wherever the tree is
        shutil.copy(LOG, self.log)
        self.log.chmod(0o644)
        for directory in (self.logdir, self.logs, self.lp, base / "reports"):
            directory.mkdir(mode=0o755)
        today = dt.date.today()
        for day in (today - dt.timedelta(days=1), today, today + dt.timedelta(days=1)):
            path = self.logdir / str(day.year) / str(day.month) / str(day.day)
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o1777)

    def write_config(self, influx_url: str, **extra: object) -> None:
        data = {
            "cluster": "hpcmon",
            "app": "{job_name}",
            "time_limit_seconds": TIME_LIMIT,
            "log": "stderr",
            "spool_dir": str(self.spool),
            "writers": {
                "influx_v1": {"url": influx_url, "database": DATABASE},
                "output": str(self.lp / "{jobid}.lp"),
                "request_timeout_seconds": 3,
            },
            "report": {"dir": str(self.base / "reports" / "{user}"), "format": "json"},
            # under the clients' own give-up time (MessageTimeout - 1 s): the hook's bound
            "slurm": {"timeout_seconds": SQUEUE_TIMEOUT},
            "sources": {"darshan": {"logdir": str(self.logdir)}},
            **extra,
        }
        self.config.write_text(yaml.safe_dump(data))

    def epilog_log(self, jobid: str) -> dict[str, str]:
        """Node -> what the epilog said on it for the job."""
        return {
            path.stem.rsplit("-", 1)[1]: path.read_text()
            for path in self.logs.glob(f"{jobid}-*.log")
        }


@pytest.fixture(scope="module")
def site(influxdb1: servers.InfluxDB1) -> Iterator[Site]:
    """Outside pytest's temporary directory, which is root's 0700: the jobs' uid must reach
    the log tree."""
    influxdb1.create_database(DATABASE)
    with tempfile.TemporaryDirectory(prefix="hpcmon-slurm-site-") as base:
        found = Site(Path(base))
        found.write_config(influxdb1.url)
        yield found


@pytest.fixture(scope="module")
def cluster(site: Site) -> Iterator[SlurmCluster]:
    wrapper = site.base / "site-epilog.sh"
    wrapper.write_text(WRAPPER.format(hook=HOOK, config=site.config, script=SCRIPT, logs=site.logs))
    wrapper.chmod(0o755)
    with run_slurm(nodes=3, epilog=wrapper) as slurm:
        print(f"Slurm cluster {slurm.conf_path}: proctrack/{slurm.proctrack}")
        yield slurm


def submit(
    cluster: SlurmCluster, site: Site, *, nodes: int = 1, name: str, status: int = 0,
    copy: bool = True, account: str | None = "proj1",
) -> tuple[str, dict[str, str], float]:  # fmt: skip
    """Run a job to its end; its id, scontrol's last view and the seconds from the job's end
    (as slurmctld stamps it) until every node was idle again."""
    script = JOB.format(copy="1" if copy else "", logdir=site.logdir, log=site.log, status=status)
    jobid = cluster.sbatch(script, nodes=nodes, job_name=name, account=account)
    info = cluster.wait_job_done(jobid, timeout=120)
    idle = time.time()
    end = dt.datetime.strptime(info["EndTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    return jobid, info, idle - end


def stored(influx: servers.InfluxDB1, jobid: str, database: str = DATABASE) -> set[tuple]:
    """Every point of the job in the database as (measurement, tags, fields, time)."""
    found = set()
    for series in influx.series(
        f"SELECT * FROM /.*/ WHERE \"jobid\" = '{jobid}' GROUP BY *", database
    ):
        for row in series["values"]:
            fields = {
                column: value
                for column, value in zip(series["columns"][1:], row[1:], strict=True)
                if value is not None
            }
            tags = {key: value for key, value in series["tags"].items() if value != ""}
            found.add(
                (
                    series["name"],
                    frozenset(tags.items()),
                    frozenset(fields.items()),
                    row[0],
                )
            )
    return found


# what only the epilog writes: Slurm's record, and the job's index (which counts it)
OWN = ("slurm_job", "job_index")


def by_hand_index(points: set[tuple]) -> set[tuple]:
    return {p for p in points if p[0] == "job_index"}


def as_points(lines: list[str]) -> set[tuple]:
    found = set()
    for line in lines:
        measurement, tags, fields, stamp = parse_line(line)
        tags = {key: value for key, value in tags.items() if value != ""}
        found.add((measurement, frozenset(tags.items()), frozenset(fields.items()), stamp))
    return found


def by_hand(site: Site, jobid: str, app: str, out: Path) -> list[str]:
    """The same log through the command line, as an engineer would rerun it."""
    [log] = site.logdir.rglob(f"*_id{jobid}_*.darshan")
    subprocess.run(
        [HOOK, "--job-id", jobid, "--cluster", "hpcmon", "--user", USER, "--app", app,
         "--read-as-uid", "65534", "--darshan", str(log), "--output", str(out)],
        check=True, capture_output=True, env=servers.loopback_env(),
    )  # fmt: skip
    return out.read_text().splitlines()


def slurm_record(influx: servers.InfluxDB1, jobid: str) -> dict:
    [series] = influx.series(
        f'SELECT * FROM "slurm_job" WHERE "jobid" = \'{jobid}\' GROUP BY *', DATABASE
    )
    [row] = series["values"]
    fields = dict(zip(series["columns"], row, strict=True))
    return {**series["tags"], **{k: v for k, v in fields.items() if v is not None}}


def local_epoch(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


@pytest.mark.parametrize("nodes", [2, 3])
def test_a_multi_node_job_is_ingested_once(
    cluster: SlurmCluster, site: Site, influxdb1, tmp_path: Path, nodes: int
) -> None:
    jobid, info, to_idle = submit(cluster, site, nodes=nodes, name=f"ior-{nodes}n")
    print(f"\nInfluxDB up, {nodes} nodes: job end -> nodes idle {to_idle:.1f} s")
    said = site.epilog_log(jobid)
    assert sorted(said) == [f"n{i}" for i in range(1, nodes + 1)]  # the epilog ran everywhere
    readers = [node for node, text in said.items() if "source=darshan found" in text]
    assert readers == ["n1"], said  # ... and only the job's first node read the log
    assert all(not text for node, text in said.items() if node != "n1"), said
    points = stored(influxdb1, jobid)
    base = {"cluster": "hpcmon", "user": USER, "app": f"ior-{nodes}n"}
    data = [p for p in points if p[0] != "job_index"]  # the job id is a field (layout.py)
    assert all(base.items() <= dict(tags).items() for _, tags, _, _ in data)
    assert all(dict(fields)["jobid"] == jobid for _, _, fields, _ in data)
    # the points equal a run by hand on the same log, plus Slurm's record of the job
    hand = as_points(by_hand(site, jobid, f"ior-{nodes}n", tmp_path / "hand.lp"))
    assert {p for p in points if p[0] not in OWN} == hand - by_hand_index(hand)
    record = slurm_record(influxdb1, jobid)
    assert record["nodelist"] == info["NodeList"] == f"n[1-{nodes}]"
    assert record["num_nodes"] == nodes


def test_the_job_s_record_succeeded_failed_and_without_logs(
    cluster: SlurmCluster, site: Site, influxdb1
) -> None:
    jobs = {
        "ok": submit(cluster, site, nodes=2, name="ok-run"),
        "exit3": submit(cluster, site, name="exits 3 | twice", status=3),
        "nolog": submit(cluster, site, name="no-log", copy=False, account=None),
    }
    for key, (jobid, info, _) in jobs.items():
        record = slurm_record(influxdb1, jobid)
        expected = {
            "jobid": jobid,
            "job_id": jobid,
            "cluster": "hpcmon",
            "user": USER,
            "partition": "debug",
            "nodelist": info["NodeList"],
            "num_nodes": int(info["NumNodes"]),
            "exit_code": int(info["ExitCode"].split(":")[0]),
            "exit_signal": int(info["ExitCode"].split(":")[1]),
            "job_name": info["JobName"],
            "start": local_epoch(info["StartTime"]),
            "end": local_epoch(info["EndTime"]),
        }
        if key != "nolog":
            expected["account"] = "proj1"
        expected["app"] = info["JobName"]  # app: "{job_name}"
        assert {k: v for k, v in record.items() if k != "time"} == expected
        assert record["time"] // 10**9 == int(expected["start"])  # its second: layout.py
    assert slurm_record(influxdb1, jobs["exit3"][0])["exit_code"] == 3
    # a job without any log leaves its record, and only that
    nolog = jobs["nolog"][0]
    assert {p[0] for p in stored(influxdb1, nolog)} - {"job_index"} == {"slurm_job"}
    assert influxdb1.series(f"SELECT * FROM job_index WHERE \"jobid\" = '{nolog}'", DATABASE)


def test_the_report_is_for_its_user_alone(cluster: SlurmCluster, site: Site) -> None:
    jobid, info, _ = submit(cluster, site, name="reported")
    report = site.base / "reports" / USER / f"{jobid}.json"
    shown = subprocess.run(["runuser", "-u", USER, "--", "cat", str(report)], capture_output=True)
    assert shown.returncode == 0, site.epilog_log(jobid)
    shown_report = json.loads(shown.stdout)
    assert shown_report["job_id"] == jobid
    slurm = shown_report["slurm"]  # Slurm's view comes first
    assert (slurm["job_name"], slurm["nodelist"], slurm["exit_code"]) == ("reported", "n1", 0)
    refused = subprocess.run(
        ["runuser", "-u", "daemon", "--", "cat", str(report)], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    listing = subprocess.run(
        ["runuser", "-u", "daemon", "--", "ls", str(report.parent)], capture_output=True
    )
    assert listing.returncode != 0
    assert report.stat().st_mode & 0o077 == 0 and report.parent.stat().st_mode & 0o007 == 0


def test_with_influxdb_down_the_nodes_are_idle_in_time_and_flush_delivers(
    cluster: SlurmCluster, site: Site, influxdb1, tmp_path: Path, capsys
) -> None:
    with servers.run_influxdb1() as down:
        down.create_database(DATABASE)
        url = down.url
        down.stop()
        site.write_config(url)
        try:
            jobid, info, to_idle = submit(cluster, site, nodes=2, name="while-down")
        finally:
            site.write_config(influxdb1.url)
        with capsys.disabled():
            print(f"\nInfluxDB down (refusing): job end -> nodes idle {to_idle:.1f} s")
        assert to_idle < TIME_LIMIT + 5
        spooled = list((site.spool / "influx-v1").glob("*.spool"))
        assert spooled, site.epilog_log(jobid)
        exporter_args = [
            "--no-collector.jobstats", "--collector.postjob", f"--postjob.spool-dir={site.spool}"
        ]  # fmt: skip
        with servers.run_exporter(exporter_args, tmp_path) as exporter:
            _, body = servers.http_get(f"http://{exporter.address}/metrics")
        backlog = [
            line for line in body.decode().splitlines()
            if line.startswith('hpcmon_postjob_spool_lines{kind="influx-v1"}')
        ]  # fmt: skip
        assert backlog and float(backlog[0].split()[-1]) > 0
        down.start_again()
        config = tmp_path / "flush.yaml"
        data = yaml.safe_load(site.config.read_text())
        data["writers"]["influx_v1"]["url"] = down.url
        config.write_text(yaml.safe_dump(data))
        flushed = subprocess.run(
            [HOOK, "flush", "--config", str(config)], capture_output=True, text=True,
            env=servers.loopback_env(),
        )  # fmt: skip
        assert flushed.returncode == 0, flushed.stderr
        assert not list((site.spool / "influx-v1").glob("*.spool"))
        hand = as_points(by_hand(site, jobid, "while-down", tmp_path / "hand.lp"))
        delivered = stored(down, jobid)
        assert {p for p in delivered if p[0] not in OWN} == hand - by_hand_index(hand)
        assert {p[0] for p in delivered} >= {"slurm_job", "darshan_job"}


def test_a_hanging_influxdb_costs_the_time_limit_at_most(
    cluster: SlurmCluster, site: Site, capsys
) -> None:
    """A server that takes connections and never answers: every request waits its timeout,
    the hook spools and stops within its limit, and the nodes are idle."""
    with socket.socket() as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(64)
        up = _url_of(site)
        site.write_config(f"http://127.0.0.1:{blackhole.getsockname()[1]}")
        try:
            _, _, to_idle = submit(cluster, site, name="while-hanging")
        finally:
            site.write_config(up)
    with capsys.disabled():
        print(f"\nInfluxDB hanging: job end -> nodes idle {to_idle:.1f} s")
    assert to_idle < TIME_LIMIT + 5
    assert list((site.spool / "influx-v1").glob("*.spool"))


def _url_of(site: Site) -> str:
    return yaml.safe_load(site.config.read_text())["writers"]["influx_v1"]["url"]


def test_an_unanswering_slurmctld_costs_the_timeout(
    cluster: SlurmCluster, site: Site, tmp_path: Path
) -> None:
    """slurmctld gone while a node's epilog asks: the hook waits at most
    slurm.timeout_seconds, says so in one line, and still writes the job's points."""
    jobid, _, _ = submit(cluster, site, name="asked-late")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM")},
        **cluster.env,
        "SLURM_JOB_ID": jobid, "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": USER,
        "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n1", "HPCMON_POST_JOB": str(HOOK),
        "HPCMON_CONFIG": str(site.config), "HPCMON_LOG_STDERR": "1",
    }  # fmt: skip
    cluster.stop_controller()
    try:
        started = time.monotonic()
        done = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    finally:
        cluster.start_controller()
    said = [line for line in done.stderr.splitlines() if "slurmctld not asked" in line]
    assert said and f"no answer within {SQUEUE_TIMEOUT} s" in said[0], done.stderr
    assert took < TIME_LIMIT and f"job={jobid} done" in done.stderr


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["n", "gpu", "r1-c"]),
            st.integers(0, 40),
            st.integers(0, 3),
            st.integers(1, 2),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_first_node_is_scontrol_s(cluster: SlurmCluster, hosts) -> None:
    """The hook's first host of a node list equals the first of `scontrol show hostnames`,
    and each host's place in it is the one the hook finds (its index point's stamp); names
    with two brackets included (`r[1-2]-n[3,5]`)."""
    parts = []
    for prefix, low, span, width in hosts:
        high = low + span
        numbers = f"[{low:0{width}d}-{high:0{width}d}]" if span else f"{low}"
        inner = f"-n[{low % 3},{low % 3 + 2}]" if prefix == "r1-c" else ""
        parts.append(f"{prefix}{numbers}{inner}")
    nodelist = ",".join(parts)
    shown = cluster.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
    assert first_node(nodelist) == shown[0]
    for place, host in enumerate(shown):
        if host not in shown[:place]:  # a host listed twice stands at its first place
            assert node_position(nodelist, host) == place, (nodelist, host)


def test_the_node_exporter_names_the_running_job_from_slurm_s_cgroups(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """`--collector.jobs` on a node: `hpc_node_job_info` from Slurm's own cgroups while the
    job runs (slurm_<node>/uid_<uid>/job_<id> with several slurmd on one host), gone after."""
    if cluster.proctrack != "cgroup":
        pytest.skip(f"proctrack/{cluster.proctrack}: this machine gives Slurm no cgroups")
    # The host's cgroups and /proc on purpose: slurmd puts this cluster's job cgroups there (a
    # job of another Slurm on this host may show too; only this cluster's job id is asserted).
    args = ["--no-collector.jobstats", "--collector.jobs", "--path.cgroupfs=/sys/fs/cgroup",
            "--path.procfs=/proc"]  # fmt: skip
    with servers.run_exporter(args, tmp_path) as exporter:
        jobid = cluster.sbatch("#!/bin/sh\nsleep 30\n", job_name="sleeper")
        wanted = f'hpc_node_job_info{{jobid="{jobid}",uid="65534"}} 1.0'
        deadline = time.monotonic() + 30
        body = ""
        while wanted not in body and time.monotonic() < deadline:
            body = servers.http_get(f"http://{exporter.address}/metrics")[1].decode()
            time.sleep(0.2)
        assert wanted in body
        cluster.run(["scancel", jobid])
        cluster.wait_job_done(jobid)
        body = servers.http_get(f"http://{exporter.address}/metrics")[1].decode()
        assert f'jobid="{jobid}"' not in body
