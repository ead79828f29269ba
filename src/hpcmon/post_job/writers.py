"""Where post-job points go: a line-protocol file, InfluxDB 1.x ``/write``, InfluxDB 2.x/3.x API.

Server writers only *send* one chunk of lines and classify failures; ``deliver`` does the
batching policy shared by both APIs: a chunk the server calls bad (HTTP 400/422) is bisected so
only the bad lines end up rejected, and a server that is down or refuses us (5xx, connection
errors, auth, unknown database) stops the delivery so the rest can be spooled and replayed.
Bisection may re-send good lines of a partially written chunk (InfluxDB 1.x writes the good
lines of a 400 "partial write"); identical (measurement, tags, time) points overwrite
themselves, so this never creates duplicates. When InfluxDB 1.x says it wrote none of the
chunk (every line dropped or unparsable), the whole chunk is rejected at once: a measurement
whose field type changed costs one request, not 2n - 1.

A store that refuses for capacity (InfluxDB 1.x ``max-series-per-database`` or
``max-values-per-tag``, InfluxDB Cloud's series cardinality quota, InfluxDB 3's table and
column limits) is not sent bad data: ``CapacityError`` stops the delivery like an outage, so
the lines stay in the spool until the limit is raised, and its message names the setting.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hpcmon.post_job.files import replaced_atomically
from hpcmon.post_job.options import option
from hpcmon.post_job.points import encodable

DEFAULT_BATCH_SIZE: int = option("writers", "batch_size").default
DEFAULT_TIMEOUT_SECONDS: float = option("writers", "request_timeout_seconds").default
# Statuses that mean "this data is bad": bisect to find the lines at fault.
_BAD_DATA_STATUSES = {400, 422}
_TOO_LARGE_STATUS = 413
_DROPPED = re.compile(r"dropped=(\d+)\s*$")


class RejectedError(Exception):
    """The server refused the data itself (bad line, field type conflict): do not retry as is.

    ``every_line``: the server said it wrote none of the lines, so bisecting cannot save any.
    """

    def __init__(self, message: str, every_line: bool = False) -> None:
        super().__init__(message)
        self.every_line = every_line


class UnavailableError(Exception):
    """The server cannot take data now (down, 5xx, auth, missing database): spool and retry."""


class CapacityError(UnavailableError):
    """The store refuses new series (a series, tag-value or schema limit): the data is good.
    Keep it for ``flush``; the message says which limit and which setting raises it."""


# Capacity refusals, by the text each store answers (checked on InfluxDB 1.6.7 with a small
# limit: 400 {"error":"partial write: max-series-per-database limit exceeded: (5) dropped=6"}),
# and what raises the limit.
_CAPACITY = (
    (
        "max-series-per-database limit exceeded",
        "raise max-series-per-database in the [data] section of influxdb.conf (0 = no limit) "
        'or use index-version = "tsi1", and restart InfluxDB',
    ),
    (
        "max-values-per-tag limit exceeded",
        "raise max-values-per-tag in the [data] section of influxdb.conf (0 = no limit) "
        'or use index-version = "tsi1", and restart InfluxDB',
    ),
    (
        "series cardinality exceeds",
        "raise the organization's series cardinality quota (InfluxDB Cloud: the plan's quota)",
    ),
    ("service limit reached", "raise the InfluxDB 3 table/column limit (InfluxData support)"),
)


def capacity_problem(message: str) -> str | None:
    """'the store's series limit was reached (...); <what raises it>' when ``message`` (the
    server's answer, or a reason filed by an earlier release) is a capacity refusal."""
    lowered = message.lower()
    for text, remedy in _CAPACITY:
        if text in lowered:
            said = _short(_server_error(message), 160)
            return f"the store's series limit was reached ({said}); {remedy}"
    return None


# InfluxDB 1.x (measured on 1.6.7) and 2.x answer this for points older than the retention
# policy (bucket retention) keeps: 400 {"error":"partial write: points beyond retention policy
# dropped=N"}. Bad data for that policy for ever: rejected, never retried, with a readable cause.
_BEYOND_RETENTION = "points beyond retention policy"


def retention_refusal(message: str, policy: str) -> str:
    """``message`` explained when the server refused the points as older than ``policy``
    (e.g. 'retention policy "jobs" of database hpcmon') keeps, else ``message`` itself."""
    if _BEYOND_RETENTION not in message:
        return message
    said = _short(_server_error(message), 120)
    return (
        f"{policy} keeps no points this old ({said}): they can never be written there; "
        "write them with a retention policy whose duration reaches back to them"
    )


def _server_error(body: str) -> str:
    """The ``error`` (1.x) or ``message`` (2.x) of a JSON error body, else the body."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    said = answer.get("error") or answer.get("message") if isinstance(answer, dict) else None
    return said if isinstance(said, str) else body


class TooLargeError(Exception):
    """The request body was too large: split and send again."""


class ServerWriter(Protocol):
    kind: str  # spool sub-directory: one per API, so a replay goes to the same kind of server

    def describe(self) -> str: ...

    def send(self, lines: Sequence[str], timeout: float) -> None:
        """Send the lines as one request; raise RejectedError / UnavailableError / TooLargeError."""

    def close(self) -> None: ...


class Deadline:
    """Wall-clock budget shared by every step of one run (the epilog's total time limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0.0

    def timeout(self, wanted: float) -> float:
        """A request timeout that never goes past the deadline (at least 0.1 s)."""
        remaining = self.remaining()
        return wanted if remaining is None else max(0.1, min(wanted, remaining))


@dataclass
class Delivery:
    """Outcome of delivering lines to one server."""

    written: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (line, server's reason)
    pending: list[str] = field(default_factory=list)  # not acknowledged: to spool
    unavailable_reason: str | None = None
    capacity: bool = False  # the store refused for a series limit (see CapacityError)


def deliver(
    writer: ServerWriter,
    lines: Sequence[str],
    deadline: Deadline,
    request_timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Delivery:
    """Send ``lines`` as one request, bisecting on rejection; stop at the first outage."""
    result = Delivery()
    stack: list[Sequence[str]] = [lines] if lines else []
    while stack:
        chunk = stack.pop()
        if deadline.expired():
            result.unavailable_reason = "time limit reached"
            _keep_pending(result, chunk, stack)
            break
        try:
            try:
                writer.send(chunk, deadline.timeout(request_timeout))
            except (RejectedError, TooLargeError, UnavailableError):
                raise
            except Exception as exc:  # a writer's bug or an answer no branch foresaw: not
                # an acknowledgement, and not the data's fault (the type only: no input quoted)
                raise UnavailableError(f"unexpected failure ({type(exc).__name__})") from exc
            result.written += len(chunk)
        except (RejectedError, TooLargeError) as exc:
            if len(chunk) == 1 or (isinstance(exc, RejectedError) and exc.every_line):
                result.rejected.extend((line, str(exc)) for line in chunk)
            else:
                middle = len(chunk) // 2
                stack.append(chunk[middle:])
                stack.append(chunk[:middle])
        except UnavailableError as exc:
            result.unavailable_reason = str(exc)
            result.capacity = isinstance(exc, CapacityError)
            _keep_pending(result, chunk, stack)
            break
    return result


def _keep_pending(result: Delivery, chunk: Sequence[str], stack: list[Sequence[str]]) -> None:
    result.pending.extend(chunk)
    for rest in reversed(stack):
        result.pending.extend(rest)
    stack.clear()


def _join(lines: Sequence[str]) -> bytes:
    text = "\n".join(lines) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lines spooled before Point.to_line made every line encodable
        return encodable(text).encode("utf-8")


def _short(body: bytes | str, limit: int = 300) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _raise_for_status(status: int, message: str, every_line: bool = False) -> None:
    capacity = capacity_problem(message) if status in (400, 422, 429, 503) else None
    if capacity is not None:
        raise CapacityError(f"HTTP {status}: {capacity}")
    if status in _BAD_DATA_STATUSES:
        raise RejectedError(f"HTTP {status}: {message}", every_line)
    if status == _TOO_LARGE_STATUS:
        raise TooLargeError(f"HTTP {status}: {message}")
    raise UnavailableError(f"HTTP {status}: {message}")


def _v1_refused_every_line(body: bytes, count: int) -> bool:
    """Whether InfluxDB 1.x's 400 says it wrote none of ``count`` lines: ``partial write: ...
    dropped=N`` with N == count, or a bare ``unable to parse ...`` (sent only when no line
    parsed; when some did, it writes them and prefixes ``partial write:``)."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(error, str):
        return False
    if error.startswith("partial write:"):
        dropped = _DROPPED.search(error)
        return dropped is not None and int(dropped.group(1)) == count
    return error.startswith("unable to parse")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None  # urllib raises the 3xx as an HTTPError


_NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)


class InfluxV1Writer:
    """InfluxDB 1.x ``POST /write?db=&rp=&precision=ns`` (basic auth: INFLUX_USERNAME/PASSWORD)."""

    kind = "influx-v1"

    def __init__(
        self,
        url: str,
        database: str,
        retention_policy: str | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        params = {"db": database, "precision": "ns"}
        if retention_policy:
            params["rp"] = retention_policy
        self.url = url.rstrip("/") + "/write?" + urllib.parse.urlencode(params)
        self.database = database
        self.policy = (
            f'retention policy "{retention_policy}" of database {database}'
            if retention_policy
            else f"the default retention policy of database {database}"
        )
        self.headers = {"Content-Type": "text/plain; charset=utf-8"}
        if username:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    def describe(self) -> str:
        return f"InfluxDB 1.x {self.url.split('?')[0]} db={self.database}"

    def send(self, lines: Sequence[str], timeout: float) -> None:
        request = urllib.request.Request(
            self.url, data=_join(lines), headers=self.headers, method="POST"
        )
        try:
            with _NO_REDIRECTS.open(request, timeout=timeout) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:  # followed, the write would become a GET without body
                where = exc.headers.get("Location", "?") if exc.headers else "?"
                raise UnavailableError(
                    f"HTTP {exc.code}: redirected to {_short(where)}: give the InfluxDB URL itself"
                ) from exc
            try:
                body = exc.read()
            except (OSError, http.client.HTTPException):  # cut short: the status says enough
                body = b""
            every_line = exc.code == 400 and _v1_refused_every_line(body, len(lines))
            _raise_for_status(exc.code, retention_refusal(_short(body), self.policy), every_line)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            # HTTPException: something that is not an HTTP server answered (BadStatusLine...)
            reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {_short(str(exc))}"
            raise UnavailableError(f"cannot reach {self.url.split('?')[0]}: {reason}") from exc
        if status != 204:  # what InfluxDB answers a write it took; a proxy's page is no ack
            raise UnavailableError(
                f"HTTP {status} from {self.url.split('?')[0]}: not InfluxDB's answer to a write"
                " (204 No Content)"
            )

    def close(self) -> None:
        pass


class InfluxV2Writer:
    """InfluxDB 2.x/3.x write API through influxdb-client, synchronous so every error is seen."""

    kind = "influx-v2"

    def __init__(
        self,
        url: str,
        org: str,
        bucket: str,
        token: str | None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        from influxdb_client.client.influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.url, self.org, self.bucket = url, org, bucket
        # retries=False: retrying is ours (spool), never a hidden loop that outlives the deadline.
        self.client = InfluxDBClient(
            url=url,
            # None: no token, no Authorization header (influxdb-client types it str = None)
            token=token or None,  # pyright: ignore[reportArgumentType]
            org=org,
            timeout=int(timeout * 1000),
            retries=False,
        )
        self.write_api = self.client.write_api(write_options=SYNCHRONOUS)

    def describe(self) -> str:
        return f"InfluxDB v2 API {self.url} org={self.org} bucket={self.bucket}"

    def send(self, lines: Sequence[str], timeout: float) -> None:
        from influxdb_client.domain.write_precision import WritePrecision
        from influxdb_client.rest import ApiException

        # The synchronous write API drops a per-call ``_request_timeout`` (influxdb-client 1.50),
        # so the deadline-bounded timeout goes into the client's configuration (milliseconds).
        # (influxdb-client's Configuration sets timeout to None only, so it is typed None)
        self.client.conf.timeout = max(1, int(timeout * 1000))  # pyright: ignore[reportAttributeAccessIssue]
        try:
            self.write_api.write(
                bucket=self.bucket,
                org=self.org,
                record=_join(lines),
                # WritePrecision's values are plain str constants, not WritePrecision instances
                write_precision=WritePrecision.NS,  # pyright: ignore[reportArgumentType]
            )
        except ApiException as exc:
            said = _short(exc.body or exc.reason or "")
            policy = f"the retention of bucket {self.bucket}"
            _raise_for_status(int(exc.status or 0), retention_refusal(said, policy))
        except Exception as exc:  # noqa: BLE001 - urllib3 raises many connection error types
            raise UnavailableError(
                f"cannot reach {self.url}: {type(exc).__name__}: {_short(str(exc))}"
            ) from exc

    def close(self) -> None:
        self.client.close()


def write_line_file(lines: Sequence[str], output: str | Path | None) -> None:
    """Line protocol to a file (atomically replaced, so a re-run never leaves half a file)
    or to standard output when ``output`` is None or ``-``."""
    text = "".join(line + "\n" for line in lines)
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as handle:
        handle.write(text)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a server's base URL (None when it can): caught at start-up, since
    a typo would otherwise look like a server that is down and be spooled forever."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"{url!r} is not a valid URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host"
    if parts.query or parts.fragment:
        return f"{url!r}: give the base URL, without '?' or '#'"
    return None


def read_token(token_file: str | Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The v2 API token: ``--influx.token-file``, else ``INFLUX_TOKEN`` (never a flag value)."""
    env = os.environ if environ is None else environ
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ValueError(f"{token_file}: cannot read token file: {reason or exc}") from exc
        if not token:
            raise ValueError(f"{token_file}: token file is empty")
        return token
    return env.get("INFLUX_TOKEN") or None


def read_secret(name: str, environ: Mapping[str, str]) -> str | None:
    """The environment variable ``name``, or the content of the file ``<name>_FILE`` names
    (a mounted Kubernetes Secret: the value never appears in the pod's spec)."""
    path = environ.get(f"{name}_FILE")
    if path:
        return read_token(path)
    return environ.get(name) or None
