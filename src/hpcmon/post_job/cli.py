"""``hpcmon-post-job``: turn a finished job's logs into InfluxDB points, losing nothing.

Exit status: 0 when every point was written or safely spooled, 1 when something went wrong
(a source error, lines rejected or lost; the reasons are on stderr), 2 for bad usage (one line).
In ``--slurm-epilog`` mode the status is 0 whatever happened, unless ``--strict`` or the
config's ``strict: true`` asks for the statuses above. ``migrate`` (issue 31's layout, see
migrate.py): 0 when every job was migrated, 1 when some were not (named), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from hpcmon.common.influx_flags import add_influx_arguments, influx_flags_problem
from hpcmon.common.jobid import job_id_problem, user_name_problem
from hpcmon.entry import missing_package
from hpcmon.post_job.app import app_name_problem
from hpcmon.post_job.delivery import WriterSettings, flush
from hpcmon.post_job.hook import RunReport, run_job
from hpcmon.post_job.lifetime import (
    GUARD,
    PROG,
    Watchdog,
    configure_logging,
    sending_deadline,
    stop_on_sigterm,
)
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.options import add_flag, option
from hpcmon.post_job.reading import default_memory_limit_mib, job_policy
from hpcmon.post_job.sources import SourceRequest

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
# The only flags that go with --slurm-epilog (everything else comes from the config file).
EPILOG_FLAGS = {"slurm_epilog", "config", "strict", "log_level", "help"}
log = logging.getLogger("hpcmon.post_job")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse with the contract's error style: one line on stderr, no usage block."""

    usage_status = EXIT_USAGE

    def __init__(self, **kwargs) -> None:
        # No abbreviations: the flags are a contract, and "--influx.token X" must never be
        # taken for --influx.token-file (its error would print the secret).
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            # name the unknown flags only: a value next to them may be a secret
            words = message.split(": ", 1)[1].split()
            flags = sorted({word.split("=")[0] for word in words if word.startswith("-")})
            message = f"unrecognized arguments: {' '.join(flags) or '(values without a flag)'}"
        self.exit(self.usage_status, f"{self.prog}: error: {message} (see --help)\n")


def _uid(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        raise argparse.ArgumentTypeError(f"must be a numeric uid, not {text[:40]!r}")
    return int(text)


def add_writer_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("writers (line protocol to standard output when none)")
    group.add_argument(
        "--output",
        metavar="FILE.lp",
        help="write line protocol to this file ('-' for standard output)",
    )
    add_influx_arguments(
        group,
        v2_help="InfluxDB 2.x/3.x API base URL (token: INFLUX_TOKEN or token file)",
        v1_help="InfluxDB 1.x base URL (basic auth: INFLUX_USERNAME/INFLUX_PASSWORD)",
    )
    add_flag(group, option("writers", "batch_size"))
    add_flag(group, option("writers", "request_timeout_seconds"))
    group.add_argument(
        "--spool-dir",
        dest="spool_dir",
        metavar="DIR",
        help="keep batches a server did not acknowledge here; replayed oldest "
        "first by the next run or 'flush'",
    )
    add_flag(parser, option("", "time_limit_seconds"))
    parser.add_argument(
        "--log.level", dest="log_level", default="info", choices=["debug", "info", "warn", "error"]
    )


def build_parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Turn a finished job's Darshan, Recorder, VizTracer and GEOPM data into "
        f"InfluxDB points. '{PROG} flush --spool-dir DIR <writers>' replays the "
        f"spool; '{PROG} migrate --influx.v1-url URL --influx.database DB' moves a "
        "database written before issue 31 to the current layout.",
    )
    parser.add_argument("--job-id", dest="job_id", metavar="ID")
    parser.add_argument("--cluster", metavar="NAME")
    parser.add_argument(
        "--user",
        metavar="NAME",
        help="job owner, as named in the points (changes nothing about who reads)",
    )
    parser.add_argument(
        "--read-as-uid",
        dest="read_as_uid",
        type=_uid,
        metavar="UID",
        help="read the inputs as this user (its passwd group and groups; root needed unless "
        "it is the invoking user): files it cannot read, not owned by it or root, or links "
        "leading out of the inputs' directories are refused",
    )
    parser.add_argument(
        "--app",
        metavar="NAME",
        help="application name (tag app); default: the Darshan executable's base name",
    )
    add_flag(parser, option("", "memory_limit_mib"), metavar="MIB")
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
    add_flag(darshan, option("sources.darshan", "top_records"))
    recorder = parser.add_argument_group("Recorder")
    recorder.add_argument("--recorder", nargs="+", action="extend", default=[], metavar="DIR")
    add_flag(recorder, option("sources.recorder", "top_files"))
    add_flag(recorder, option("sources.recorder", "per_rank_functions"))
    viztracer = parser.add_argument_group("VizTracer")
    viztracer.add_argument("--viztracer", nargs="+", action="extend", default=[], metavar="FILE")
    viztracer.add_argument("--viztracer-out", dest="viztracer_out", metavar="FILE")
    add_flag(viztracer, option("sources.viztracer", "top_functions"))
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
    add_flag(epilog, option("", "strict"))
    add_writer_arguments(parser)
    return parser


def build_flush_parser() -> _Parser:
    parser = _Parser(prog=f"{PROG} flush", description="Replay spooled batches, oldest first.")
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="the epilog's config: its spool_dir, writers, credentials and time limit "
        "(instead of the flags below)",
    )
    add_writer_arguments(parser)
    return parser


def build_migrate_parser() -> _Parser:
    parser = _Parser(
        prog=f"{PROG} migrate",
        description="Move an InfluxDB 1.x database written by an earlier release (per-job "
        "tags) to the current layout, job by job: a job's old series are dropped only once "
        "its new points are written, so it can be stopped at any time and run again.",
    )
    group = parser.add_argument_group("InfluxDB 1.x (basic auth: INFLUX_USERNAME/INFLUX_PASSWORD)")
    add_influx_arguments(
        group,
        v2_help="not for migrate (InfluxDB 1.x only)",
        v1_help="InfluxDB 1.x base URL (required)",
    )
    add_flag(group, option("writers", "batch_size"))
    add_flag(group, option("writers", "request_timeout_seconds"))
    parser.add_argument(
        "--cluster", metavar="NAME", help="migrate only this cluster's jobs (tag cluster)"
    )
    add_flag(parser, option("", "time_limit_seconds"))
    parser.add_argument(
        "--progress-every",
        dest="progress_every",
        type=int,
        default=100,
        metavar="N",
        help="a progress line every N jobs (default 100)",
    )
    parser.add_argument(
        "--jobs-per-drop",
        dest="jobs_per_drop",
        type=int,
        default=50,
        metavar="N",
        help="jobs whose old series one DROP SERIES removes, once their new points are all "
        "written (default 50; a kill costs at most these jobs' rewriting)",
    )
    parser.add_argument(
        "--log.level", dest="log_level", default="info", choices=["debug", "info", "warn", "error"]
    )
    parser.set_defaults(output=None, spool_dir=None)
    return parser


def _flush_settings_from_config(path: str) -> tuple[WriterSettings, float]:
    """``flush --config``: the epilog's own spool, writers and credentials (UsageError)."""
    from hpcmon.common.config import ConfigError
    from hpcmon.post_job.epilog import load_config
    from hpcmon.post_job.epilog import writer_settings as epilog_writer_settings

    try:
        config = load_config(path)
        settings = epilog_writer_settings(config, None, os.environ)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    if not config.spool_dir:
        raise UsageError(f"{path}: no spool_dir: nothing to replay")
    return settings, config.time_limit


def writer_settings(
    options: argparse.Namespace, environ: dict[str, str] | None = None
) -> WriterSettings:
    """Writer flags to settings; UsageError for incomplete or malformed server flags."""
    problem = influx_flags_problem(options)
    if problem:
        raise UsageError(problem)
    settings = WriterSettings(
        output=options.output,
        v2_url=options.influx_url,
        v2_org=options.influx_org,
        v2_bucket=options.influx_bucket,
        v1_url=options.influx_v1_url,
        v1_database=options.influx_database,
        v1_retention_policy=options.influx_retention_policy,
        spool_dir=options.spool_dir,
        batch_size=options.influx_batch_size,
        request_timeout=options.influx_timeout,
    )
    if options.spool_dir and not settings.has_server():
        raise UsageError("--spool-dir needs a server writer (--influx.url or --influx.v1-url)")
    try:
        settings.add_secrets(options.influx_token_file, os.environ if environ is None else environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return settings


def source_requests(options: argparse.Namespace) -> list[SourceRequest]:
    """The source calls the flags ask for, with the contract's keyword options; the inputs
    must stay in the directories they were named in (checked with --read-as-uid)."""
    requests = _requests(options)
    for request in requests:
        named = [Path(p) for paths in request.inputs for p in paths]
        request.roots = tuple(sorted({str(p.absolute().parent) for p in named}))
    return requests


def _requests(options: argparse.Namespace) -> list[SourceRequest]:
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


def exit_status(report: RunReport) -> int:
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def _usage_error(message: str, status: int = EXIT_USAGE) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _token_flag_given(args: Sequence[str]) -> bool:
    return any(arg == "--influx.token" or arg.startswith("--influx.token=") for arg in args)


def _flags_given(
    parser: argparse.ArgumentParser, options: argparse.Namespace, ignore: set[str]
) -> list[str]:
    """Flags (as spelled on the command line) set to something else than their default."""
    return [
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings
        and action.dest not in ignore
        and getattr(options, action.dest, None) != action.default
    ]


def main_flush(argv: Sequence[str]) -> int:
    parser = build_flush_parser()
    options = parser.parse_args(argv)
    configure_logging(options.log_level)
    time_limit = options.time_limit
    try:
        if options.config:
            others = _flags_given(parser, options, {"config", "log_level", "help"})
            if others:
                raise UsageError(f"--config gives the writers; not {' '.join(others)} too")
            settings, time_limit = _flush_settings_from_config(options.config)
        elif not options.spool_dir:
            raise UsageError("flush needs --spool-dir (or --config FILE.yaml)")
        elif options.output:
            raise UsageError("flush replays the spool to servers; --output does not go with it")
        else:
            settings = writer_settings(options)
    except UsageError as exc:
        return _usage_error(str(exc))
    assert settings.spool_dir
    if not Path(settings.spool_dir).is_dir():
        log.warning("flush: %s does not exist: nothing to replay", settings.spool_dir)
    with stop_on_sigterm(EXIT_PROBLEMS), Watchdog(time_limit, exit_code=EXIT_PROBLEMS):
        try:
            reports = flush(settings, sending_deadline(time_limit))
        except Exception as exc:  # noqa: BLE001 - a bug must still end in one clear line
            if missing_package(exc):
                raise  # the extra is not installed: hpcmon.entry names it
            log.debug("flush failed", exc_info=True)
            log.error("flush: internal error: %s", type(exc).__name__)
            return EXIT_PROBLEMS
    problems = [p for report in reports for p in report.problems]
    for report in reports:
        log.info("flush %s", report.summary())
    for problem in problems:
        log.error("flush: %s", problem)
    return EXIT_PROBLEMS if problems else EXIT_OK


def main_migrate(argv: Sequence[str]) -> int:
    from hpcmon.post_job.migrate import run_migration

    parser = build_migrate_parser()
    options = parser.parse_args(argv)
    configure_logging(options.log_level)
    try:
        if options.influx_url or options.influx_token_file:
            raise UsageError("migrate works on InfluxDB 1.x: --influx.v1-url, not --influx.url")
        if not options.influx_v1_url:
            raise UsageError("migrate needs --influx.v1-url URL and --influx.database DB")
        if options.progress_every < 1 or options.jobs_per_drop < 1:
            raise UsageError("--progress-every and --jobs-per-drop must be at least 1")
        settings = writer_settings(options)
    except UsageError as exc:
        return _usage_error(str(exc))
    GUARD.note = "rerun migrate: a job's old series go only once its new points are in"
    with stop_on_sigterm(EXIT_PROBLEMS), Watchdog(options.time_limit, exit_code=EXIT_PROBLEMS):
        try:
            report = run_migration(
                settings,
                options.cluster or None,
                sending_deadline(options.time_limit),
                options.progress_every,
                options.jobs_per_drop,
            )
        except Exception as exc:  # noqa: BLE001 - a bug must still end in one clear line
            log.debug("migrate failed", exc_info=True)
            log.error("migrate: internal error: %s; rerun to continue", type(exc).__name__)
            return EXIT_PROBLEMS
    if report.jobs == 0:
        if report.stopped is not None:
            log.error(
                "migrate: cannot list the jobs to migrate: %s; nothing changed", report.stopped
            )
            return EXIT_PROBLEMS
        log.info("migrate: no job has old-layout series: nothing to do")
        return EXIT_OK
    for job_id, reason in report.failed:
        log.error("migrate: job %s not migrated: %s", job_id, reason)
    if report.stopped is not None:
        log.error(
            "migrate: stopped: %s; %d job(s) left: rerun to continue", report.stopped, report.left
        )
    log.info("%s", report.summary())
    return EXIT_PROBLEMS if report.failed or report.stopped is not None else EXIT_OK


def main_epilog(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    """``--slurm-epilog``: everything but the config path comes from Slurm and the config."""
    from hpcmon.post_job.epilog import run_epilog

    status = EXIT_USAGE if options.strict else EXIT_OK
    others = _flags_given(parser, options, EPILOG_FLAGS)
    if others:
        return _usage_error(
            f"--slurm-epilog takes its settings from --config, not {' '.join(others)}", status
        )
    if not options.config:
        return _usage_error("--slurm-epilog needs --config FILE.yaml", status)
    return run_epilog(Path(options.config), strict=options.strict, log_level=options.log_level)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if _token_flag_given(args):
        return _usage_error(
            "there is no --influx.token: give the token in INFLUX_TOKEN or --influx.token-file"
        )
    if args[:1] == ["flush"]:
        return main_flush(args[1:])
    if args[:1] == ["migrate"]:
        return main_migrate(args[1:])
    parser = build_parser()
    if "--slurm-epilog" in args and "--strict" not in args:
        parser.usage_status = EXIT_OK
    options = parser.parse_args(args)
    if options.slurm_epilog:
        return main_epilog(parser, options)
    if options.config or options.strict:
        return _usage_error("--config and --strict go with --slurm-epilog")
    configure_logging(options.log_level)
    if not options.job_id or not options.job_id.strip():
        return _usage_error("--job-id is required (or --slurm-epilog --config FILE)")
    problem = job_id_problem(options.job_id.strip())
    if problem:
        return _usage_error(f"--job-id: {problem}")
    if options.user and user_name_problem(options.user):
        return _usage_error(f"--user: {user_name_problem(options.user)}")
    if options.app is not None and app_name_problem(options.app):
        return _usage_error(f"--app: {app_name_problem(options.app)}")
    try:
        settings = writer_settings(options)
    except UsageError as exc:
        return _usage_error(str(exc))
    try:
        policy = job_policy(
            options.read_as_uid,
            None,
            options.memory_limit_mib or default_memory_limit_mib(),
            options.time_limit,
        )
    except ValueError as exc:
        return _usage_error(f"--read-as-uid: {exc}")
    requests = source_requests(options)
    if not requests:
        log.warning(
            "no input given%s",
            "; only the spool is replayed" if settings.spool_dir else "; nothing to write",
        )
    job = JobContext(
        options.job_id.strip(), options.cluster or None, options.user or None, options.app
    )
    with stop_on_sigterm(EXIT_PROBLEMS), Watchdog(options.time_limit, exit_code=EXIT_PROBLEMS):
        try:
            report = run_job(job, requests, settings, sending_deadline(options.time_limit), policy)
        except Exception as exc:  # noqa: BLE001 - a bug must still end in one clear line
            if missing_package(exc):
                raise  # the extra is not installed: hpcmon.entry names it
            log.debug("run failed", exc_info=True)
            # the type only: a message may quote an input (its details are in the debug log)
            log.error("job=%s internal error: %s", job.job_id, type(exc).__name__)
            return EXIT_PROBLEMS
    return exit_status(report)
