"""One JSON-over-HTTP read for both servers the report asks (InfluxDB, Prometheus).

Loopback and site URLs are asked directly (no environment proxies). Every failure becomes a
``ReadError`` with one line naming the server: down, HTTP status (with the server's own
``error`` text when it gives one), time-out, or an answer that is not JSON.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ReadError(Exception):
    pass


def read_json(request: urllib.request.Request | str, timeout: float, server: str) -> dict:
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()[:500]
        try:
            detail = json.loads(body).get("error", "")
        except (ValueError, AttributeError):
            detail = body[:200].decode("utf-8", "replace").strip()
        raise ReadError(f"{server}: HTTP {exc.code} {detail}".rstrip()) from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise ReadError(f"{server}: {getattr(exc, 'reason', exc)}") from exc
    except ValueError as exc:
        raise ReadError(f"{server}: answer is not JSON") from exc
