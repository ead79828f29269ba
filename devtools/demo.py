"""`make demo`: the exporter on replayed real jobstats captures, scraped by a real Prometheus
that evaluates the generated alert and recording rules, with a live terminal view of the top
jobs and the firing alerts queried through Prometheus' HTTP API; first, the post-job hook
ingests a finished job's bundled Darshan, Recorder, VizTracer and GEOPM data into a real
InfluxDB 1.6.7 and the demo reads it back with InfluxQL, then writes that job's report
(``hpcmon-report``, HTML, from the database). The Grafana dashboards, rules and provisioning
files are generated into the work directory (no Grafana server runs here).

The storming job is a real job of the demo's own Slurm (devtools/slurm.py; root and Debian's
slurm packages): job 43, with a name, a user and an account, which the exporter's
--collector.slurm lists, so the firing alert and the top jobs name them. Once its alert fires,
the demo ends the job; the shipped epilog (deploy/slurm/hpcmon-epilog.sh) runs the post-job hook,
which writes the job's Darshan log to InfluxDB and its report from the database, with the Lustre
traffic and the node's power of the job's window from Prometheus. Without root or Slurm, job 43
is a bare job id of the replay, as it was.

Everything it starts (InfluxDB, replay, exporter, Prometheus, Slurm) is stopped on Ctrl-C or
after --duration.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from devtools.replay import load_sections, render, write_atomically
from devtools.servers import (
    InfluxDB1,
    Prometheus,
    run_exporter,
    run_influxdb1,
    run_prometheus,
)
from devtools.slurm import FINISHED_STATES, SlurmCluster, run_slurm, slurm_installed
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate as dashboards_generate
from hpcmon.dashboards import promql
from hpcmon.dashboards import rules as dashboards_rules

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "data" / "jobstats"
# Real captures: six Lustre 2.12.5 OSTs, Lustre 2.10.1 MDT+OST, DDN 2.14 OST and two MDTs.
CAPTURE_GLOBS = (
    "*public1-OST*lustre2.12.5.txt",
    "*lustrefs-*_job_stats__lustre2.10.1.txt",
    "*jobstats_only_2.14.0_16*.txt",
)

# One real job id of the 2.10.1 captures replays an I/O storm: 50,000 extra operations per
# second on each of its operations (4 KiB reads and writes), so that alerts fire in the demo.
STORM_JOB = "43"
STORM_OPS_PER_SECOND = 50_000
# The default thresholds, with `for` shortened so that the demo shows alerts within a minute.
DEMO_RULES_CONFIG = {
    "rule_interval": "2s",
    "thresholds": {
        name: "10s"
        for name in (
            "target_spike_for",
            "job_dominates_for",
            "metadata_storm_for",
            "small_writes_for",
            "jobstats_down_for",
            "collector_failing_for",
            "geopm_down_for",
        )
    },
}
ALERTS_QUERY = 'ALERTS{{alertstate="firing", alertname=~"{}"}}'.format(
    "|".join(dashboards_rules.ALERT_NAMES)
)

# The storming job as the demo's Slurm runs it (Slurm numbers jobs from FirstJobId).
STORM_JOB_NAME = "metadata-storm"
STORM_ACCOUNT = "climate"
STORM_UID = 65534  # nobody
NODE_WATTS = 180.0  # the demo node's package power (a powercap tree the demo advances)
EPILOG_WAIT = 90  # seconds the demo waits at its end for job 43's epilog (its report)


def _top(expr: str) -> str:
    """The 8 busiest jobs, with user, account and job name where Slurm lists the job."""
    return f"topk(8, {promql.named_by_slurm(expr)})"


PANELS = (
    (
        "Top jobs by write rate",
        "bytes/s",
        _top("sum by (jobid) (lustre_job_write_bytes_per_second) > 0"),
    ),
    (
        "Top jobs by read rate",
        "bytes/s",
        _top("sum by (jobid) (lustre_job_read_bytes_per_second) > 0"),
    ),
    (
        "Top jobs by metadata operations",
        "ops/s",
        _top('sum by (jobid) (lustre_job_operations_per_second{component="mdt"}) > 0'),
    ),
)


def _named(labels: dict[str, str]) -> str:
    """Slurm's names of a job, when the row or alert has them."""
    if "user" not in labels:
        return ""
    return (
        f"  job_name={labels.get('job_name', '')} user={labels['user']}"
        f" account={labels.get('account', '')}"
    )


def _human(value: float, unit: str) -> str:
    if unit == "bytes/s":
        for prefix in ("", "Ki", "Mi", "Gi", "Ti"):
            if abs(value) < 1024 or prefix == "Ti":
                return f"{value:8.1f} {prefix}B/s"
            value /= 1024
    return f"{value:8.1f} {unit}"


def _view(prom: Prometheus) -> str:
    lines = [time.strftime("%H:%M:%S") + "  (Ctrl-C to stop)", ""]
    for title, unit, expr in PANELS:
        lines.append(f"== {title} ==")
        try:
            result = prom.query(expr)
        except (RuntimeError, OSError) as exc:
            lines.append(f"   query failed: {exc}")
            continue
        if not result:
            lines.append("   (no data yet: rates need two samples)")
        rows = sorted(result, key=lambda r: -float(r["value"][1]))
        for row in rows:
            jobid = row["metric"].get("jobid", "?")
            value = _human(float(row["value"][1]), unit)
            lines.append(f"   {value}   {jobid}{_named(row['metric'])}")
        lines.append("")
    lines.append("== Firing alerts ==")
    try:
        alerts = prom.query(ALERTS_QUERY)
    except (RuntimeError, OSError) as exc:
        alerts = []
        lines.append(f"   query failed: {exc}")
    if not alerts:
        lines.append("   (none yet: rules need a few evaluations)")
    for alert in sorted(alerts, key=lambda a: sorted(a["metric"].items())):
        labels = alert["metric"]
        where = " ".join(
            f"{key}={labels[key]}"
            for key in ("jobid", "job_name", "user", "account", "target", "direction")
            if key in labels
        )
        lines.append(f"   {labels['alertname']:<26} {where}")
    return "\n".join(lines)


WORKDIR_MARK = ".hpcmon-demo"


def _prepare_workdir(workdir: Path) -> str | None:
    """Empty the work directory of an earlier demo run; never touch one the demo did not
    create (a marker file tells). Returns a one-line problem, or None."""
    try:
        if workdir.exists() and any(workdir.iterdir()):
            if not (workdir / WORKDIR_MARK).is_file():
                return f"{workdir} exists and was not created by the demo: choose another --workdir"
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / WORKDIR_MARK).write_text("made by `make demo`; removed by the next demo run\n")
    except OSError as exc:
        return f"{workdir}: {exc.strerror or exc}"
    return None


class _Hangup(KeyboardInterrupt):
    """SIGHUP or SIGTERM: stop like Ctrl-C, so every server the demo started is stopped."""


def _stop_on_hangup() -> None:
    def stop(signum: int, _frame: object) -> None:
        for other in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(other, signal.SIG_IGN)  # one stop; let the cleanup finish
        raise _Hangup(signal.Signals(signum).name)

    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, stop)


def _generate_dashboards(workdir: Path) -> Path:
    """Dashboards, rules and provisioning as `hpcmon-dashboards generate` writes them."""
    config_path = workdir / "dashboards-config.yaml"
    config_path.write_text(yaml.safe_dump(DEMO_RULES_CONFIG, sort_keys=False))
    out = workdir / "generated"
    dashboards_generate.write(dashboards_config.load(config_path), out)
    return out


DATA = ROOT / "tests" / "data"
DEMO_JOB = "4242"
POST_JOB_INPUTS = [
    "--darshan",
    str(DATA / "darshan/logs/mpi-io-test-x86_64-3.5.0.darshan"),
    str(DATA / "darshan/logs/e3sm_io_heatmap_only.darshan"),
    "--recorder",
    str(DATA / "recorder/v3.0.0/tiny_mpi_np2_ipc"),
    "--viztracer",
    str(DATA / "viztracer/threaded.json"),
    "--geopm-report",
    str(DATA / "geopm_report/geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report"),
]
POST_JOB_QUERIES = (
    ("Points per measurement", "SELECT count(*) FROM /.*/ WHERE jobid = '{job}'"),
    (
        "Darshan modules (MiB/s)",
        "SELECT read_bw, write_bw FROM darshan_module WHERE jobid = '{job}' GROUP BY module",
    ),
    (
        "Recorder: top functions by time",
        "SELECT top(total_time_seconds, function, 5) FROM recorder_function WHERE jobid = '{job}'",
    ),
    (
        "VizTracer: top functions by time",
        "SELECT top(total_time_seconds, function, 5) FROM viztracer_function WHERE jobid = '{job}'",
    ),
    (
        "GEOPM application totals per host",
        "SELECT package_energy_joules, runtime_seconds FROM geopm_totals "
        "WHERE jobid = '{job}' AND scope = 'application' GROUP BY host",
    ),
)


def _run_on_demo_job(module: str, influx: InfluxDB1, *args: str) -> subprocess.CompletedProcess:
    """``python -m MODULE`` (the hook or the report) on the demo job in the demo's database."""
    # -P: the installed hpcmon, never a folder in the working directory
    command = [sys.executable, "-P", "-m", module, "--job-id", DEMO_JOB, "--cluster", "demo"]
    command += ["--influx.v1-url", influx.url, "--influx.database", "hpcmon", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _post_job_demo(influx: InfluxDB1, workdir: Path) -> str:
    """Run the post-job hook on bundled real data into InfluxDB, then read it back."""
    influx.create_database("hpcmon")
    spool = ["--spool-dir", str(workdir / "spool")]
    run = _run_on_demo_job("hpcmon.post_job", influx, *POST_JOB_INPUTS, *spool)
    lines = [f"== Post-job hook for job {DEMO_JOB} (exit {run.returncode}) =="]
    lines += ["   " + line for line in run.stderr.strip().splitlines()]
    for title, query in POST_JOB_QUERIES:
        lines.append(f"-- {title}")
        for series in influx.series(query.format(job=DEMO_JOB), db="hpcmon"):
            tags = ",".join(f"{k}={v}" for k, v in sorted((series.get("tags") or {}).items()))
            columns = series["columns"][1:]
            for row in series["values"]:
                if title.startswith("Points"):
                    count = max(v for v in row[1:] if v is not None)
                    lines.append(f"   {series['name']:<24} {count}")
                    break
                values = ", ".join(
                    f"{c}={v:.4g}" if isinstance(v, float) else f"{c}={v}"
                    for c, v in zip(columns, row[1:], strict=True)
                    if v is not None
                )
                lines.append(f"   {tags + ' ' if tags else ''}{values}")
    return "\n".join(lines)


def _job_report(influx: InfluxDB1, workdir: Path) -> tuple[Path, str]:
    """``hpcmon-report`` on the job the hook just wrote, from the database alone (no log):
    the per-job answer a newcomer opens in a browser. Returns its path and a status line."""
    path = workdir / f"report-{DEMO_JOB}.html"
    run = _run_on_demo_job("hpcmon.report", influx, "--output", str(path))
    if run.returncode != 0 or not path.is_file():
        reason = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return path, f"not written (exit {run.returncode}): {reason}"
    return path, f"job {DEMO_JOB}, HTML from InfluxDB; open it in a browser"


DARSHAN_LOG = DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"
EPILOG = ROOT / "deploy" / "slurm" / "hpcmon-epilog.sh"
# The storming job leaves a Darshan log where darshan-runtime would, then runs until the demo
# releases it (once its alert has fired).
JOB_SCRIPT = """#!/bin/sh
day="{logdir}/$(date +%Y)/$(date +%-m)/$(date +%-d)"
name="$(id -un)_mpi-io-test_id${{SLURM_JOB_ID}}_$(date +%-m-%-d)-$(date +%s)-1234_1.darshan"
cp "{log}" "$day/$name" && chmod 0400 "$day/$name"
while [ ! -e "{release}" ]; do sleep 0.5; done
"""
# Prolog and epilog of the demo's node: the job's file in the exporter's --jobs.dir while it
# runs (power is attributed to the jobs on a node), and the shipped epilog, as a site wraps it.
PROLOG = """#!/bin/sh
file="{jobs}/$SLURM_JOB_ID"
echo "SLURM_JOB_UID=$SLURM_JOB_UID" > "{jobs}/.$SLURM_JOB_ID" && mv "{jobs}/.$SLURM_JOB_ID" "$file"
exit 0
"""
EPILOG_WRAPPER = """#!/bin/sh
export HPCMON_POST_JOB={hook} HPCMON_CONFIG={config} HPCMON_LOG_STDERR=1
{script} 2>>"{logs}/$SLURM_JOB_ID-$SLURMD_NODENAME.log"
rm -f "{jobs}/$SLURM_JOB_ID"
exit 0
"""


class StormJob:
    """Job 43 of the demo's Slurm, from its submission to the report its epilog writes."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.jobs_dir = workdir / "node-jobs"  # the exporter's --jobs.dir
        self.reports = workdir / "reports"
        self.logs = workdir / "epilog-logs"
        self.config = workdir / "post-job.yaml"
        for directory in (self.jobs_dir, self.reports, self.logs):
            directory.mkdir(mode=0o755)
        self.cluster: SlurmCluster | None = None
        self.jobid = ""
        self.released = False
        self.told = False

    @contextlib.contextmanager
    def slurm(self):
        """The demo's Slurm: one node, its prolog and the shipped epilog; job ids from 43."""
        prolog = self.workdir / "prolog.sh"
        prolog.write_text(PROLOG.format(jobs=self.jobs_dir))
        wrapper = self.workdir / "epilog.sh"
        hook = Path(sys.executable).parent / "hpcmon-post-job"
        wrapper.write_text(
            EPILOG_WRAPPER.format(
                hook=hook, config=self.config, script=EPILOG, logs=self.logs, jobs=self.jobs_dir
            )
        )
        for script in (prolog, wrapper):
            script.chmod(0o755)
        settings = {"FirstJobId": int(STORM_JOB), "Prolog": prolog}
        with run_slurm(nodes=1, epilog=wrapper, extra_conf=settings, proctrack="linuxproc") as c:
            self.cluster = c
            yield c

    def write_config(self, influx_url: str, prometheus_url: str) -> None:
        """The post-job hook's settings, as a site writes them (deploy/slurm)."""
        data = {
            "cluster": "demo",
            "app": "{job_name}",
            "log": "stderr",
            "spool_dir": str(self.workdir / "spool"),
            "writers": {"influx_v1": {"url": influx_url, "database": "hpcmon"}},
            "report": {
                "dir": str(self.reports),
                "format": "html",
                "prometheus_url": prometheus_url,
            },
            "sources": {"darshan": {"logdir": str(self._site() / "darshan-logs")}},
        }
        self.config.write_text(yaml.safe_dump(data, sort_keys=False))

    def _site(self) -> Path:
        """Files the job's user reaches: in the cluster's directory (0755), not the demo's."""
        assert self.cluster is not None
        return self.cluster.workdir / "site"

    def submit(self) -> str:
        assert self.cluster is not None
        site = self._site()
        logdir = site / "darshan-logs"
        today = dt.date.today()
        for day in (today - dt.timedelta(days=1), today, today + dt.timedelta(days=1)):
            path = logdir / str(day.year) / str(day.month) / str(day.day)
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o1777)
        for directory in (site, logdir, logdir / str(today.year)):
            directory.chmod(0o755)
        log = site / DARSHAN_LOG.name
        shutil.copy(DARSHAN_LOG, log)
        log.chmod(0o644)
        script = JOB_SCRIPT.format(logdir=logdir, log=log, release=site / "release")
        self.jobid = self.cluster.sbatch(
            script, uid=STORM_UID, gid=STORM_UID, job_name=STORM_JOB_NAME, account=STORM_ACCOUNT
        )
        return self.jobid

    def release(self) -> None:
        (self._site() / "release").touch()
        self.released = True

    def ended(self) -> bool:
        """Whether the job has ended and its node is idle again (its epilog has run)."""
        assert self.cluster is not None
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if self.cluster.job_info(self.jobid).get("JobState") in FINISHED_STATES:
                return self.cluster.node_states().get("n1") == "idle"
        return False

    def report(self) -> Path | None:
        found = sorted(self.reports.rglob(f"{self.jobid}.html"))
        return found[0] if found else None

    def epilog_said(self) -> str:
        """The epilog's last line (the hook's messages), for a report that is not there."""
        lines = [
            line
            for path in sorted(self.logs.glob("*.log"))
            for line in path.read_text(errors="replace").splitlines()
            if line.strip()
        ]
        return lines[-1] if lines else "the epilog said nothing"


def _storm_alert(prom: Prometheus, jobid: str) -> dict[str, str] | None:
    """The labels of job `jobid`'s firing metadata storm alert, or None."""
    with contextlib.suppress(RuntimeError, OSError):
        for alert in prom.query(
            f'ALERTS{{alertname="LustreJobMetadataStorm", alertstate="firing", jobid="{jobid}"}}'
        ):
            return alert["metric"]
    return None


def _story(job: StormJob, prom: Prometheus) -> list[str]:
    """Moves job 43's story on: its alert fired -> the demo ends it -> its epilog's report."""
    lines: list[str] = []
    if not job.released:
        alert = _storm_alert(prom, job.jobid)
        if alert and "user" in alert:
            job.release()
            lines.append(
                f"story:      job {job.jobid}'s alert fired{_named(alert)}; the demo ends the job"
            )
    elif not job.told and job.ended():
        job.told = True
        report = job.report()
        if report is None:
            lines.append(
                f"report:     not written by job {job.jobid}'s epilog: {job.epilog_said()}"
            )
        else:
            lines.append(
                f"report:     {report}  (job {job.jobid}, written by its epilog from InfluxDB "
                "and Prometheus; open it in a browser)"
            )
    return lines


def _advance_energy(zone: Path, stop: threading.Event) -> None:
    """The node's package energy counter at NODE_WATTS, as the kernel's powercap shows it."""
    started = time.monotonic()
    while not stop.wait(0.25):
        energy = int(NODE_WATTS * 1e6 * (time.monotonic() - started)) % MAX_ENERGY_UJ
        write_atomically(zone / "energy_uj", f"{energy}\n")


MAX_ENERGY_UJ = 262_143_328_850  # max_energy_range_uj of a real package zone


def _powercap_tree(sysfs: Path) -> Path:
    """One package zone (name, energy_uj, max_energy_range_uj) under sysfs/class/powercap."""
    zone = sysfs / "class" / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("0\n")
    (zone / "max_energy_range_uj").write_text(f"{MAX_ENERGY_UJ}\n")
    return zone


def _scrape_config(address: str) -> list[dict]:
    return [
        {
            "job_name": "hpcmon-jobstats",
            "scrape_interval": "2s",
            "scrape_timeout": "2s",
            "static_configs": [{"targets": [address]}],
        }
    ]


def _captures() -> list[Path]:
    found = sorted({p for pattern in CAPTURE_GLOBS for p in CAPTURES.glob(pattern)})
    if not found:
        raise SystemExit(f"demo: no captures found under {CAPTURES}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="hpcmon live demo on bundled real data")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after N seconds (default: run until Ctrl-C)",
    )
    parser.add_argument("--refresh", type=float, default=3.0, help="view refresh, seconds")
    parser.add_argument("--workdir", type=Path, default=ROOT / "demo-run")
    args = parser.parse_args(argv)

    problem = _prepare_workdir(args.workdir)
    if problem:
        print(f"demo: {problem}", file=sys.stderr)
        return 2
    _stop_on_hangup()
    jobstats_file = args.workdir / "jobstats.txt"
    sections = load_sections(_captures())
    started = time.time()
    storms = {STORM_JOB: STORM_OPS_PER_SECOND}
    write_atomically(jobstats_file, render(sections, 0.0, started, storms))
    generated = _generate_dashboards(args.workdir)

    stop = threading.Event()

    def replay() -> None:
        while not stop.wait(2.0):
            now = time.time()
            write_atomically(jobstats_file, render(sections, now - started, now, storms))

    threading.Thread(target=replay, daemon=True, name="replay").start()
    zone = _powercap_tree(args.workdir / "sysfs")
    threading.Thread(target=_advance_energy, args=(zone, stop), daemon=True).start()
    no_cgroups = args.workdir / "no-cgroups"  # jobs from the demo's --jobs.dir only
    no_cgroups.mkdir()

    story = StormJob(args.workdir) if os.geteuid() == 0 and slurm_installed() else None
    exporter_args = [
        "--jobstats.source=file",
        f"--jobstats.path={jobstats_file}",
        "--jobstats.interval=2",
        "--collector.postjob",  # the spool of the post-job demo below (empty once delivered)
        f"--postjob.spool-dir={args.workdir / 'spool'}",
        "--collector.geopm",
        "--geopm.backend=powercap",
        f"--path.sysfs={args.workdir / 'sysfs'}",
        "--geopm.interval=1",
        "--collector.jobs",
        f"--jobs.dir={args.workdir / 'node-jobs'}",
        f"--path.cgroupfs={no_cgroups}",
    ]
    if story is None:
        (args.workdir / "node-jobs").mkdir()
    else:
        exporter_args += ["--collector.slurm", "--slurm.interval=1"]
    notes: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(story.slurm()) if story else None
            env = {"SLURM_CONF": str(cluster.conf_path)} if cluster else None
            exporter = stack.enter_context(run_exporter(exporter_args, args.workdir, env=env))
            influx = stack.enter_context(run_influxdb1())
            prom = stack.enter_context(
                run_prometheus(
                    _scrape_config(exporter.address),
                    scrape_interval="2s",
                    rule_files=[str(p) for p in sorted((generated / "rules").glob("*.yaml"))],
                )
            )
            if story is not None:
                influx.create_database("hpcmon")
                story.write_config(influx.url, prom.url)
                story.submit()
            print(_post_job_demo(influx, args.workdir), flush=True)
            print()
            print(f"influxdb:   {influx.url}  (database hpcmon, InfluxQL at /query)")
            if story is None:
                report, report_status = _job_report(influx, args.workdir)
                print(f"report:     {report}  ({report_status})")
            print(f"exporter:   http://{exporter.address}/metrics")
            print(f"prometheus: {prom.url}  (graph: {prom.url}/graph)")
            print(
                f"dashboards: {generated}/dashboards/*.json  (Grafana: Dashboards > New > Import,"
            )
            print(f"            or provision them: {generated}/provisioning, docs/dashboards.md)")
            print(f"rules:      {generated}/rules  (loaded: {prom.url}/alerts)")
            print(
                f"storm:      job {STORM_JOB} replays {STORM_OPS_PER_SECOND:,} extra operations/s "
                "per operation; alert `for` shortened to 10 s for the demo"
            )
            if story is None:
                print("slurm:      not started (needs root and Debian's slurm packages): job 43 is")
                print("            a bare job id of the replay")
            else:
                assert cluster is not None  # entered above with the story
                print(
                    f"slurm:      job {story.jobid} of the demo's Slurm ({cluster.conf_path}): "
                    f"job_name={STORM_JOB_NAME} user=nobody account={STORM_ACCOUNT}; ended once "
                    "its alert fires, its epilog then writes its report"
                )
                if story.jobid != STORM_JOB:
                    print(f"slurm:      Slurm gave job id {story.jobid}, not {STORM_JOB}: no storm")
            print(
                f"replayed captures: {len(sections)} targets, "
                f"{sum(len(s.jobs) for s in sections)} job entries; logs in {args.workdir}"
            )
            interactive = sys.stdout.isatty()
            while args.duration is None or time.time() - started < args.duration:
                time.sleep(args.refresh)
                view = _view(prom)
                if story is not None:
                    notes += _story(story, prom)
                print(
                    ("\033[2J\033[H" if interactive else "\n") + "\n".join([view, "", *notes]),
                    flush=True,
                )
            if story is not None and story.released:  # its epilog may still run: let it end
                deadline = time.monotonic() + EPILOG_WAIT
                while not story.told and time.monotonic() < deadline:
                    time.sleep(1)
                    told = _story(story, prom)
                    if told:
                        print("\n".join(told), flush=True)
            if story is not None and not story.told:
                print(f"report:     none: job {story.jobid} had not ended its story", flush=True)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            print("\nstopping", flush=True)
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
