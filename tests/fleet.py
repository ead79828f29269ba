"""A fleet of real hpcmon-exporter processes on replayed captures with distinct target names,
for sharded-collection tests and benchmarks, and an Alertmanager-like receiver for vmalert."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devtools.replay import _Section, load_sections
from devtools.servers import ExporterProcess, start_exporter, wait_port
from hpcmon.common.process import stop_process

DATA = Path(__file__).parent / "data"
# A real Lustre 2.10.1 OST capture (35 jobs); each fleet member serves it as its own OST.
FLEET_CAPTURE = (
    DATA / "jobstats" / "HewlettPackard_lustre_exporter__proc_fs_lustre_obdfilter_lustrefs-OST0000"
    "_job_stats__lustre2.10.1.txt"
)


def fleet_target(index: int) -> str:
    return f"fleet-OST{index:04x}"


def fleet_sections(index: int) -> list[_Section]:
    """The capture as target fleet-OST<index>."""
    return [
        _Section(section.param.replace("lustrefs-OST0000", fleet_target(index)), section.jobs)
        for section in load_sections([FLEET_CAPTURE])
    ]


@contextlib.contextmanager
def run_exporters(arg_lists: Sequence[list[str]], workdir: Path) -> Iterator[list[ExporterProcess]]:
    """Start every exporter at once (a fleet starts in seconds, not one after the other)."""
    started: list[ExporterProcess] = []
    try:
        for index, args in enumerate(arg_lists):
            started.append(start_exporter(args, workdir, log_name=f"exporter-{index}.log"))
        for exporter in started:
            wait_port(exporter.port, exporter.proc, exporter.log_path, timeout=60)
        yield started
    finally:
        for exporter in started:
            stop_process(exporter.proc)


class AlertReceiver:
    """Takes what vmalert sends to Alertmanager (POST /api/v2/alerts) and keeps it."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.extend(json.loads(body or b"[]"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> AlertReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Fleet:
    exporters: list[ExporterProcess]
    jobstats_files: list[Path]

    @property
    def addresses(self) -> list[str]:
        return [e.address for e in self.exporters]
