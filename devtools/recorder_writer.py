"""Writes Recorder-format trace directories (2.4, 2.5, 3.0 layouts).

Recorder itself writes real traces; this writer exists so tests can round-trip arbitrary
calls through the reader and the benchmark can build a trace of millions of calls without
MPI. It follows the layout in shared/specs/recorder-format-notes.md, the same one
``reader.py`` decodes (a grammar is supplied by the caller or made by run-length coding).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_NAMES_OFFSET_25_30 = 1024


@dataclass(frozen=True)
class Signature:
    function: str
    args: tuple[str, ...] = ()
    call_depth: int = 0
    thread_id: int = 0


@dataclass
class RankCalls:
    """One rank: grammar rules (rule id -> [(symbol, repeat)], symbol >= 0 = signature index,
    < 0 = rule id, -1 = start rule) and each call's start/end in ticks since the trace start."""

    grammar: dict[int, list[tuple[int, int]]]
    tstart_ticks: np.ndarray
    tend_ticks: np.ndarray


def run_length_calls(
    signature_ids: Sequence[int], tstart_ticks: Sequence[int], tend_ticks: Sequence[int]
) -> RankCalls:
    """A flat grammar for a call sequence: consecutive equal calls become one repeated symbol."""
    ids = np.asarray(signature_ids, dtype=np.int64)
    symbols: list[tuple[int, int]] = []
    if len(ids):
        change = np.flatnonzero(np.diff(ids)) + 1
        starts = np.concatenate(([0], change))
        lengths = np.diff(np.concatenate((starts, [len(ids)])))
        symbols = list(zip(ids[starts].tolist(), lengths.tolist(), strict=True))
    return RankCalls(
        {-1: symbols},
        np.asarray(tstart_ticks, dtype=np.int64),
        np.asarray(tend_ticks, dtype=np.int64),
    )


def write_trace(
    path: Path,
    layout: str,
    function_names: Sequence[str],
    signatures: Sequence[Signature],
    ranks: Sequence[RankCalls],
    *,
    start_ts: float = 1_795_265_447.0,
    time_resolution: float = 1e-7,
    interprocess_compression: bool = True,
    ts_compression: bool = True,
    ts_block_words: int = 1 << 20,
) -> Path:
    """Write a trace directory; ``layout`` is "3.0", "2.5" or "2.4"."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    name_index = {name: i for i, name in enumerate(function_names)}
    names_blob = "".join(f"{name}\n" for name in function_names).encode()
    nprocs = len(ranks)
    if layout == "2.4":
        (path / "VERSION").write_text("2.4.0")
        header = struct.pack("<i4xddiii", nprocs, start_ts, time_resolution, 1 << 18, 0, 0)
        (path / "recorder.mt").write_bytes(header.ljust(40, b"\0") + names_blob)
        cst = _cst(signatures, name_index, 1)
        for rank, calls in enumerate(ranks):
            (path / f"{rank}.cst").write_bytes(cst)
            (path / f"{rank}.cfg").write_bytes(_cfg(calls.grammar))
            (path / f"{rank}.ts").write_bytes(_deltas(calls).tobytes())
        return path

    if layout not in ("3.0", "2.5"):
        raise ValueError(f"unknown layout {layout}")
    (path / "VERSION").write_text("3.0.0" if layout == "3.0" else "2.5.0")
    flags = (True,) * (8 if layout == "3.0" else 6)  # tracing levels, store_tid, store_depth
    fmt = "<i8?4xddi4?" if layout == "3.0" else "<i6?6xddi4?"
    header = struct.pack(
        fmt,
        nprocs,
        *flags,
        start_ts,
        time_resolution,
        ts_block_words,
        ts_compression,
        interprocess_compression,
        False,
        False,
    )
    (path / "recorder.mt").write_bytes(header.ljust(_NAMES_OFFSET_25_30, b"\0") + names_blob)
    func_id_size = 4 if layout == "3.0" else 1
    cst = _zlib_block(_cst(signatures, name_index, func_id_size))
    if interprocess_compression:
        (path / "recorder.cst").write_bytes(cst)
        unique: dict[bytes, int] = {}
        ug_ids = [unique.setdefault(_cfg(calls.grammar), len(unique)) for calls in ranks]
        (path / "ug.mt").write_bytes(struct.pack(f"<{nprocs + 1}i", *ug_ids, len(unique)))
        (path / "ug.cfg").write_bytes(b"".join(_zlib_block(g) for g in unique))
    else:
        for rank, calls in enumerate(ranks):
            (path / f"{rank}.cst").write_bytes(cst)
            (path / f"{rank}.cfg").write_bytes(_zlib_block(_cfg(calls.grammar)))
    blobs = []
    for calls in ranks:
        words = _deltas(calls)
        if ts_compression:
            chunks = [words[i : i + ts_block_words] for i in range(0, len(words), ts_block_words)]
            blobs.append(b"".join(_zlib_block(chunk.tobytes()) for chunk in chunks))
        else:
            blobs.append(words.tobytes())
    sizes = struct.pack(f"<{nprocs}Q", *(len(b) for b in blobs))
    (path / "recorder.ts").write_bytes(sizes + b"".join(blobs))
    return path


def _zlib_block(payload: bytes) -> bytes:
    compressed = zlib.compress(payload)
    return struct.pack("<QQ", len(compressed), len(payload)) + compressed


def _cst(signatures: Sequence[Signature], name_index: dict[str, int], func_id_size: int) -> bytes:
    parts = [struct.pack("<i", len(signatures))]
    func_fmt = "<i" if func_id_size == 4 else "<B"
    for terminal, sig in enumerate(signatures):
        args = "".join(f"{arg} " for arg in sig.args).encode()
        key = (
            struct.pack("<Q", sig.thread_id)
            + struct.pack(func_fmt, name_index[sig.function])
            + struct.pack("<BBi", sig.call_depth, len(sig.args), len(args))
            + args
        )
        parts.append(struct.pack("<iiiI", terminal, 0, len(key), 1) + key)
    return b"".join(parts)


def _cfg(grammar: dict[int, list[tuple[int, int]]]) -> bytes:
    words = [len(grammar)]
    for rule_id, symbols in grammar.items():
        words += [rule_id, len(symbols)]
        for value, repeat in symbols:
            words += [value, repeat]
    return np.asarray(words, dtype="<i4").tobytes()


def _deltas(calls: RankCalls) -> np.ndarray:
    """u32 pairs: (tstart - previous tstart, tend - previous tstart), first previous = 0."""
    previous = np.concatenate(([0], calls.tstart_ticks[:-1]))
    words = np.empty(2 * len(calls.tstart_ticks), dtype="<u4")
    words[0::2] = calls.tstart_ticks - previous
    words[1::2] = calls.tend_ticks - previous
    return words
