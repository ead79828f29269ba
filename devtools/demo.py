"""`make demo`: the exporter on replayed real jobstats captures, scraped by a real Prometheus
that evaluates the generated alert and recording rules, with a live terminal view of the top
jobs and the firing alerts queried through Prometheus' HTTP API; first, the post-job hook
ingests a finished job's bundled Darshan, Recorder, VizTracer and GEOPM data into a real
InfluxDB 1.6.7 and the demo reads it back with InfluxQL, then writes that job's report
(``hpcmon-report``, HTML, from the database). The Grafana dashboards, rules and provisioning
files are generated into the work directory (no Grafana server runs here).

Everything it starts (InfluxDB, replay, exporter, Prometheus) is stopped on Ctrl-C or after
--duration.
"""

from __future__ import annotations

import argparse
import contextlib
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
from hpcmon.dashboards import config as dashboards_config
from hpcmon.dashboards import generate as dashboards_generate
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

PANELS = (
    (
        "Top jobs by write rate",
        "bytes/s",
        "topk(8, sum by (jobid) (lustre_job_write_bytes_per_second) > 0)",
    ),
    (
        "Top jobs by read rate",
        "bytes/s",
        "topk(8, sum by (jobid) (lustre_job_read_bytes_per_second) > 0)",
    ),
    (
        "Top jobs by metadata operations",
        "ops/s",
        'topk(8, sum by (jobid) (lustre_job_operations_per_second{component="mdt"}) > 0)',
    ),
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
            lines.append(f"   {_human(float(row['value'][1]), unit)}   {jobid}")
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
            f"{key}={labels[key]}" for key in ("jobid", "target", "direction") if key in labels
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

    exporter_args = [
        "--jobstats.source=file",
        f"--jobstats.path={jobstats_file}",
        "--jobstats.interval=2",
        "--collector.postjob",  # the spool of the post-job demo below (empty once delivered)
        f"--postjob.spool-dir={args.workdir / 'spool'}",
    ]
    try:
        with (
            run_exporter(exporter_args, args.workdir) as exporter,
            run_influxdb1() as influx,
            run_prometheus(
                _scrape_config(exporter.address),
                scrape_interval="2s",
                rule_files=[str(p) for p in sorted((generated / "rules").glob("*.yaml"))],
            ) as prom,
        ):
            print(_post_job_demo(influx, args.workdir), flush=True)
            report, report_status = _job_report(influx, args.workdir)
            print()
            print(f"influxdb:   {influx.url}  (database hpcmon, InfluxQL at /query)")
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
            print(
                f"replayed captures: {len(sections)} targets, "
                f"{sum(len(s.jobs) for s in sections)} job entries; logs in {args.workdir}"
            )
            interactive = sys.stdout.isatty()
            while args.duration is None or time.time() - started < args.duration:
                time.sleep(args.refresh)
                view = _view(prom)
                print(("\033[2J\033[H" if interactive else "\n") + view, flush=True)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            print("\nstopping", flush=True)
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
