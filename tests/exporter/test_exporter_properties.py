"""Property tests (hypothesis) for what reads user input at start: the web config loader, the
GEOPM signal requests, the CLI value types, JobIdPattern. Any input gives a value or one
clear error of the documented type, never another exception."""

from __future__ import annotations

import argparse
import re
import string
from pathlib import Path

import bcrypt
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpcmon.common.config import ConfigError
from hpcmon.common.jobid import JobIdPattern
from hpcmon.exporter.collector import bytes_flag, count_flag, seconds_flag
from hpcmon.exporter.geopm.model import Request
from hpcmon.exporter.geopm.requests import DOMAINS, RequestError, parse_request_lines
from hpcmon.exporter.jobstats.collector import RATE_KINDS, rate_kinds
from hpcmon.exporter.web import (
    accepts_gzip,
    listen_address_flag,
    load_web_config,
    parse_listen_address,
    scrape_timeout,
)

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()

# ---------------------------------------------------------------- web config loader
KEYS = [
    "tls_server_config",
    "basic_auth_users",
    "http_server_config",
    "cert_file",
    "key_file",
    "min_version",
    "max_version",
    "client_auth_type",
    "client_ca_file",
    "headers",
    "http2",
    "cipher_suites",
    "prometheus",
    "TLS12",
    "TLS99",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([*KEYS, HASH, "", "x: y", "NoClientCert"]),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(document=documents)
@example(document={"\n": None})  # an unknown key quoted as it was: the message took 2 lines
def test_web_config_loader_gives_a_config_or_one_config_error(tmp_path_factory, document) -> None:
    path = tmp_path_factory.mktemp("web") / "web.yml"
    path.write_text(yaml.safe_dump(document))
    try:
        config = load_web_config(str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    # Accepted: only known settings, and every user has a real bcrypt hash.
    assert isinstance(document, dict | type(None))
    assert set(document or {}) <= {"tls_server_config", "basic_auth_users", "http_server_config"}
    assert all(hashed.startswith(b"$2") for hashed in config.users.values())


@given(data=st.binary(max_size=64))
def test_web_config_loader_takes_any_bytes(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("web") / "web.yml"
    path.write_bytes(data)
    try:
        load_web_config(str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc)


# ---------------------------------------------------------------- GEOPM signal requests
requests = st.builds(
    Request,
    st.from_regex(r"[A-Z][A-Z0-9_:]{0,20}", fullmatch=True),
    st.sampled_from(DOMAINS),
    st.one_of(st.none(), st.integers(0, 10_000)),
)


@given(wanted=st.lists(requests, max_size=8), comments=st.booleans())
def test_signal_requests_round_trip(wanted: list[Request], comments: bool) -> None:
    lines = [request.line() + ("  # why" if comments else "") for request in wanted]
    if comments:
        lines.insert(0, "# a comment line")
        lines.append("")
    assert parse_request_lines(lines, "test") == wanted


@given(lines=st.lists(st.text(max_size=30), max_size=5))
def test_signal_requests_take_any_text(lines: list[str]) -> None:
    try:
        found = parse_request_lines(lines, "test")
    except RequestError as exc:
        assert str(exc).startswith("test:")
        return
    for request in found:
        assert request.domain in DOMAINS and (request.index is None or request.index >= 0)


# ---------------------------------------------------------------- CLI value types
def _type_error_or_value(kind, text: str):
    try:
        return kind(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc)
        return None


@given(text=st.text(max_size=20))
def test_cli_value_types_take_any_text(text: str) -> None:
    for kind in (
        seconds_flag(0, 1e6, high_included=False),
        count_flag,
        bytes_flag,
        rate_kinds,
        listen_address_flag,
    ):
        _type_error_or_value(kind, text)


@given(low=st.floats(0, 100), high=st.floats(100, 1e6), value=st.floats(allow_nan=True))
def test_seconds_flag_keeps_its_bounds(low: float, high: float, value: float) -> None:
    got = _type_error_or_value(seconds_flag(low, high, high_included=False), repr(value))
    if got is None:
        assert not (low <= value < high)
    else:
        assert got == value and low <= got < high


@given(number=st.integers(1, 2**40), unit=st.sampled_from(["", "K", "M", "G", "KiB", "mib", "GB"]))
def test_bytes_flag_units(number: int, unit: str) -> None:
    power = {"": 0, "k": 10, "m": 20, "g": 30}[unit[:1].lower()]
    assert bytes_flag(f"{number}{unit}") == number << power


@given(number=st.integers())
def test_count_flag(number: int) -> None:
    got = _type_error_or_value(count_flag, str(number))
    assert got == (number if number >= 0 else None)


@given(kinds=st.sets(st.sampled_from(RATE_KINDS), min_size=1))
def test_rate_kinds(kinds: set[str]) -> None:
    assert rate_kinds(",".join(sorted(kinds))) == frozenset(kinds)
    assert rate_kinds("all") == frozenset(RATE_KINDS) and rate_kinds("none") == frozenset()


@given(
    host=st.one_of(
        st.just(""), st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True), st.just("[::1]")
    ),
    port=st.integers(0, 200_000),
)
def test_listen_address(host: str, port: int) -> None:
    text = f"{host}:{port}"
    got = _type_error_or_value(listen_address_flag, text)
    if port > 65535:
        assert got is None
    else:
        assert got == text and parse_listen_address(text) == (host.strip("[]"), port)


@given(header=st.text(max_size=40))
def test_accept_encoding_and_timeout_headers_take_any_text(header: str) -> None:
    assert accepts_gzip(header) in (True, False)
    seconds = scrape_timeout(header)
    assert seconds is None or 0.1 <= seconds <= 3600


@given(quality=st.floats(0, 1), other=st.sampled_from(["", "br, ", "*;q=0, "]))
def test_accept_encoding_quality(quality: float, other: str) -> None:
    assert accepts_gzip(f"{other}gzip;q={quality}") == (quality > 0)


# ---------------------------------------------------------------- JobIdPattern
names = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=3, unique=True
)


@given(
    names=names,
    parts=st.lists(
        st.text(string.ascii_letters + string.digits + ".", min_size=1, max_size=6),
        min_size=3,
        max_size=3,
    ),
)
def test_jobid_pattern_groups_become_labels(names: list[str], parts: list[str]) -> None:
    pattern = JobIdPattern(":".join(f"(?P<{name}>[^:]*)" for name in names))
    assert pattern.names == tuple(names)
    jobid = ":".join(parts[: len(names)])
    assert pattern.labels(jobid) == tuple(parts[: len(names)])
    assert pattern.labels(jobid) == pattern.labels(jobid)  # cached, same answer
    assert pattern.labels(jobid + ":extra") == ("",) * len(names) or len(names) == 1


@given(
    jobid=st.text(max_size=40),
    regex=st.sampled_from([r"(?P<a>\d+)", r"(?P<a>.*)\.(?P<b>\d+)", r"(?P<x>[^:]*):(?P<y>.*)"]),
)
def test_jobid_pattern_any_id(jobid: str, regex: str) -> None:
    pattern = JobIdPattern(regex)
    labels = pattern.labels(jobid)
    assert len(labels) == len(pattern.names)
    match = re.fullmatch(regex, jobid)
    if match is None:
        assert labels == ("",) * len(pattern.names)
    else:
        assert labels == tuple(match.group(name) or "" for name in pattern.names)


def test_no_pattern_gives_no_labels(tmp_path: Path) -> None:
    assert JobIdPattern(None).labels("anything") == () and JobIdPattern(None).names == ()
