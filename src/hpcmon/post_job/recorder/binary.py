"""The binary pieces every Recorder layout shares: whole files, zlib blocks, the metadata
checks, function names and call-signature tables (CST)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from hpcmon.post_job.files import read_regular_file
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.recorder.grammar import Grammar, shift_terminals
from hpcmon.post_job.recorder.model import CallSignature, TraceMetadata, function_type

MAX_RANKS = 1_000_000
_BLOCK_HEADER = struct.Struct("<QQ")


def present_ranks(path: Path, nprocs: int, errors: list[str]) -> list[int]:
    """Ranks of a per-rank layout whose N.cst exists; one error names the missing ones."""
    present = sorted(
        int(p.stem) for p in path.glob("*.cst") if p.stem.isdigit() and int(p.stem) < nprocs
    )
    missing = nprocs - len(present)
    if missing:
        absent = _first_absent(present, min(missing, 5))
        errors.append(
            f"{path}: {missing} of {nprocs} ranks have no .cst file (first: "
            f"{', '.join(map(str, absent))}); those ranks skipped"
        )
    return present


def _first_absent(present: list[int], count: int) -> list[int]:
    """The ``count`` lowest ranks not in ``present``: walks the present ranks, never the
    announced count (a header may claim a million ranks beside two files)."""
    taken = set(present)
    absent: list[int] = []
    rank = 0
    while len(absent) < count:
        if rank not in taken:
            absent.append(rank)
        rank += 1
    return absent


def checked_metadata(mt_path: Path, meta: TraceMetadata) -> TraceMetadata:
    if not 0 < meta.total_ranks <= MAX_RANKS:
        raise SourceError(f"{mt_path}: implausible rank count {meta.total_ranks}")
    if not (0 < meta.time_resolution < 1):
        raise SourceError(f"{mt_path}: implausible time resolution {meta.time_resolution}")
    if not (0 <= meta.start_ts < 1e11):
        raise SourceError(f"{mt_path}: implausible start time {meta.start_ts}")
    return meta


def function_names(data: bytes, mt_path: Path) -> tuple[str, ...]:
    names = data.decode("utf-8", "replace").split("\n")
    if names and names[-1] == "":
        names.pop()
    if not names:
        raise SourceError(f"{mt_path}: no function names")
    return tuple(names)


def iter_blocks(data: bytes, path: Path) -> Iterator[bytes]:
    """Consecutive zlib blocks: u64 compressed size, u64 decompressed size, deflate stream."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < _BLOCK_HEADER.size:
            raise SourceError(f"{path}: truncated zlib block header at byte {offset}")
        csize, dsize = _BLOCK_HEADER.unpack_from(data, offset)
        start = offset + _BLOCK_HEADER.size
        if csize > len(data) - start:
            raise SourceError(
                f"{path}: zlib block at byte {offset} claims {csize} bytes, "
                f"{len(data) - start} left (truncated)"
            )
        if dsize > 1100 * csize + 1024:  # deflate cannot expand more than ~1032:1
            raise SourceError(
                f"{path}: zlib block at byte {offset} claims {dsize} bytes from {csize}"
            )
        try:
            decomp = zlib.decompressobj()
            payload = decomp.decompress(data[start : start + csize], dsize or 1)
        except zlib.error as exc:
            raise SourceError(f"{path}: corrupt zlib block at byte {offset}: {exc}") from None
        if len(payload) != dsize:
            raise SourceError(
                f"{path}: zlib block at byte {offset} gives {len(payload)} bytes, "
                f"header says {dsize}"
            )
        yield payload
        offset = start + csize


def read_blocks(path: Path, expected: int, errors: list[str] | None = None) -> list[bytes]:
    """The first ``expected`` zlib blocks of a file; with ``errors``, keep what decodes."""
    data = read_regular_file(path)
    blocks: list[bytes] = []
    try:
        for block in iter_blocks(data, path):
            blocks.append(block)
            if len(blocks) == expected:
                break
    except SourceError as exc:
        if errors is None:
            raise
        errors.append(str(exc))
    if errors is None and len(blocks) < expected:
        raise SourceError(f"{path}: empty, no zlib block")
    return blocks


def parse_cst(
    payload: bytes, path: Path, func_id_size: int, meta: TraceMetadata
) -> dict[int, CallSignature]:
    """Call-signature table: int count, then (terminal, rank, key_len, u32 count, key)."""
    if len(payload) < 4:
        raise SourceError(f"{path}: call-signature table truncated (no entry count)")
    (entries,) = struct.unpack_from("<i", payload)
    names = meta.function_names
    func_fmt = "<i" if func_id_size == 4 else "<B"
    fixed = 8 + func_id_size + 1 + 1 + 4
    signatures: dict[int, CallSignature] = {}
    offset = 4
    for index in range(max(entries, 0)):
        if len(payload) - offset < 16:
            raise SourceError(
                f"{path}: call-signature table truncated at entry {index} of {entries}"
            )
        terminal, _rank, key_len, _count = struct.unpack_from("<iiiI", payload, offset)
        offset += 16
        key = payload[offset : offset + key_len]
        offset += key_len
        if key_len < fixed or len(key) != key_len:
            raise SourceError(f"{path}: call signature {index} has a bad key length {key_len}")
        (thread_id,) = struct.unpack_from("<Q", key)
        (func_id,) = struct.unpack_from(func_fmt, key, 8)
        depth, arg_count, args_len = struct.unpack_from("<BBi", key, 8 + func_id_size)
        if not 0 <= func_id < len(names):
            raise SourceError(
                f"{path}: call signature {index} has function id {func_id} "
                f"outside the {len(names)} names of recorder.mt"
            )
        raw_args = key[fixed : fixed + max(args_len, 0)]
        args = split_args(raw_args.decode("utf-8", "replace"), arg_count)
        name = names[func_id]
        signatures[terminal] = CallSignature(
            terminal, func_id, name, function_type(name), thread_id, depth, args
        )
    return signatures


def split_args(text: str, arg_count: int) -> tuple[str, ...]:
    """Recorder ends every argument with a space (spaces inside arguments became '_')."""
    if arg_count == 0 or not text:
        return ()
    if text.endswith(" "):
        text = text[:-1]
    return tuple(text.split(" "))


def merge_rank_table(
    signatures: dict[int, CallSignature], rank_sigs: dict[int, CallSignature], grammar: Grammar
) -> Grammar:
    """Per-rank tables reuse terminal ids: move this rank's ids past those already in
    ``signatures`` (added in place) and return its grammar renumbered to match."""
    offset = max(signatures, default=-1) + 1
    for terminal, sig in rank_sigs.items():
        new_id = offset + terminal
        signatures[new_id] = CallSignature(
            new_id,
            sig.func_id,
            sig.function,
            sig.func_type,
            sig.thread_id,
            sig.call_depth,
            sig.args,
        )
    return shift_terminals(grammar, offset)
