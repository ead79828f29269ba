"""The two directory layouts Recorder writes: 2.5/3.0 (recorder.mt, recorder.cst or per-rank
tables, ug.mt/ug.cfg interprocess grammars, one recorder.ts) and 2.4 (per-rank .cst/.cfg/.ts)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from hpcmon.post_job.files import read_regular_file
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.recorder.binary import (
    MAX_RANKS,
    checked_metadata,
    function_names,
    iter_blocks,
    merge_rank_table,
    parse_cst,
    present_ranks,
    read_blocks,
)
from hpcmon.post_job.recorder.grammar import Grammar, decode_rank, parse_cfg
from hpcmon.post_job.recorder.model import CallSignature, RecorderTrace, TraceMetadata

# total_ranks, tracing flags (8 in 3.0, 6 in 2.5), start_ts, resolution, buffer, 4 flags
_MT_30 = struct.Struct("<i8?4xddi4?")
_MT_25 = struct.Struct("<i6?6xddi4?")
_MT_24 = struct.Struct("<i4xddiii")  # total_ranks, start_ts, res, buffer, ts algo, ipc
_MT_NAMES_OFFSET_25_30 = 1024
_MT_NAMES_OFFSET_24 = 40


def read_layout_25_30(path: Path, version: str) -> RecorderTrace:
    layout = "3.0" if version.startswith("3.") else "2.5"
    meta = _read_metadata_25_30(path, version, layout)
    errors: list[str] = []
    func_id_size = 4 if layout == "3.0" else 1
    nprocs = meta.total_ranks

    if (path / "recorder.cst").is_file():
        cst_path = path / "recorder.cst"
        signatures = parse_cst(read_blocks(cst_path, 1)[0], cst_path, func_id_size, meta)
        grammars = _interprocess_grammars(path, nprocs, errors)
        written = list(range(nprocs))  # ug.mt held a grammar id for each (checked there)
    else:
        signatures = {}
        grammars = {}
        written = present_ranks(path, nprocs, errors)
        for rank in written:
            cst_path, cfg_path = path / f"{rank}.cst", path / f"{rank}.cfg"
            try:
                rank_sigs = parse_cst(read_blocks(cst_path, 1)[0], cst_path, func_id_size, meta)
                grammars[rank] = parse_cfg(read_blocks(cfg_path, 1)[0], cfg_path)
            except SourceError as exc:
                errors.append(str(exc))
                continue
            grammars[rank] = merge_rank_table(signatures, rank_sigs, grammars[rank])

    deltas = _read_timestamps_25_30(
        path / "recorder.ts", nprocs, max(written, default=-1) + 1, meta.ts_compression, errors
    )
    ranks = []
    for rank in sorted(grammars):
        trace = decode_rank(rank, grammars[rank], deltas.get(rank), signatures, meta, path, errors)
        if trace is not None:
            ranks.append(trace)
    return RecorderTrace(path, meta, signatures, ranks, errors)


def _read_metadata_25_30(path: Path, version: str, layout: str) -> TraceMetadata:
    mt_path = path / "recorder.mt"
    data = read_regular_file(mt_path)
    fmt = _MT_30 if layout == "3.0" else _MT_25
    if len(data) < _MT_NAMES_OFFSET_25_30:
        raise SourceError(f"{mt_path}: truncated ({len(data)} bytes, header needs 1024)")
    fields = fmt.unpack_from(data, 0)
    total_ranks, flags = fields[0], fields[1:-7]
    start_ts, resolution, _buffer, ts_comp, ipc, _inter_pat, _intra_pat = fields[-7:]
    store_tid, store_depth = flags[-2], flags[-1]
    names = function_names(data[_MT_NAMES_OFFSET_25_30:], mt_path)
    return checked_metadata(
        mt_path,
        TraceMetadata(
            version,
            layout,
            total_ranks,
            start_ts,
            resolution,
            bool(ts_comp),
            bool(ipc),
            bool(store_tid),
            bool(store_depth),
            names,
        ),
    )


def _interprocess_grammars(path: Path, nprocs: int, errors: list[str]) -> dict[int, Grammar]:
    """ug.mt maps each rank to one of the unique grammars stored in ug.cfg."""
    ug_mt = path / "ug.mt"
    data = read_regular_file(ug_mt)
    if len(data) < 4 * (nprocs + 1):
        raise SourceError(
            f"{ug_mt}: truncated ({len(data)} bytes for {nprocs} ranks, need {4 * (nprocs + 1)})"
        )
    ids = struct.unpack_from(f"<{nprocs + 1}i", data)
    ug_ids, unique = ids[:nprocs], ids[nprocs]
    if not 0 < unique <= nprocs:
        raise SourceError(f"{ug_mt}: {unique} unique grammars for {nprocs} ranks")
    cfg_path = path / "ug.cfg"
    blocks = read_blocks(cfg_path, unique, errors)
    grammars: dict[int, Grammar] = {}
    parsed: dict[int, Grammar | None] = {}
    for rank, ug in enumerate(ug_ids):
        if not 0 <= ug < unique:
            errors.append(f"{ug_mt}: rank {rank} uses grammar {ug} of {unique}; rank skipped")
            continue
        if ug not in parsed:
            parsed[ug] = None
            if ug < len(blocks):
                try:
                    parsed[ug] = parse_cfg(blocks[ug], cfg_path)
                except SourceError as exc:
                    errors.append(f"{exc} (grammar {ug})")
        grammar = parsed[ug]
        if grammar is None:
            errors.append(f"{cfg_path}: grammar {ug} of rank {rank} unreadable; rank skipped")
            continue
        grammars[rank] = grammar
    return grammars


def _read_timestamps_25_30(
    ts_path: Path, nprocs: int, least: int, compressed: bool, errors: list[str]
) -> dict[int, np.ndarray]:
    """recorder.ts = u64 size per rank, then each rank's blob (zlib blocks or raw u32);
    ``least``: the ranks the trace has files or grammars for (see ``_timestamp_ranks``)."""
    try:
        data = read_regular_file(ts_path)
    except SourceError as exc:
        errors.append(f"{exc}; no timestamps")
        return {}
    held = _timestamp_ranks(data, nprocs, least)
    if held != nprocs:
        errors.append(
            f"{ts_path}: holds the timestamps of {held} ranks where recorder.mt announces "
            f"{nprocs}; read as {held}"
        )
        nprocs = held
    header = 8 * nprocs
    if len(data) < header:
        errors.append(f"{ts_path}: truncated header ({len(data)} bytes); no timestamps")
        return {}
    sizes = struct.unpack_from(f"<{nprocs}Q", data)
    out: dict[int, np.ndarray] = {}
    offset = header
    for rank, size in enumerate(sizes):
        blob = data[offset : offset + size]
        offset += size
        if len(blob) < size:
            errors.append(
                f"{ts_path}: rank {rank} timestamps truncated ({len(blob)} of {size} bytes)"
            )
        try:
            out[rank] = _timestamp_words(blob, compressed, ts_path)
        except SourceError as exc:
            errors.append(f"{exc} (rank {rank})")
    return out


def _timestamp_ranks(data: bytes, announced: int, least: int = 1) -> int:
    """How many ranks recorder.ts holds: one u64 size per rank, then the ranks' blobs, which
    fill the file to its end. The announced count when the file adds up with it, else the
    one count of at least ``least`` ranks (those the trace has other files for) it adds up
    with (a recorder.mt whose count was altered would otherwise cost every rank its times),
    else the announced count (a truncated file: each rank says so; one cut where it adds up
    for fewer ranks than the trace holds is still read as truncated)."""
    count = min(len(data) // 8, MAX_RANKS)
    if count == 0:
        return announced
    # sizes capped at the file's length: an end past the file never adds up, and the sums of
    # at most MAX_RANKS capped sizes stay far inside uint64
    sizes = np.minimum(np.frombuffer(data, dtype="<u8", count=count), len(data))
    ends = np.cumsum(sizes, dtype=np.uint64) + 8 * np.arange(1, count + 1, dtype=np.uint64)
    if announced <= count and ends[announced - 1] == len(data):
        return announced
    fits = np.flatnonzero(ends == len(data))  # ends only grow: one at most
    return int(fits[0]) + 1 if fits.size and fits[0] + 1 >= least else announced


def _timestamp_words(blob: bytes, compressed: bool, ts_path: Path) -> np.ndarray:
    if compressed:
        blob = b"".join(iter_blocks(blob, ts_path))
    usable = len(blob) - len(blob) % 4
    return np.frombuffer(blob, dtype="<u4", count=usable // 4)


def read_layout_24(path: Path, version: str) -> RecorderTrace:
    mt_path = path / "recorder.mt"
    data = read_regular_file(mt_path)
    if len(data) < _MT_NAMES_OFFSET_24:
        raise SourceError(f"{mt_path}: truncated ({len(data)} bytes, header needs 40)")
    total_ranks, start_ts, resolution, _buffer, ts_algo, ipc = _MT_24.unpack_from(data, 0)
    if (path / "recorder.cst").exists() and not (path / "0.cst").exists():
        raise SourceError(
            f"{path}: Recorder 2.4 trace with interprocess compression (recorder.cst) is not "
            "supported (no such trace was available to verify the layout)"
        )
    names = function_names(data[_MT_NAMES_OFFSET_24:], mt_path)
    meta = checked_metadata(
        mt_path,
        TraceMetadata(
            version,
            "2.4",
            total_ranks,
            start_ts,
            resolution,
            ts_algo != 0,
            bool(ipc),
            False,
            True,
            names,
        ),
    )
    errors: list[str] = []
    signatures: dict[int, CallSignature] = {}
    ranks = []
    for rank in present_ranks(path, total_ranks, errors):
        cst_path, cfg_path, ts_path = (path / f"{rank}.{ext}" for ext in ("cst", "cfg", "ts"))
        try:
            rank_sigs = parse_cst(read_regular_file(cst_path), cst_path, 1, meta)
            grammar = parse_cfg(read_regular_file(cfg_path), cfg_path)
        except SourceError as exc:
            errors.append(f"{exc}; rank {rank} skipped")
            continue
        grammar = merge_rank_table(signatures, rank_sigs, grammar)
        try:
            words = _timestamp_words(read_regular_file(ts_path), meta.ts_compression, ts_path)
        except SourceError as exc:
            errors.append(str(exc))
            words = None
        trace = decode_rank(rank, grammar, words, signatures, meta, path, errors)
        if trace is not None:
            ranks.append(trace)
    return RecorderTrace(path, meta, signatures, ranks, errors)
