"""The one registry of the hook's typed settings: each is declared once, with its type, bounds,
default and help, and both the command-line flag and the epilog YAML key come from it.

``Option.from_flag`` is the argparse type of the flag; ``Option.from_config`` validates the
YAML value and raises ConfigError with one line naming the file, the key and the problem.
A YAML value of the wrong type is refused, never ignored: YAML 1.1 (PyYAML) reads ``1e9`` as
text, so ``time_limit_seconds: 1e9`` gives one line saying so (write ``1.0e9``); on the command
line, where everything is text, numbers are parsed.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from typing import Any

from hpcmon.common.config import ConfigError

MAX_SECONDS = 86_400.0
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Option:
    """One setting: ``key`` in the epilog YAML (under ``section``), ``flag`` on the command
    line, ``keyword`` of the source entry (source options only)."""

    key: str
    flag: str | None
    kind: str  # "int" (positive integer), "seconds" (positive number), "bool"
    default: Any
    help: str
    maximum: float = 10_000_000
    section: str = ""  # "" top level, "writers", or "sources.<name>"
    keyword: str | None = None
    epilog_default: Any = None  # when the epilog's default differs (time limit)

    @property
    def dest(self) -> str:
        assert self.flag
        return self.flag.lstrip("-").replace(".", "_").replace("-", "_")

    def describe(self) -> str:
        if self.kind == "int":
            return f"a positive integer up to {self.maximum:g}"
        if self.kind == "seconds":
            return f"a number of seconds in (0, {self.maximum:g}]"
        return "true or false"

    def check(self, value: Any) -> Any:
        """The typed value, or ValueError saying what it must be."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            raise ValueError(self.describe())
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(self.describe())
        if not math.isfinite(value) or not 0 < value <= self.maximum:
            raise ValueError(self.describe())
        if self.kind == "int":
            if value != int(value):
                raise ValueError(self.describe())
            return int(value)
        return float(value)

    def from_flag(self, text: str) -> Any:
        try:
            if not _NUMBER.match(text.strip()):
                raise ValueError(self.describe())
            return self.check(float(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"must be {exc}, not {text!r}") from None

    def from_config(self, value: Any, where: str) -> Any:
        try:
            return self.check(value)
        except ValueError as exc:
            hint = ""
            if isinstance(value, str) and _NUMBER.match(value.strip()):
                hint = " (YAML read it as text: write it with a decimal point, e.g. 1.0e9)"
            raise ConfigError(f"{where} must be {exc}, not {value!r}{hint}") from None

    def config_default(self) -> Any:
        return self.default if self.epilog_default is None else self.epilog_default


OPTIONS: tuple[Option, ...] = (
    Option(
        "strict",
        "--strict",
        "bool",
        False,
        "in epilog mode, exit non-zero when something went wrong",
    ),
    Option(
        "time_limit_seconds",
        "--time-limit",
        "seconds",
        None,
        "total time limit of the run (the epilog's default: 60 s)",
        maximum=MAX_SECONDS,
        epilog_default=60.0,
    ),
    Option(
        "memory_limit_mib",
        "--memory-limit-mib",
        "int",
        None,
        "memory (MiB) each process reading the job's inputs may add to the hook's own "
        "(default: a quarter of the node's memory, at most 4096)",
        maximum=1_048_576,
    ),
    Option(
        "search_days",
        None,
        "int",
        2,
        "days back to search for logs when Slurm gives no job times",
        maximum=62,
    ),
    Option(
        "timeout_seconds",
        None,
        "seconds",
        5.0,
        "the one question to slurmctld (squeue) about the job: at most this long",
        maximum=60,
        section="slurm",
    ),
    Option(
        "batch_size",
        "--influx.batch-size",
        "int",
        5000,
        "lines per write request",
        maximum=1_000_000,
        section="writers",
    ),
    Option(
        "request_timeout_seconds",
        "--influx.timeout",
        "seconds",
        10.0,
        "per-request timeout",
        maximum=MAX_SECONDS,
        section="writers",
    ),
    Option(
        "top_records",
        "--darshan.top-records",
        "int",
        100,
        "darshan_record points: top N by bytes and by I/O time per module, + shared files",
        section="sources.darshan",
        keyword="top_records",
    ),
    Option(
        "top_files",
        "--recorder.top-files",
        "int",
        50,
        "recorder_file points: top N files by accesses",
        section="sources.recorder",
        keyword="top_files",
    ),
    Option(
        "per_rank_functions",
        "--recorder.per-rank-functions",
        "bool",
        False,
        "also write recorder_rank_function points",
        section="sources.recorder",
        keyword="per_rank_functions",
    ),
    Option(
        "top_functions",
        "--viztracer.top-functions",
        "int",
        50,
        "viztracer_function points: top N functions by total time",
        section="sources.viztracer",
        keyword="top_functions",
    ),
)


def option(section: str, key: str) -> Option:
    for found in OPTIONS:
        if found.section == section and found.key == key:
            return found
    raise KeyError(f"{section}.{key}" if section else key)


def source_options(source: str) -> dict[str, Option]:
    """YAML key -> option, for one source's typed options."""
    return {o.key: o for o in OPTIONS if o.section == f"sources.{source}"}


def add_flag(parser: argparse.ArgumentParser | Any, item: Option, metavar: str = "N") -> None:
    """The option's command-line flag, with its default in the help text."""
    assert item.flag is not None  # only options with a flag come here
    if item.kind == "bool":
        parser.add_argument(item.flag, dest=item.dest, action="store_true", help=item.help)
        return
    default = f" (default {item.default:g})" if item.default is not None else ""
    parser.add_argument(
        item.flag,
        dest=item.dest,
        type=item.from_flag,
        default=item.default,
        metavar="SECONDS" if item.kind == "seconds" else metavar,
        help=item.help + default,
    )
