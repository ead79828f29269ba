"""hpcmon-dashboards: generate Grafana dashboards, Prometheus rules and Grafana provisioning."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hpcmon.common.config import ConfigError

from . import config as dashboards_config
from . import generate, lint


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as every hpcmon command
        self.print_usage(sys.stderr)
        print(f"hpcmon-dashboards: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hpcmon-dashboards", description=__doc__, allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = commands.add_parser(
        "generate",
        help="write DIR/dashboards/<uid>.json, DIR/rules/*.yaml and DIR/provisioning/",
        allow_abbrev=False,
    )
    gen.add_argument("--out", type=Path, required=True, help="output directory")
    gen.add_argument("--config", type=Path, help="YAML: thresholds, datasources, labels")
    check = commands.add_parser(
        "lint", help="check generated dashboards (DIR as written by generate)", allow_abbrev=False
    )
    check.add_argument("dir", type=Path)
    return parser


def _lint(out_dir: Path) -> int:
    found = sorted((out_dir / "dashboards").glob("*.json"))
    if not found:
        print(f"hpcmon-dashboards: no dashboards under {out_dir}/dashboards", file=sys.stderr)
        return 2
    try:
        boards = [json.loads(path.read_text(encoding="utf-8")) for path in found]
    except (OSError, ValueError) as exc:
        print(f"hpcmon-dashboards: cannot read dashboards: {exc}", file=sys.stderr)
        return 2
    uids = {board.get("uid") for board in boards}
    problems = [
        f"{path.name}: {problem}"
        for path, board in zip(found, boards, strict=True)
        for problem in lint.lint(board, uids)
    ]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "lint":
        return _lint(args.dir)
    try:
        config = dashboards_config.load(args.config)
    except (ConfigError, UnicodeDecodeError) as exc:
        one_line = " ".join(str(exc).split())  # YAML errors span several lines
        print(f"hpcmon-dashboards: bad config: {one_line}", file=sys.stderr)
        return 2
    try:
        written = generate.write(config, args.out)
    except OSError as exc:
        print(f"hpcmon-dashboards: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"hpcmon-dashboards: wrote {len(written)} files under {args.out}", file=sys.stderr)
    return 0
