"""The report's "Could not see" section names files and problems, never their bytes (issue 22):
logs that are not Darshan logs, or are damaged, in every output format."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest

from hpcmon.report.api import Sources, build, collect, render

DATA = Path(__file__).parents[1] / "data"
GOOD = DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
def test_could_not_see_never_quotes_a_file(tmp_path: Path, fmt: str) -> None:
    token = "TOKEN-" + secrets.token_hex(8)
    foreign = tmp_path / "foreign.darshan"
    foreign.write_text(f"{token}\n" * 50)
    header_like = tmp_path / "header.darshan"  # a Darshan version header, then garbage
    header_like.write_bytes(b"3.41\0\0\0\0" + token.encode() * 100)
    truncated = tmp_path / "truncated.darshan"
    shutil.copy(GOOD, truncated)
    with truncated.open("r+b") as handle:
        handle.truncate(GOOD.stat().st_size // 2)
    sources = Sources(darshan_logs=(foreign, header_like, truncated, GOOD))
    job = collect("4242", "c1", sources)
    text = render(job, build(job, sources), fmt)
    seen = "\n".join(job.missing)
    assert f"{foreign}: not a Darshan log: bad magic (no version header)" in seen
    assert str(header_like) in seen and str(truncated) in seen
    assert token not in text and token[:12] not in "".join(job.missing)


def test_a_failure_nothing_foresaw_names_its_type_not_its_message(monkeypatch, capsys) -> None:
    """hpcmon-report's catch-all line: a message may quote what the job wrote."""
    from hpcmon.report import cli

    def broken(*args, **kwargs):
        raise ValueError("could not convert 'SECRET-bytes-of-a-file'")

    monkeypatch.setattr(cli, "collect", broken)
    assert cli.main(["--job-id", "7"]) == 1
    err = capsys.readouterr().err
    assert err == "hpcmon-report: job 7: cannot build the report: ValueError\n"
