"""GEOPM's Python API (``geopmdpy.pio``) -> samples, in SI units as GEOPM gives them.

geopmdpy needs libgeopmd and the GEOPM service, so it is imported only when this backend
opens. Batch reads: every request is pushed once (``push_signal``), then each interval is one
``read_batch`` and one ``sample`` per signal. ``signal_info`` says which signals are monotone;
the unit comes from the signal description (``units: ...``), else from the name.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpcmon.exporter.geopm.model import (
    BEHAVIOR_LABEL,
    BEHAVIOR_MONOTONE,
    BackendError,
    Request,
    Sample,
    SampleBatch,
    SignalKey,
)
from hpcmon.exporter.geopm.naming import unit_from_description, unit_from_name
from hpcmon.exporter.geopm.requests import DEFAULT_REQUESTS

log = logging.getLogger("hpcmon.exporter.geopm")
SOURCE = "geopmdpy"


@dataclass(frozen=True, slots=True)
class Pushed:
    """A signal pushed into the batch: its handle and what is fixed about it."""

    handle: int
    key: SignalKey
    monotone: bool
    unit: str


class GeopmdpyBackend:
    source = SOURCE
    paced = False

    def __init__(
        self, requests: Sequence[Request] = DEFAULT_REQUESTS, module: str = "geopmdpy"
    ) -> None:
        self.requests = list(requests)
        self.explicit = self.requests != list(DEFAULT_REQUESTS)
        self.module = module
        self._pio: Any = None
        self._pushed: list[Pushed] = []

    def open(self) -> None:
        try:
            pio = importlib.import_module(f"{self.module}.pio")
            topo = importlib.import_module(f"{self.module}.topo")
        except Exception as exc:  # noqa: BLE001 - ImportError, or OSError for libgeopmd.so
            raise BackendError(f"geopmdpy not usable: {exc}") from exc
        try:
            pio.reset()
            available = set(pio.signal_names())
            self._pushed = self._push_all(pio, topo, available)
        except RuntimeError as exc:
            raise BackendError(f"geopmdpy: {exc}") from exc
        if not self._pushed:
            raise BackendError(
                "geopmdpy: none of the requested signals is available "
                f"({', '.join(r.line() for r in self.requests)})"
            )
        self._pio = pio

    def _push_all(self, pio: Any, topo: Any, available: set[str]) -> list[Pushed]:
        pushed: list[Pushed] = []
        seen: set[SignalKey] = set()
        for request in self.requests:
            if request.signal not in available:
                if self.explicit:
                    log.warning("geopmdpy: signal %s not available on this node", request.signal)
                continue
            try:
                pushed.extend(self._push_request(pio, topo, request, seen))
            except RuntimeError as exc:  # e.g. a domain finer than the signal's native one
                log.warning("geopmdpy: %s skipped: %s", request.line(), exc)
        return pushed

    def _push_request(
        self, pio: Any, topo: Any, request: Request, seen: set[SignalKey]
    ) -> list[Pushed]:
        """Push one request (every index for ``*``); RuntimeError if GEOPM refuses it."""
        domain_type = topo.domain_type(request.domain)
        count = topo.num_domain(domain_type)
        _aggregation, _format, behavior = pio.signal_info(request.signal)
        if behavior == BEHAVIOR_LABEL:
            return []  # region hashes and the like are not measurements
        unit = unit_from_description(pio.signal_description(request.signal))
        if unit is None:
            unit = unit_from_name(request.signal)
        pushed: list[Pushed] = []
        for index in range(count) if request.index is None else [request.index]:
            key = SignalKey(request.signal, topo.domain_name(domain_type), index)
            if key in seen:
                continue
            if index >= count:
                log.warning(
                    "geopmdpy: %s has %d %s domains, index %d skipped",
                    request.signal,
                    count,
                    request.domain,
                    index,
                )
                continue
            handle = pio.push_signal(request.signal, domain_type, index)
            pushed.append(Pushed(handle, key, behavior == BEHAVIOR_MONOTONE, unit))
            seen.add(key)
        return pushed

    def read(self) -> SampleBatch:
        if self._pio is None:
            raise BackendError("geopmdpy backend is not open")
        try:
            self._pio.read_batch()
            now = time.monotonic()
            samples = [
                Sample(p.key, float(self._pio.sample(p.handle)), p.monotone, p.unit)
                for p in self._pushed
            ]
        except RuntimeError as exc:
            raise BackendError(f"geopmdpy read failed: {exc}") from exc
        return SampleBatch(self.source, now, 0, samples)

    def close(self) -> None:
        pio, self._pio = self._pio, None
        self._pushed = []
        if pio is not None:
            try:
                pio.reset()
            except RuntimeError as exc:
                log.debug("geopmdpy reset: %s", exc)
