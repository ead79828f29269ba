"""The shape every collector has, so the server can run any mix of them in one process.

Also the few pieces every collector needs alike: dotted flags whose help states the default,
flag value types with readable errors, a log that says each problem once, and the thread
that samples in the background.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from prometheus_client.metrics_core import Metric

from hpcmon.exporter.exposition import Compressed, render_families

log = logging.getLogger("hpcmon.exporter")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def add_flag(parser: argparse.ArgumentParser | Any, name: str, **kwargs: Any) -> None:
    """Add a Prometheus-style dotted flag (``--jobstats.source``); dest is ``jobstats_source``.

    The help text ends with the default (``(default 10)``, ``(default on)``) unless the flag
    has none or its help already describes it."""
    dest = name.lstrip("-").replace(".", "_").replace("-", "_")
    default = kwargs.get("default")
    help_text = kwargs.get("help")
    if help_text and default is not None and "default" not in help_text:
        kwargs["help"] = f"{help_text} (default {_shown(default)})"
    parser.add_argument(name, dest=dest, **kwargs)


def add_path_flags(parser: argparse.ArgumentParser | Any) -> None:
    """The mount points every collector reads under, defined once (node_exporter's names), so
    a collector never reaches into another one's flags."""
    add_flag(
        parser,
        "--path.procfs",
        default="/proc",
        help="procfs mount point (jobstats procfs source, jobs' cgroup v2 uids)",
    )
    add_flag(parser, "--path.sysfs", default="/sys", help="sysfs mount point (powercap zones)")
    add_flag(
        parser,
        "--path.cgroupfs",
        default="/sys/fs/cgroup",
        help="cgroup file system mount point (Slurm jobs on the node)",
    )


def seconds_flag(low: float, high: float, *, high_included: bool = True) -> Callable[[str], float]:
    """A flag type for a number of seconds in ``[low, high]`` (``[low, high)`` when
    ``high_included`` is false); the error says what is expected."""
    closing = "]" if high_included else ")"

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        above = value > high if high_included else value >= high
        if math.isnan(value) or value < low or above:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected seconds in [{low:.10g}, {high:.10g}{closing}"
            )
        return value

    return seconds


def count_flag(text: str) -> int:
    """A flag type for a count: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 0")
    return value


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def bytes_flag(text: str) -> int:
    """A flag type for a size in bytes >= 1: ``1048576``, ``512M``, ``1GiB``, ``64k``
    (K, M, G, T are powers of 1024, with or without ``iB``/``B``)."""
    cleaned = text.strip().upper()
    for tail in ("IB", "B"):
        if cleaned.endswith(tail) and cleaned[: -len(tail)][-1:] in "KMGT":
            cleaned = cleaned[: -len(tail)]
            break
    unit = cleaned[-1:] if cleaned[-1:] in "KMGT" else ""
    digits = cleaned[: len(cleaned) - len(unit)]
    if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a size in bytes >= 1, e.g. 1048576, 512M, 1GiB"
        )
    return int(digits) * _BYTE_UNITS[unit]


class ProblemLog:
    """Logs each distinct problem once at WARNING (again after ``repeat_seconds``, if given),
    and its repeats at DEBUG: the same bad record or missing file is met at every sample.

    At most ``limit`` messages are remembered; past that the memory starts afresh."""

    def __init__(
        self, logger: logging.Logger, *, repeat_seconds: float | None = None, limit: int = 10_000
    ) -> None:
        self.logger = logger
        self.repeat_seconds = repeat_seconds
        self.limit = limit
        self._logged: dict[str, float] = {}  # message -> when it was last logged at WARNING

    def warn(self, message: str) -> None:
        now = time.monotonic()
        last = self._logged.get(message)
        if last is not None and (self.repeat_seconds is None or now - last < self.repeat_seconds):
            self.logger.debug("%s", message)
            return
        if last is None and len(self._logged) >= self.limit:
            self._logged.clear()
        self._logged[message] = now
        self.logger.warning("%s", message)


class Periodic:
    """Calls ``step`` every ``interval`` seconds in a daemon thread until ``stop()``.

    A step that raises is logged and the next one still runs. Ticks fall on a fixed grid; a
    step that overruns is followed by a whole interval (missed ticks are skipped, never run
    in a burst). While ``paced()`` is true the step waits for its source's own clock
    (geopmsession's ``-p``), so no time is spent waiting here.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        interval: float,
        *,
        paced: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.step = step
        self.interval = interval
        self.paced = paced
        self.clock = clock
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self.stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def _run(self) -> None:
        next_time = self.clock()
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the thread must outlive any one bad step
                log.exception("%s: step failed", self.name)
            if self.paced():
                continue
            next_time += self.interval
            now = self.clock()
            if next_time < now:
                next_time = now + self.interval
            self.stopping.wait(max(0.0, next_time - now))


# name -> collector class; each collector registers itself in its own module (@register).
REGISTERED: dict[str, type[Collector]] = {}


_C = TypeVar("_C", bound="Collector")


def register(cls: type[_C]) -> type[_C]:
    """Adds ``cls`` to REGISTERED; returns it as it is, so its own type is kept."""
    REGISTERED[cls.name] = cls
    return cls


class Collector(ABC):
    """A data source that samples on its own schedule and renders its latest snapshot.

    ``exposition()`` must be cheap and thread-safe: concurrent scrapes read the same snapshot.
    It returns Prometheus text format 0.0.4 for the families this collector owns.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    enabled_by_default: ClassVar[bool] = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Register ``--<name>.*`` flags; the default registers none."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options

    def start(self) -> None:
        """Start background sampling, if any."""

    def stop(self) -> None:
        """Stop background sampling and child processes."""

    @abstractmethod
    def exposition(self) -> bytes:
        """Text exposition of the latest snapshot."""

    def exposition_before(self, scrape_timeout: float | None) -> bytes | Compressed:
        """What a scrape that must answer within ``scrape_timeout`` seconds (None: not
        said) gets; a collector that samples on scrape uses it to stay in time."""
        return self.exposition()


class FamilyCollector(Collector):
    """A collector with prometheus-client's contract: ``collect()`` yields metric families
    (it can be registered in any CollectorRegistry); the exposition is rendered from them.
    Only jobstats, whose bulk series need a faster writer, renders its own text."""

    @abstractmethod
    def collect(self) -> Iterable[Metric]:
        """The families of the latest snapshot."""

    def exposition(self) -> bytes:
        return render_families(self.collect())
