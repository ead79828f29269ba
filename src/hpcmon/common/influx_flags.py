"""The InfluxDB server flags the post-job hook writes with and the report reads with: one set
of names, one set of rules, so a command line works the same for both."""

from __future__ import annotations

import argparse
from typing import Any


def add_influx_arguments(group: Any, v2_help: str, v1_help: str) -> None:
    """--influx.url/org/bucket/token-file (2.x/3.x API) and --influx.v1-url/database/
    retention-policy (1.x); `group` is a parser or an argument group."""
    group.add_argument("--influx.url", dest="influx_url", metavar="URL", help=v2_help)
    group.add_argument("--influx.org", dest="influx_org", metavar="ORG")
    group.add_argument("--influx.bucket", dest="influx_bucket", metavar="B")
    group.add_argument(
        "--influx.token-file",
        dest="influx_token_file",
        metavar="F",
        help="token file (default: INFLUX_TOKEN)",
    )
    group.add_argument("--influx.v1-url", dest="influx_v1_url", metavar="URL", help=v1_help)
    group.add_argument("--influx.database", dest="influx_database", metavar="DB")
    group.add_argument("--influx.retention-policy", dest="influx_retention_policy", metavar="RP")


def influx_flags_problem(options: argparse.Namespace) -> str | None:
    """What is incomplete in the InfluxDB flags, in one line, or None."""
    v2 = [options.influx_url, options.influx_org, options.influx_bucket]
    if any(v2) and not all(v2):
        return "--influx.url, --influx.org and --influx.bucket go together"
    if options.influx_token_file and not options.influx_url:
        return "--influx.token-file needs --influx.url"
    if bool(options.influx_v1_url) != bool(options.influx_database):
        return "--influx.v1-url and --influx.database go together"
    if options.influx_retention_policy and not options.influx_v1_url:
        return "--influx.retention-policy needs --influx.v1-url"
    return None
