"""Issue 13, parts 3 and 4: the HTTP side under load and on a hostile network.

gzip, listen backlog, the Server header, constant-cost basic auth with its cache, TLS
handshake failures and TLS settings; a real server on loopback throughout.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import logging
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt
import pytest

from hpcmon.common.config import ConfigError
from hpcmon.exporter.exposition import Compressed
from hpcmon.exporter.web import LISTEN_BACKLOG, WebConfig, load_web_config, make_server
from tests.exporter.test_exporter_web import BODY, _serve, certificate  # noqa: F401 - fixture
from tests.servers import free_port

BIG = b"".join(
    b'lustre_job_write_bytes_total{component="ost",target="fs-OST0000",jobid="%d"} %d\n'
    % (n, n * 4096)
    for n in range(20_000)
)


def _parts(timeout: float | None = None) -> list:
    return [Compressed.of(BIG, keep_raw_bytes=0), BODY]  # the big part kept compressed only


def _request(base: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_gzip_when_accepted_and_plain_otherwise() -> None:
    for base in _serve(WebConfig(), render=_parts):
        status, headers, body = _request(base, {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert int(headers["Content-Length"]) == len(body) < len(BIG) // 10
        assert gzip.decompress(body) == BIG + BODY
        for refused in ({}, {"Accept-Encoding": "gzip;q=0"}, {"Accept-Encoding": "br"}):
            status, headers, body = _request(base, refused)
            assert status == 200 and "Content-Encoding" not in headers
            assert body == BIG + BODY and int(headers["Content-Length"]) == len(body)
        status, headers, body = _request(base, {"Accept-Encoding": "deflate, gzip;q=0.5"})
        assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == BIG + BODY
        assert headers["Vary"] == "Accept-Encoding"


def test_no_python_version_in_the_server_header() -> None:
    for base in _serve(WebConfig()):
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            server = response.headers["Server"]
    assert server == "hpcmon-exporter"


def test_listen_backlog_takes_a_burst_of_connections() -> None:
    """Connections queue while no request is accepted: more than socketserver's 5."""
    port = free_port()
    server = make_server(f"127.0.0.1:{port}", "/metrics", lambda t=None: BODY, WebConfig(), "")
    sockets = []
    try:  # serve_forever not started: every connection waits in the backlog
        for _ in range(100):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    finally:
        for sock in sockets:
            sock.close()
        server.server_close()
    assert len(sockets) == 100 and LISTEN_BACKLOG >= 128


def test_concurrent_scrapes_all_answered() -> None:
    for base in _serve(WebConfig(), render=_parts):
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(_request, [base] * 20, [{"Accept-Encoding": "gzip"}] * 20))
    assert len(answers) == 20
    assert all(gzip.decompress(body) == BIG + BODY for _, _, body in answers)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_unknown_user_costs_a_bcrypt_check_like_a_wrong_password(monkeypatch) -> None:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=5))
    config = WebConfig(users={"prometheus": hashed})
    checks: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, against: bytes) -> bool:
        checks.append(against)
        return real(password, against)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    assert not config.check_auth(_basic("nobody", "right"))
    assert not config.check_auth(_basic("prometheus", "wrong"))
    assert len(checks) == 2
    assert checks[0] != hashed and checks[0][:7] == hashed[:7] == b"$2b$05$"  # same cost
    # Success is cached: the next good request costs no bcrypt check; a bad one still does.
    assert config.check_auth(_basic("prometheus", "right"))
    assert config.check_auth(_basic("prometheus", "right"))
    assert not config.check_auth(_basic("prometheus", "wrong"))
    assert len(checks) == 4
    # An unknown user never gets in, not even with the dummy hash's own password.
    assert not config.check_auth(_basic("nobody", "unknown user"))


def test_failed_tls_handshakes_give_one_line_no_traceback(
    tmp_path: Path,
    certificate,  # noqa: F811
    caplog,
    capfd,
) -> None:
    cert, key = certificate
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    with caplog.at_level(logging.DEBUG, logger="hpcmon.exporter.web"):
        for base in _serve(load_web_config(str(web))):
            port = int(base.rsplit(":", 1)[1])
            for _ in range(5):  # plain HTTP against the TLS port
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                    sock.recv(100)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "TLS handshake failed" in warnings[0].getMessage()
    assert warnings[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("tls_extra", "message"),
    [
        ("  min_version: TLS99\n", "min_version 'TLS99' is not one of"),
        ("  max_version: TLS12\n  min_version: TLS13\n", "below min_version"),
        ("  min_verison: TLS12\n", "unknown setting"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "not supported"),
        ("  client_auth_type: Maybe\n", "client_auth_type 'Maybe'"),
        ("  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ],
)
def test_unknown_or_unsupported_tls_settings_are_refused(
    tmp_path: Path,
    certificate,  # noqa: F811
    tls_extra: str,
    message: str,
) -> None:
    cert, key = certificate
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n{tls_extra}")
    with pytest.raises(ConfigError, match=message):
        load_web_config(str(web))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tls_config: {}\n", "unknown setting"),
        ("http_server_config:\n  headers:\n    'Bad Header': x\n", "invalid header"),
        ("http_server_config:\n  header: {}\n", "unknown setting"),
        ("basic_auth_users: [a]\n", "mapping"),
    ],
)
def test_web_config_typos_are_refused(tmp_path: Path, text: str, message: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_web_config(str(web))
