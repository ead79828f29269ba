"""``--collector.geopm``: live power and energy from GEOPM or powercap (RAPL).

The sampler thread reads the chosen backend every ``--geopm.interval``; ``exposition()``
renders the latest snapshot (cached per snapshot, so concurrent scrapes cost one render).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from hpcmon.exporter.collector import FamilyCollector, add_flag, register, seconds_flag
from hpcmon.exporter.exposition import render_families
from hpcmon.exporter.geopm.model import Backend
from hpcmon.exporter.geopm.naming import metric_name
from hpcmon.exporter.geopm.requests import RequestError, parse_signals_option
from hpcmon.exporter.geopm.sampler import Sampler, Snapshot

BACKENDS = ("auto", "geopmdpy", "geopmsession", "powercap")
LABELS = ["domain", "domain_index", "source"]
HEALTH_FAMILIES = (
    "geopm_up",
    "geopm_sample_duration_seconds",
    "geopm_errors",
    "geopm_signal_rebases",
)


_interval = seconds_flag(0.01, 3600)


def _signals(value: str) -> str:
    try:
        parse_signals_option(value)
    except RequestError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def make_backends(options: argparse.Namespace) -> list[Backend]:
    """Backends in preference order for ``--geopm.backend`` (auto: geopmdpy, then powercap)."""
    choice = options.geopm_backend
    requests = parse_signals_option(options.geopm_signals)
    interval = options.geopm_interval
    backends: list[Backend] = []
    if choice in ("auto", "geopmdpy"):
        from hpcmon.exporter.geopm.geopmdpy_backend import GeopmdpyBackend

        backends.append(GeopmdpyBackend(requests))
    if choice == "geopmsession":
        from hpcmon.exporter.geopm.geopmsession_backend import GeopmsessionBackend

        backends.append(GeopmsessionBackend(options.geopm_session_path, requests, interval))
    if choice in ("auto", "powercap"):
        from hpcmon.exporter.geopm.powercap import PowercapBackend

        backends.append(PowercapBackend(options.path_sysfs))
    return backends


def snapshot_families(snapshot: Snapshot) -> list[Metric]:
    """Metric families for one snapshot: signals first, then the collector's own health."""
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    seen: set[tuple[str, str, int, str]] = set()
    for reading in snapshot.readings:
        name = metric_name(reading.key.signal, reading.unit, reading.monotone)
        # A counter's family is named without _total: gauge "x" and counter "x_total" clash.
        family_name = name.name.removesuffix("_total")
        series = (family_name, reading.key.domain, reading.key.index, reading.source)
        if series in seen or family_name in HEALTH_FAMILIES:  # two signals, one name: first
            continue
        family = families.get(family_name)
        if family is None:
            if name.kind == "counter":
                family = CounterMetricFamily(name.name, name.help, labels=LABELS)
            else:
                family = GaugeMetricFamily(name.name, name.help, labels=LABELS)
            families[family_name] = family
        elif family.type != name.kind:
            continue
        seen.add(series)
        family.add_metric(
            [reading.key.domain, str(reading.key.index), reading.source], reading.value
        )
    up = GaugeMetricFamily(
        "geopm_up",
        "Whether the power backend gave samples at the last interval (1) or not (0).",
        labels=["source"],
    )
    duration = GaugeMetricFamily(
        "geopm_sample_duration_seconds",
        "Time the last read of the backend took.",
        labels=["source"],
    )
    errors = CounterMetricFamily(
        "geopm_errors",
        "Read problems since start (failed reads, "
        "unreadable zones, bad values, child process exits).",
        labels=["source"],
    )
    resets = CounterMetricFamily(
        "geopm_signal_rebases",
        "Counter decreases that were not a "
        "hardware wraparound (source restarts); the interval is "
        "not counted.",
        labels=["source"],
    )
    for source, is_up in sorted(snapshot.up.items()):
        up.add_metric([source], 1.0 if is_up else 0.0)
        errors.add_metric([source], float(snapshot.errors_total.get(source, 0)))
        resets.add_metric([source], float(snapshot.counter_resets_total.get(source, 0)))
    for source, seconds in sorted(snapshot.sample_seconds.items()):
        duration.add_metric([source], seconds)
    return [*families.values(), up, duration, errors, resets]


@register
class GeopmCollector(FamilyCollector):
    name = "geopm"
    description = "GEOPM / powercap (RAPL) power and energy of this node"
    enabled_by_default = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_flag(
            parser,
            "--geopm.backend",
            choices=BACKENDS,
            default="auto",
            help="where power and energy come from; auto = geopmdpy if it works, else powercap",
        )
        add_flag(
            parser,
            "--geopm.interval",
            type=_interval,
            default=1.0,
            help="sampling interval in seconds",
        )
        add_flag(
            parser,
            "--geopm.signals",
            type=_signals,
            default=None,
            help="GEOPM requests 'SIGNAL DOMAIN INDEX' (INDEX may be *), comma-separated "
            "or a file with one per line; default: CPU/DRAM/GPU/board energy and power",
        )
        add_flag(
            parser,
            "--geopm.session-path",
            default="geopmsession",
            help="geopmsession executable for --geopm.backend geopmsession",
        )

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        self.sampler = Sampler(make_backends(options), options.geopm_interval)
        self._lock = threading.Lock()
        self._rendered: tuple[int, bytes] = (-1, b"")

    def start(self) -> None:
        self.sampler.start()

    def stop(self) -> None:
        self.sampler.stop()

    def collect(self) -> Iterable[Metric]:
        return snapshot_families(self.sampler.snapshot)

    def exposition(self) -> bytes:
        """Rendered once per sample: concurrent scrapes of one snapshot share the text."""
        snapshot = self.sampler.snapshot
        with self._lock:
            seq, body = self._rendered
            if seq != snapshot.seq:
                body = render_families(snapshot_families(snapshot))
                self._rendered = (snapshot.seq, body)
        return body
