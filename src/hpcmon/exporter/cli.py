"""``hpcmon-exporter``: one process, collectors switched with ``--collector.<name>``."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily

from hpcmon.exporter.collector import (
    LOG_FORMAT,
    REGISTERED,
    Collector,
    ProblemLog,
    add_flag,
    add_path_flags,
)
from hpcmon.exporter.exposition import Compressed, Part, render_families
from hpcmon.exporter.web import listen_address_flag, load_web_config, make_server

log = logging.getLogger("hpcmon.exporter")

DEFAULT_LISTEN_ADDRESS = "127.0.0.1:19325"

# The modules whose collectors register themselves (@register); a module that is not present
# is simply not offered.
COLLECTOR_MODULES = (
    "hpcmon.exporter.jobstats.collector",
    "hpcmon.exporter.geopm.collector",
    "hpcmon.exporter.node_jobs",
    "hpcmon.exporter.postjob",
    "hpcmon.exporter.slurm",
)


def available_collectors() -> dict[str, type[Collector]]:
    for module_name in COLLECTOR_MODULES:
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue
            raise
    order = {"jobstats": 0, "geopm": 1, "jobs": 2, "postjob": 3, "slurm": 4}
    return dict(sorted(REGISTERED.items(), key=lambda item: order.get(item[0], 99)))


def build_parser(collectors: dict[str, type[Collector]]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcmon-exporter",
        usage="%(prog)s [flags]  (--help lists them)",  # one line before a flag error
        description="Prometheus exporter: Lustre jobstats, GEOPM/RAPL power, jobs on the node, "
        "the post-job spool, Slurm's running jobs.",
        epilog="hpcmon-exporter --print-series-budget --help: series and Prometheus memory of a "
        "site's shape, instead of running.",
    )
    add_flag(
        parser,
        "--web.listen-address",
        default=DEFAULT_LISTEN_ADDRESS,
        type=listen_address_flag,
        help="host:port to listen on; ':19325' for all interfaces",
    )
    add_flag(parser, "--web.telemetry-path", default="/metrics", help="path of the metrics")
    add_flag(parser, "--web.config.file", help="exporter-toolkit web config (TLS, basic auth)")
    add_flag(
        parser,
        "--log.level",
        default="info",
        choices=["debug", "info", "warn", "error"],
        help="least severe messages logged",
    )
    for name, cls in collectors.items():
        add_flag(
            parser,
            f"--collector.{name}",
            action=argparse.BooleanOptionalAction,
            default=cls.enabled_by_default,
            help=cls.description,
        )
    add_path_flags(parser)
    for cls in collectors.values():
        cls.add_arguments(parser)
    return parser


class Exporter:
    """Renders every enabled collector, isolating failures so one never breaks the scrape."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self.collectors = list(collectors)
        self.problems = ProblemLog(log, repeat_seconds=60)  # one line a minute, not a scrape

    def start(self) -> None:
        for collector in self.collectors:
            collector.start()

    def stop(self) -> None:
        for collector in self.collectors:
            try:
                collector.stop()
            except Exception:  # noqa: BLE001
                log.exception("stopping collector %s", collector.name)

    def render(self, scrape_timeout: float | None = None) -> list[Part]:
        """The exposition of every collector, as parts (see web.make_server); compressed
        parts first (see exposition.gzip_parts). ``scrape_timeout``: the scraper's timeout
        in seconds, if it said."""
        parts: list[Part] = []
        success = GaugeMetricFamily(
            "hpcmon_exporter_collector_success",
            "Whether the collector rendered without error.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "hpcmon_exporter_collector_duration_seconds",
            "Time to render the collector's latest snapshot.",
            labels=["collector"],
        )
        for collector in self.collectors:
            started = time.perf_counter()
            try:
                parts.append(collector.exposition_before(scrape_timeout))
                ok = 1.0
            except Exception as exc:  # noqa: BLE001
                self.problems.warn(f"collector {collector.name} failed to render: {exc!r}")
                ok = 0.0
            success.add_metric([collector.name], ok)
            duration.add_metric([collector.name], time.perf_counter() - started)
        parts.append(render_families([success, duration]))
        parts.append(generate_latest(REGISTRY))
        parts.sort(key=lambda part: not isinstance(part, Compressed))
        return parts


LANDING_PAGE = """<!DOCTYPE html>
<html><head><title>hpcmon exporter</title></head>
<body><h1>hpcmon exporter</h1>
<p>Collectors: {collectors}</p>
<p><a href="{path}">Metrics</a></p></body></html>
"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--print-series-budget" in argv:
        from hpcmon.exporter import budget

        argv.remove("--print-series-budget")
        return budget.main(argv)
    collectors = available_collectors()
    parser = build_parser(collectors)
    options = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, options.log_level.upper().replace("WARN", "WARNING")),
        format=LOG_FORMAT,
    )
    try:
        enabled = [
            cls(options)
            for name, cls in collectors.items()
            if getattr(options, f"collector_{name}")
        ]
    except ValueError as exc:  # flags that are wrong together, e.g. a source without its path
        parser.error(str(exc))
    if not enabled:
        parser.error("no collector enabled")
    try:
        web_config = load_web_config(options.web_config_file)
    except (OSError, ValueError) as exc:
        print(f"hpcmon-exporter: {exc}", file=sys.stderr)
        return 2
    exporter = Exporter(enabled)
    landing = LANDING_PAGE.format(
        collectors=", ".join(c.name for c in enabled), path=options.web_telemetry_path
    )
    try:
        server = make_server(
            options.web_listen_address,
            options.web_telemetry_path,
            exporter.render,
            web_config,
            landing,
        )
    except (OSError, ValueError) as exc:
        print(
            f"hpcmon-exporter: cannot listen on {options.web_listen_address}: {exc}",
            file=sys.stderr,
        )
        return 2
    exporter.start()
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d, shutting down", signum)
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheme = "https" if web_config.ssl_context else "http"
    host, port = server.server_address[:2]
    log.info(
        "listening on %s://%s:%s%s (collectors: %s)",
        scheme,
        host,
        port,
        options.web_telemetry_path,
        ", ".join(c.name for c in enabled),
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        exporter.stop()
        server.server_close()
    return 0
