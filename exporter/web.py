"""HTTP(S) server for /metrics with the Prometheus exporter-toolkit web configuration file.

Supports ``tls_server_config`` (cert_file, key_file, client_auth_type, client_ca_file,
min_version), ``basic_auth_users`` (bcrypt hashes) and ``http_server_config.headers``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt

from hpcmon.config import ConfigError, load_yaml_mapping

log = logging.getLogger("hpcmon.exporter.web")

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    _verified: dict[str, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_auth(self, header: str | None) -> bool:
        """Basic auth against bcrypt hashes; a verified password is cached (bcrypt is slow)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        digest = hashlib.sha256(header.encode()).digest()
        with self._lock:
            cached = self._verified.get(user)
        if cached is not None and hmac.compare_digest(cached, digest):
            return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if ok:
            with self._lock:
                self._verified[user] = digest
        return ok


def load_web_config(path: str | None) -> WebConfig:
    if not path:
        return WebConfig()
    data = load_yaml_mapping(path)
    base = Path(path).parent
    config = WebConfig()
    tls = data.get("tls_server_config") or {}
    if tls:
        cert, key = tls.get("cert_file"), tls.get("key_file")
        if not cert or not key:
            raise ConfigError(f"{path}: tls_server_config needs cert_file and key_file")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # Relative paths are relative to the config file, as in exporter-toolkit;
        # symlinks (certbot's live/ directory) are followed by the ssl module.
        ctx.load_cert_chain(str(base / cert), str(base / key))
        ctx.minimum_version = _TLS_VERSIONS.get(
            str(tls.get("min_version", "TLS12")), ssl.TLSVersion.TLSv1_2
        )
        auth_type = tls.get("client_auth_type", "NoClientCert")
        if auth_type not in _CLIENT_AUTH:
            raise ConfigError(f"{path}: unknown client_auth_type {auth_type!r}")
        ctx.verify_mode = _CLIENT_AUTH[auth_type]
        if tls.get("client_ca_file"):
            ctx.load_verify_locations(str(base / tls["client_ca_file"]))
        config.ssl_context = ctx
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise ConfigError(f"{path}: basic_auth_users must be a mapping of user: bcrypt-hash")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            raise ConfigError(f"{path}: basic_auth_users.{user} is not a bcrypt hash")
        config.users[str(user)] = hashed.encode()
    http_cfg = data.get("http_server_config") or {}
    config.headers = {str(k): str(v) for k, v in (http_cfg.get("headers") or {}).items()}
    return config


def parse_listen_address(address: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid listen address {address!r}, expected host:port")
    host = host.strip("[]")
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def get_request(self):  # type: ignore[override]
        sock, addr = super().get_request()
        if self.ssl_context is not None:
            # Handshake happens in the request thread, so a slow client cannot block accept().
            sock = self.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        return sock, addr


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(
    address: str,
    telemetry_path: str,
    render: Callable[[], Sequence[bytes]],
    web_config: WebConfig,
    landing_html: str,
) -> ThreadingHTTPServer:
    host, port = parse_listen_address(address)

    class Handler(BaseHTTPRequestHandler):
        server_version = "hpcmon-exporter"
        timeout = 30

        def setup(self) -> None:
            super().setup()
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()

        def handle(self) -> None:
            try:
                super().handle()
            except (ssl.SSLError, ConnectionError, TimeoutError) as exc:
                log.debug("connection from %s closed: %s", self.client_address, exc)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            log.debug("%s " + format, self.client_address[0], *args)

        def _send(
            self,
            code: int,
            body: bytes | Sequence[bytes],
            ctype: str,
            extra: dict[str, str] | None = None,
        ) -> None:
            # A large exposition arrives in parts and is written as such, never joined: on a
            # big OSS it is hundreds of MB and a join would double the exporter's memory.
            parts = [body] if isinstance(body, bytes) else body
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(sum(map(len, parts))))
            for key, value in {**web_config.headers, **(extra or {})}.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.writelines(parts)

        def do_GET(self) -> None:  # noqa: N802
            if not web_config.check_auth(self.headers.get("Authorization")):
                self._send(
                    401,
                    b"Unauthorized\n",
                    "text/plain; charset=utf-8",
                    {"WWW-Authenticate": 'Basic realm="hpcmon-exporter"'},
                )
                return
            path = self.path.split("?", 1)[0]
            if path == telemetry_path:
                try:
                    body = render()
                except Exception:  # noqa: BLE001 - a scrape must get an answer, never a traceback
                    log.exception("rendering metrics failed")
                    self._send(500, b"error rendering metrics\n", "text/plain; charset=utf-8")
                    return
                self._send(200, body, CONTENT_TYPE_TEXT)
            elif path == "/":
                self._send(200, landing_html.encode(), "text/html; charset=utf-8")
            elif path in ("/-/healthy", "/-/ready"):
                self._send(200, b"OK\n", "text/plain; charset=utf-8")
            else:
                self._send(404, b"Not Found\n", "text/plain; charset=utf-8")

        do_HEAD = do_GET

    server_class = _Server6 if ":" in host else _Server
    server = server_class((host, port), Handler)
    server.ssl_context = web_config.ssl_context
    return server
