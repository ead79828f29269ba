"""``--geopm.signals``: ``SIGNAL DOMAIN INDEX`` requests, the format geopmsession reads.

Given inline (requests separated by ``,`` or new lines) or as the path of a file with one
request per line (``#`` comments and blank lines ignored). ``INDEX`` may be ``*`` (all).
"""

from __future__ import annotations

from pathlib import Path

from hpcmon.exporter.geopm.model import Request

DOMAINS = (
    "board",
    "package",
    "core",
    "cpu",
    "memory",
    "package_integrated_memory",
    "nic",
    "package_integrated_nic",
    "gpu",
    "package_integrated_gpu",
    "gpu_chip",
)

DEFAULT_REQUESTS: tuple[Request, ...] = (
    Request("CPU_ENERGY", "package", None),
    Request("CPU_POWER", "package", None),
    Request("DRAM_ENERGY", "package", None),
    Request("DRAM_POWER", "package", None),
    Request("GPU_ENERGY", "gpu", None),
    Request("GPU_POWER", "gpu", None),
    Request("BOARD_ENERGY", "board", 0),
    Request("BOARD_POWER", "board", 0),
)  # a signal the node lacks is skipped (geopmdpy) or dropped at start (geopmsession)


class RequestError(ValueError):
    pass


def parse_request_lines(lines: list[str], origin: str) -> list[Request]:
    requests: list[Request] = []
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if len(words) != 3:
            raise RequestError(f"{origin}:{number}: expected 'SIGNAL DOMAIN INDEX', got {raw!r}")
        signal, domain, index = words
        if domain not in DOMAINS:
            raise RequestError(
                f"{origin}:{number}: unknown domain {domain!r} (one of {', '.join(DOMAINS)})"
            )
        if index == "*":
            requests.append(Request(signal, domain, None))
        elif index.isascii() and index.isdigit():
            requests.append(Request(signal, domain, int(index)))
        else:
            raise RequestError(f"{origin}:{number}: index must be a number or '*', got {index!r}")
    return requests


def parse_signals_option(value: str | None) -> list[Request]:
    """Requests from the flag: a file path if one exists, else an inline list."""
    if not value:
        return list(DEFAULT_REQUESTS)
    path = Path(value)
    if "\n" not in value and path.is_file():
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise RequestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        origin = str(path)
    else:
        lines = value.replace(",", "\n").splitlines()
        origin = "--geopm.signals"
    requests = parse_request_lines(lines, origin)
    if not requests:
        raise RequestError(f"{origin}: no request")
    return requests
