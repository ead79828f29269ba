"""``hpcmon-post-job``: turn a finished job's logs into InfluxDB points, losing nothing.

Exit status: 0 when every point was written or safely spooled, 1 when something went wrong
(a source error, lines rejected or lost; the reasons are on stderr), 2 for bad usage.
In ``--slurm-epilog`` mode the status is 0 unless ``--strict`` or the config asks otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from post_job.hook import (
    RunReport,
    SourceRequest,
    Watchdog,
    WriterSettings,
    flush,
    run_job,
    sending_deadline,
)
from post_job.model import JobContext
from post_job.writers import DEFAULT_BATCH_SIZE, DEFAULT_TIMEOUT_SECONDS, Deadline, read_token

PROG = "hpcmon-post-job"
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
MAX_SECONDS = 86400


class UsageError(Exception):
    pass


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number in (0, {MAX_SECONDS}], not {text}")
    return value


def add_writer_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("writers (line protocol to standard output when none)")
    group.add_argument(
        "--output",
        metavar="FILE.lp",
        help="write line protocol to this file ('-' for standard output)",
    )
    group.add_argument(
        "--influx.url",
        dest="influx_url",
        metavar="URL",
        help="InfluxDB 2.x/3.x API base URL (token: INFLUX_TOKEN or token file)",
    )
    group.add_argument("--influx.org", dest="influx_org", metavar="ORG")
    group.add_argument("--influx.bucket", dest="influx_bucket", metavar="B")
    group.add_argument("--influx.token-file", dest="influx_token_file", metavar="F")
    group.add_argument(
        "--influx.v1-url",
        dest="influx_v1_url",
        metavar="URL",
        help="InfluxDB 1.x base URL (basic auth: INFLUX_USERNAME/INFLUX_PASSWORD)",
    )
    group.add_argument("--influx.database", dest="influx_database", metavar="DB")
    group.add_argument("--influx.retention-policy", dest="influx_retention_policy", metavar="RP")
    group.add_argument(
        "--influx.batch-size",
        dest="influx_batch_size",
        type=_positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"lines per write request (default {DEFAULT_BATCH_SIZE})",
    )
    group.add_argument(
        "--influx.timeout",
        dest="influx_timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"per-request timeout (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    group.add_argument(
        "--spool-dir",
        dest="spool_dir",
        metavar="DIR",
        help="keep batches a server did not acknowledge here; replayed oldest "
        "first by the next run or 'flush'",
    )
    parser.add_argument(
        "--time-limit",
        dest="time_limit",
        type=_positive_float,
        metavar="SECONDS",
        help="total time limit of the run",
    )
    parser.add_argument(
        "--log.level", dest="log_level", default="info", choices=["debug", "info", "warn", "error"]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Turn a finished job's Darshan, Recorder, VizTracer and GEOPM data into "
        f"InfluxDB points. '{PROG} flush --spool-dir DIR <writers>' replays the "
        "spool.",
    )
    parser.add_argument("--job-id", dest="job_id", metavar="ID")
    parser.add_argument("--cluster", metavar="NAME")
    parser.add_argument("--user", metavar="NAME", help="job owner (optional)")
    darshan = parser.add_argument_group("Darshan")
    darshan.add_argument("--darshan", nargs="+", action="extend", default=[], metavar="LOG")
    darshan.add_argument(
        "--darshan-text",
        dest="darshan_text",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="darshan-parser text output",
    )
    darshan.add_argument("--signals-out", dest="signals_out", metavar="FILE")
    darshan.add_argument(
        "--darshan.top-records",
        dest="darshan_top_records",
        type=_positive_int,
        default=100,
        metavar="N",
    )
    recorder = parser.add_argument_group("Recorder")
    recorder.add_argument("--recorder", nargs="+", action="extend", default=[], metavar="DIR")
    recorder.add_argument(
        "--recorder.top-files",
        dest="recorder_top_files",
        type=_positive_int,
        default=50,
        metavar="N",
    )
    recorder.add_argument(
        "--recorder.per-rank-functions", dest="recorder_per_rank_functions", action="store_true"
    )
    viztracer = parser.add_argument_group("VizTracer")
    viztracer.add_argument("--viztracer", nargs="+", action="extend", default=[], metavar="FILE")
    viztracer.add_argument("--viztracer-out", dest="viztracer_out", metavar="FILE")
    viztracer.add_argument(
        "--viztracer.top-functions",
        dest="viztracer_top_functions",
        type=_positive_int,
        default=50,
        metavar="N",
    )
    geopm = parser.add_argument_group("GEOPM")
    geopm.add_argument(
        "--geopm-report",
        dest="geopm_report",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
    )
    epilog = parser.add_argument_group("Slurm epilog mode")
    epilog.add_argument(
        "--slurm-epilog",
        dest="slurm_epilog",
        action="store_true",
        help="job id and user from Slurm's environment, the rest from --config",
    )
    epilog.add_argument("--config", metavar="FILE.yaml")
    epilog.add_argument(
        "--strict",
        action="store_true",
        help="in epilog mode, exit non-zero when something went wrong",
    )
    add_writer_arguments(parser)
    return parser


def build_flush_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} flush", description="Replay spooled batches, oldest first."
    )
    add_writer_arguments(parser)
    return parser


def writer_settings(
    options: argparse.Namespace, environ: dict[str, str] | None = None
) -> WriterSettings:
    """Writer flags to settings; UsageError for incomplete server flags."""
    env = os.environ if environ is None else environ
    v2 = [options.influx_url, options.influx_org, options.influx_bucket]
    if any(v2) and not all(v2):
        raise UsageError("--influx.url, --influx.org and --influx.bucket go together")
    if options.influx_token_file and not options.influx_url:
        raise UsageError("--influx.token-file needs --influx.url")
    if bool(options.influx_v1_url) != bool(options.influx_database):
        raise UsageError("--influx.v1-url and --influx.database go together")
    if options.influx_retention_policy and not options.influx_v1_url:
        raise UsageError("--influx.retention-policy needs --influx.v1-url")
    try:
        token = read_token(options.influx_token_file, env) if options.influx_url else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return WriterSettings(
        output=options.output,
        v2_url=options.influx_url,
        v2_org=options.influx_org,
        v2_bucket=options.influx_bucket,
        v2_token=token,
        v1_url=options.influx_v1_url,
        v1_database=options.influx_database,
        v1_retention_policy=options.influx_retention_policy,
        v1_username=env.get("INFLUX_USERNAME") or None,
        v1_password=env.get("INFLUX_PASSWORD") or None,
        spool_dir=options.spool_dir,
        batch_size=options.influx_batch_size,
        request_timeout=options.influx_timeout,
    )


def source_requests(options: argparse.Namespace) -> list[SourceRequest]:
    """The source calls the flags ask for, with the contract's keyword options."""
    requests: list[SourceRequest] = []
    if options.darshan or options.darshan_text:
        requests.append(
            SourceRequest(
                "darshan",
                ([Path(p) for p in options.darshan], [Path(p) for p in options.darshan_text]),
                {
                    "top_records": options.darshan_top_records,
                    "signals_out": Path(options.signals_out) if options.signals_out else None,
                },
            )
        )
    if options.recorder:
        requests.append(
            SourceRequest(
                "recorder",
                ([Path(p) for p in options.recorder],),
                {
                    "top_files": options.recorder_top_files,
                    "per_rank_functions": options.recorder_per_rank_functions,
                },
            )
        )
    if options.viztracer:
        requests.append(
            SourceRequest(
                "viztracer",
                ([Path(p) for p in options.viztracer],),
                {
                    "cleaned_out": Path(options.viztracer_out) if options.viztracer_out else None,
                    "top_functions": options.viztracer_top_functions,
                },
            )
        )
    if options.geopm_report:
        requests.append(SourceRequest("geopm_report", ([Path(p) for p in options.geopm_report],)))
    return requests


def configure_logging(level: str = "info", syslog: bool = False) -> None:
    """One line per event, syslog friendly: ``hpcmon-post-job[pid]: LEVEL message``."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler: logging.Handler
    if syslog and os.path.exists("/dev/log"):
        from logging.handlers import SysLogHandler

        handler = SysLogHandler(address="/dev/log")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}[{os.getpid()}]: %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper().replace("WARN", "WARNING"), logging.INFO))
    # influxdb-client logs every failed request itself; our own line says the same once.
    logging.getLogger("influxdb_client").setLevel(logging.CRITICAL)


def exit_status(report: RunReport) -> int:
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def _usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main_flush(argv: Sequence[str]) -> int:
    options = build_flush_parser().parse_args(argv)
    configure_logging(options.log_level)
    if not options.spool_dir:
        return _usage_error("flush needs --spool-dir")
    try:
        settings = writer_settings(options)
    except UsageError as exc:
        return _usage_error(str(exc))
    if not settings.has_server():
        return _usage_error("flush needs a server writer (--influx.url or --influx.v1-url)")
    with Watchdog(options.time_limit, exit_code=EXIT_PROBLEMS):
        reports = flush(settings, Deadline(options.time_limit))
    problems = [p for report in reports for p in report.problems]
    for report in reports:
        logging.getLogger("hpcmon.post_job").info("flush %s", report.summary())
    for problem in problems:
        logging.getLogger("hpcmon.post_job").error("flush: %s", problem)
    return EXIT_PROBLEMS if problems else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["flush"]:
        return main_flush(args[1:])
    parser = build_parser()
    options = parser.parse_args(args)
    if options.slurm_epilog:
        from post_job.epilog import run_epilog

        if not options.config:
            return _usage_error("--slurm-epilog needs --config FILE.yaml")
        return run_epilog(Path(options.config), strict=options.strict)
    configure_logging(options.log_level)
    if not options.job_id or not options.job_id.strip():
        return _usage_error("--job-id is required (or --slurm-epilog --config FILE)")
    try:
        settings = writer_settings(options)
    except UsageError as exc:
        return _usage_error(str(exc))
    requests = source_requests(options)
    if not requests:
        logging.getLogger("hpcmon.post_job").warning("no input given; only the spool is replayed")
    job = JobContext(options.job_id.strip(), options.cluster or None, options.user or None)
    with Watchdog(options.time_limit, exit_code=EXIT_PROBLEMS):
        report = run_job(job, requests, settings, sending_deadline(options.time_limit))
    return exit_status(report)
