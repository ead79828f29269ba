"""The shape every collector has, so the server can run any mix of them in one process."""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import Any, ClassVar


def add_flag(parser: argparse.ArgumentParser | Any, name: str, **kwargs: Any) -> None:
    """Add a Prometheus-style dotted flag (``--jobstats.source``); dest is ``jobstats_source``."""
    dest = name.lstrip("-").replace(".", "_").replace("-", "_")
    parser.add_argument(name, dest=dest, **kwargs)


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
