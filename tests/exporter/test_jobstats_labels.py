"""Issue 13: job id label values round-trip exactly through the exposition, as read back by
prometheus_client.parser and accepted by promtool (ids ending in a backslash, quotes,
newlines, invalid UTF-8)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.test_jobstats_collector import make_collector

PROMTOOL = shutil.which("promtool")

# (as Lustre prints it, the label value expected)
IDS = [
    ("back\\", "back\\"),  # 2.12 raw id ending in a backslash
    ('"slash\\x5c"', "slash\\"),  # 2.15.2+ escaped trailing backslash
    ('"q\\x22uote"', 'q"uote'),
    ('"nl\\x0aline"', "nl\nline"),
    ('"both\\x5c\\x22"', 'both\\"'),
    ('"utf8\\xc3\\xa9"', "utf8\u00e9"),
    # Not UTF-8: kept in Lustre's escaped form, so the two stay two jobs and say what they are.
    ('"bad\\xff"', "bad\\xff"),
    ('"bad\\xfe"', "bad\\xfe"),
    ("tab\tin", "tab\tin"),
    ("}brace{", "}brace{"),
]


def job_stats(ids: list[str]) -> str:
    lines = ["obdfilter.fs-OST0000.job_stats=", "job_stats:"]
    for printed in ids:
        lines += [
            f"- job_id:          {printed}",
            "  snapshot_time:   1723114647.5 secs.nsecs",
            "  write_bytes:     { samples: 3, unit: bytes, min: 1, max: 9, sum: 20 }",
        ]
    return "\n".join(lines) + "\n"


def exported_ids(tmp_path: Path, text: str | bytes) -> tuple[list[str], bytes]:
    path = tmp_path / "ids.txt"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    body = make_collector("--jobstats.source", "file", "--jobstats.path", str(path)).sample()
    families = {f.name: f for f in text_string_to_metric_families(body.decode("utf-8"))}
    ids = [s.labels["jobid"] for s in families["lustre_job_write_bytes"].samples]
    return ids, body


def test_hostile_ids_round_trip_exactly(tmp_path: Path) -> None:
    ids, body = exported_ids(tmp_path, job_stats([printed for printed, _ in IDS]))
    assert sorted(ids) == sorted(expected for _, expected in IDS)
    if PROMTOOL:
        check = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr


def test_raw_invalid_utf8_bytes_in_the_text_stay_visible(tmp_path: Path) -> None:
    # Hostile bytes straight in the file (no Lustre escaping): shown as \xHH, never merged.
    text = job_stats(["rawA", "rawB"]).encode()
    text = text.replace(b"rawA", b"raw\xff").replace(b"rawB", b"raw\xfe")
    ids, _ = exported_ids(tmp_path, text)
    assert sorted(ids) == ["raw\\xfe", "raw\\xff"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")
@given(raw=st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=6, unique=True))
def test_any_escaped_id_gives_distinct_valid_labels(tmp_path_factory, raw: list[bytes]) -> None:
    """Any bytes, escaped as Lustre 2.15.2+ does: one label per distinct id, UTF-8 ids
    decoded exactly, and output promtool accepts."""
    printed = ['"' + "".join(f"\\x{b:02x}" for b in data) + '"' for data in raw]
    ids, body = exported_ids(tmp_path_factory.mktemp("ids"), job_stats(printed))
    expected = []
    for data, shown in zip(raw, printed, strict=True):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = shown[1:-1]
        expected.append(text)  # escaped bytes are the id as they are, blanks included
    assert sorted(ids) == sorted(set(expected))
    assert PROMTOOL is not None  # the test is skipped without it
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
