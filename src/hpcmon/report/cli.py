"""``hpcmon-report``: one job's report from InfluxDB post-job points and Prometheus.

Exit status: 0 report written (what a source could not give is listed in it and, one line
each, on stderr); 1 the report could not be written, or a source could not be read and the
others had nothing on the job; 2 bad usage, or no data for the job in any source (one line,
nothing written). No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from hpcmon.common.influx_flags import add_influx_arguments, influx_flags_problem
from hpcmon.dashboards.uids import JOB_UID
from hpcmon.entry import missing_package
from hpcmon.report.api import (
    Sources,
    build,
    collect,
    has_data,
    render,
    searched,
    write_atomically,
)
from hpcmon.report.history import DEFAULT_RUNS, MAX_RUNS, SCOPES
from hpcmon.report.influx import InfluxSettings
from hpcmon.report.prometheus import DEFAULT_JOB_MATCHER

log = logging.getLogger("hpcmon.report")


class UsageError(Exception):
    pass


def _time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not epoch seconds or ISO 8601: {text!r}") from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone (e.g. Z): {text!r}")
    return moment.timestamp()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpcmon-report",
        description="Per-job report: I/O, file-system impact, energy, diagnosis.",
        allow_abbrev=False,
    )
    p.add_argument("--job-id", required=True)
    p.add_argument("--cluster", default=None)
    p.add_argument(
        "--format",
        choices=("text", "html", "json"),
        default=None,
        help="default: from --output's suffix (.html, .json), else text",
    )
    p.add_argument("--output", type=Path, default=None, help="file (default: standard output)")
    g = p.add_argument_group("InfluxDB (where hpcmon-post-job wrote)")
    add_influx_arguments(
        g,
        v2_help="InfluxDB 2.x/3.x (InfluxQL through its /query compatibility API)",
        v1_help="InfluxDB 1.x (basic auth from INFLUX_USERNAME/INFLUX_PASSWORD)",
    )
    g = p.add_argument_group("Prometheus (Lustre jobstats, power, alerts)")
    g.add_argument("--prometheus.url", dest="prometheus_url", metavar="URL")
    g.add_argument(
        "--prometheus.job-matcher",
        dest="job_matcher",
        default=DEFAULT_JOB_MATCHER,
        help="label matcher for the job's Lustre series; {jobid} is replaced by the"
        " regex-escaped id (default: %(default)s)",
    )
    g = p.add_argument_group("other inputs")
    g.add_argument(
        "--darshan",
        nargs="+",
        type=Path,
        default=[],
        metavar="LOG",
        help="the job's Darshan logs, read instead of the database's Darshan points",
    )
    g.add_argument(
        "--start",
        type=_time,
        help="window start (epoch s or ISO 8601); default: the Darshan job's start",
    )
    g.add_argument("--end", type=_time, help="window end; default: the Darshan job's end")
    g.add_argument("--grafana.url", dest="grafana_url", metavar="URL")
    g.add_argument(
        "--grafana.dashboard-uid",
        dest="grafana_dashboard",
        default=JOB_UID,
        help="the job dashboard (default: %(default)s, hpcmon-dashboards' own)",
    )
    g.add_argument("--timeout", type=float, default=30.0, help="seconds per server request")
    g = p.add_argument_group("history (earlier runs of the job's application, from InfluxDB)")
    g.add_argument(
        "--history.runs",
        dest="history_runs",
        type=int,
        default=DEFAULT_RUNS,
        metavar="N",
        help="earlier runs to compare with (default: %(default)s; 0: no history)",
    )
    g.add_argument(
        "--history.scope",
        dest="history_scope",
        choices=SCOPES,
        default="user",
        help="user: the job's user's runs (default); all: every user's runs of the app",
    )
    return p


def settings(options: argparse.Namespace) -> Sources:
    problem = influx_flags_problem(options)
    if problem:
        raise UsageError(problem)
    if options.influx_v1_url and options.influx_url:
        raise UsageError("give one InfluxDB: --influx.v1-url or --influx.url")
    if (options.start is None) != (options.end is None):
        raise UsageError("--start and --end go together")
    if options.start is not None and options.end <= options.start:
        raise UsageError("--end must be after --start")
    if options.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if not 0 <= options.history_runs <= MAX_RUNS:
        raise UsageError(f"--history.runs must be 0 to {MAX_RUNS}")
    influx = InfluxSettings(
        v1_url=options.influx_v1_url,
        database=options.influx_database,
        retention_policy=options.influx_retention_policy,
        v2_url=options.influx_url,
        org=options.influx_org,
        bucket=options.influx_bucket,
        token_file=options.influx_token_file,
        timeout=options.timeout,
    )
    return Sources(
        influx=influx,
        prometheus_url=options.prometheus_url,
        job_matcher=options.job_matcher,
        darshan_logs=tuple(options.darshan),
        window=(options.start, options.end) if options.start is not None else None,
        grafana_url=options.grafana_url,
        grafana_dashboard=options.grafana_dashboard,
        timeout=options.timeout,
        history_runs=options.history_runs,
        history_scope=options.history_scope,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    options = p.parse_args(argv)
    try:
        sources = settings(options)
    except UsageError as exc:
        p.print_usage(sys.stderr)
        print(f"hpcmon-report: error: {exc}", file=sys.stderr)
        return 2
    fmt = options.format
    if fmt is None and options.output is not None:
        fmt = {".html": "html", ".json": "json"}.get(options.output.suffix)
    try:
        job = collect(options.job_id, options.cluster, sources)
        if not has_data(job) and not job.unreadable:
            cluster = f" (cluster {options.cluster})" if options.cluster else ""
            print(
                f"hpcmon-report: no data for job {options.job_id}{cluster} in "
                f"{searched(job, sources)}",
                file=sys.stderr,
            )
            return 2
        text = render(job, build(job, sources), fmt or "text")
    except Exception as exc:  # a bug or input nothing foresaw: one line, not a traceback
        if missing_package(exc):
            raise  # the extra is not installed: hpcmon.entry names it
        # the type only: a message may quote what the job wrote (its tags, its Darshan log)
        log.debug("job %s: cannot build the report", options.job_id, exc_info=True)
        print(
            f"hpcmon-report: job {options.job_id}: cannot build the report: {type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    for line in job.missing:
        print(f"hpcmon-report: job {options.job_id}: {line}", file=sys.stderr)
    if options.output is None:
        sys.stdout.write(text)
    else:
        try:
            write_atomically(options.output, text)
        except OSError as exc:
            print(
                f"hpcmon-report: {options.output}: cannot write: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return 1
    return 0 if has_data(job) else 1


if __name__ == "__main__":
    raise SystemExit(main())
