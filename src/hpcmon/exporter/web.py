"""HTTP(S) server for /metrics with the Prometheus exporter-toolkit web configuration file.

Supports ``tls_server_config`` (cert_file, key_file, client_auth_type, client_ca_file,
min_version, max_version, prefer_server_cipher_suites), ``basic_auth_users`` (bcrypt hashes)
and ``http_server_config.headers``; any other setting is refused at start, so a typo or an
unsupported option never silently weakens the server. The exposition is gzipped when the
client accepts it (Prometheus always does), from data compressed once per sample.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import logging
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt

from hpcmon.common.config import ConfigError, load_yaml_mapping, shown_key
from hpcmon.exporter.exposition import Part, gzip_parts, plain_chunks, plain_length

log = logging.getLogger("hpcmon.exporter.web")

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
LISTEN_BACKLOG = 128  # as Go's net/http servers (somaxconn); socketserver's default is 5
AUTH_CACHE_LIMIT = 1024
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"

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
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
}
# exporter-toolkit settings this server cannot honour: refused rather than ignored.
_TLS_UNSUPPORTED = {"cipher_suites", "curve_preferences", "client_allowed_sans"}
_HTTP_KEYS = {"headers", "http2"}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    _dummy_hash: bytes = b""
    _verified: set[bytes] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_auth(self, header: str | None) -> bool:
        """Basic auth against bcrypt hashes, as exporter-toolkit does it: an unknown user
        costs one bcrypt check like a wrong password (no user enumeration by timing), and a
        successful check is cached (a flood of good requests does not burn the CPU)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        known = hashed is not None
        hashed = hashed if known else self._dummy()
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed))).digest()
        with self._lock:
            if key in self._verified:
                return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            ok = False
        if ok and known:
            with self._lock:
                if len(self._verified) >= AUTH_CACHE_LIMIT:
                    self._verified.clear()
                self._verified.add(key)
        return ok and known

    def _dummy(self) -> bytes:
        """A hash of the users' highest cost, checked for unknown users."""
        if not self._dummy_hash:
            rounds = max(_bcrypt_cost(hashed) for hashed in self.users.values())
            self._dummy_hash = bcrypt.hashpw(b"unknown user", bcrypt.gensalt(rounds=rounds))
        return self._dummy_hash


_BCRYPT = re.compile(rb"\$2[abxy]?\$(\d\d)\$[./A-Za-z0-9]{53}")


def _bcrypt_cost(hashed: bytes) -> int:
    match = _BCRYPT.fullmatch(hashed)
    return min(max(int(match.group(1)), 4), 31) if match else 10


def _mapping(value: Any, where: str, known: set[str], path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where} must be a mapping")
    unknown = sorted(shown_key(key) for key in value if key not in known)
    if unknown:
        raise ConfigError(
            f"{path}: {where}: unknown setting(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    return value


def _choice(value: Any, where: str, choices: dict[str, Any], path: str) -> Any:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{path}: {where} {value!r} is not one of {', '.join(choices)}")
    return choices[value]


def _tls_context(tls: dict[str, Any], base: Path, path: str) -> ssl.SSLContext:
    unsupported = sorted(_TLS_UNSUPPORTED & set(tls))
    if unsupported:
        raise ConfigError(
            f"{path}: tls_server_config: {', '.join(unsupported)} not supported by this exporter"
        )
    tls = _mapping(tls, "tls_server_config", _TLS_KEYS, path)
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not isinstance(cert, str) or not isinstance(key, str) or not cert or not key:
        raise ConfigError(f"{path}: tls_server_config needs cert_file and key_file")
    # Every value is checked before any file is read: the first error is about the setting.
    minimum = _choice(
        tls.get("min_version", "TLS12"), "tls_server_config.min_version", _TLS_VERSIONS, path
    )
    maximum = None
    if "max_version" in tls:
        maximum = _choice(tls["max_version"], "tls_server_config.max_version", _TLS_VERSIONS, path)
        if maximum < minimum:
            raise ConfigError(f"{path}: tls_server_config: max_version is below min_version")
    verify_mode = _choice(
        tls.get("client_auth_type", "NoClientCert"),
        "tls_server_config.client_auth_type",
        _CLIENT_AUTH,
        path,
    )
    prefer = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise ConfigError(f"{path}: tls_server_config.prefer_server_cipher_suites must be a bool")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # Relative paths are relative to the config file, as in exporter-toolkit;
    # symlinks (certbot's live/ directory) are followed by the ssl module.
    try:
        ctx.load_cert_chain(str(base / cert), str(base / key))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot load cert_file/key_file: {exc}") from None
    ctx.minimum_version = minimum
    if maximum is not None:
        ctx.maximum_version = maximum
    ctx.verify_mode = verify_mode
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    ca = tls.get("client_ca_file")
    if ca:
        try:
            ctx.load_verify_locations(str(base / str(ca)))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot load client_ca_file: {exc}") from None
    elif tls.get("client_auth_type") == "RequireAndVerifyClientCert":
        raise ConfigError(f"{path}: RequireAndVerifyClientCert needs client_ca_file")
    return ctx


def load_web_config(path: str | None) -> WebConfig:
    """The web config file, every setting checked; raises ConfigError with one clear line."""
    if not path:
        return WebConfig()
    try:
        data = load_yaml_mapping(path)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except ConfigError as exc:  # YAML's messages span lines: one line on the terminal
        raise ConfigError(" ".join(str(exc).split())) from None
    data = _mapping(data, "top level", _TOP_KEYS, path)
    config = WebConfig()
    tls = data.get("tls_server_config")
    if tls:
        if not isinstance(tls, dict):
            raise ConfigError(f"{path}: tls_server_config must be a mapping")
        config.ssl_context = _tls_context(tls, Path(path).parent, path)
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise ConfigError(f"{path}: basic_auth_users must be a mapping of user: bcrypt-hash")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed.encode()):
            raise ConfigError(f"{path}: basic_auth_users.{user} is not a bcrypt hash")
        config.users[str(user)] = hashed.encode()
    http_cfg = _mapping(data.get("http_server_config"), "http_server_config", _HTTP_KEYS, path)
    headers = http_cfg.get("headers") or {}
    if not isinstance(headers, dict):
        raise ConfigError(f"{path}: http_server_config.headers must be a mapping")
    for name, value in headers.items():
        text = f"{name}: {value}"
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", str(name)) or re.search(
            r"[\r\n]", text
        ):
            raise ConfigError(f"{path}: http_server_config.headers: invalid header {text!r}")
    config.headers = {str(k): str(v) for k, v in headers.items()}
    if "http2" in http_cfg and not isinstance(http_cfg["http2"], bool):
        raise ConfigError(f"{path}: http_server_config.http2 must be a bool")
    if config.users:
        config._dummy()  # pay for the dummy hash at start, not on the first request
    return config


def parse_listen_address(address: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``, port 0-65535."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"invalid listen address {address!r}, expected host:port (port 0-65535)")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"invalid listen address {address!r}: unbalanced brackets")
    return host.strip("[]"), int(port)


def listen_address_flag(text: str) -> str:
    """A flag type for --web.listen-address."""
    try:
        parse_listen_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def accepts_gzip(header: str | None) -> bool:
    """Whether an Accept-Encoding header allows gzip (``gzip`` or ``*`` with q > 0)."""
    if not header:
        return False
    allowed: dict[str, bool] = {}
    for item in header.split(","):
        name, *params = (word.strip() for word in item.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        allowed[name.lower()] = quality > 0
    return allowed.get("gzip", allowed.get("*", False))


def scrape_timeout(header: str | None) -> float | None:
    """The scraper's timeout from Prometheus' header, when it is a sane number of seconds."""
    try:
        seconds = float(header) if header else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0.1 <= seconds <= 3600 else None


class _Throttled:
    """One log line per ``every`` seconds at most, saying how many were held back."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._last = float("-inf")
        self._held = 0
        self._lock = threading.Lock()

    def warn(self, message: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.every:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        more = f" ({held} more since the last such line)" if held else ""
        log.warning("%s%s", message, more)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    ssl_context: ssl.SSLContext | None = None
    connection_errors = _Throttled()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        if self.ssl_context is not None:
            # Handshake happens in the request thread, so a slow client cannot block accept().
            sock = self.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        return sock, addr

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """One rate-limited line instead of socketserver's traceback per connection."""
        exc = sys.exc_info()[1]
        what = "TLS handshake failed" if isinstance(exc, ssl.SSLError) else "connection failed"
        self.connection_errors.warn(f"{what} from {client_address[0]}: {exc}")


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(
    address: str,
    telemetry_path: str,
    render: Callable[..., bytes | Sequence[Part]],
    web_config: WebConfig,
    landing_html: str,
) -> ThreadingHTTPServer:
    """``render(scrape_timeout)`` gives the exposition as parts (bytes or Compressed), or as
    one bytes."""
    host, port = parse_listen_address(address)

    class Handler(BaseHTTPRequestHandler):
        server_version = "hpcmon-exporter"
        timeout = 30

        def version_string(self) -> str:
            return self.server_version  # never the Python version

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
            body: bytes | Sequence[Part],
            ctype: str,
            extra: dict[str, str] | None = None,
        ) -> None:
            # A large exposition arrives in parts and is written as such, never joined: on a
            # big OSS it is hundreds of MB and a join would double the exporter's memory.
            parts = [body] if isinstance(body, bytes) else list(body)
            headers = {**web_config.headers, **(extra or {})}
            if code == 200 and ctype == CONTENT_TYPE_TEXT:
                headers["Vary"] = "Accept-Encoding"
                if accepts_gzip(self.headers.get("Accept-Encoding")):
                    parts = gzip_parts(parts)
                    headers["Content-Encoding"] = "gzip"
            length = plain_length(parts)
            log.debug(
                "%s %s -> %d, %d bytes, %s (%s)",
                self.client_address[0],
                self.path,
                code,
                length,
                headers.get("Content-Encoding", "identity"),
                self.headers.get("User-Agent", "no user agent"),
            )
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(length))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                for chunk in plain_chunks(parts):
                    self.wfile.write(chunk)

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
                    body = render(scrape_timeout(self.headers.get(TIMEOUT_HEADER)))
                except Exception as exc:  # noqa: BLE001 - an answer, never a traceback
                    log.error("rendering metrics failed: %r", exc)
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
