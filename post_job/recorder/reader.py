"""Pure-Python reader of Recorder trace directories (2.4 per-rank layout, 2.5 and 3.0 layouts).

Recorder stores each rank's calls as a Sequitur grammar over a table of unique call
signatures (CST) plus one pair of 32-bit time deltas per call. Decoding = expand the grammar
to the rank's sequence of signature ids and integrate the deltas in that same order.
The official 3.0 C reader loses its place in the delta stream after a repeated rule; here
the deltas are consumed strictly in expansion order, so every call keeps its own time.

Per-rank arrays (numpy) carry the bulk data so counting a million calls never builds a
million Python objects; ``RecorderTrace.records()`` yields typed ``Record`` s on demand.
Format facts: /work/shared/specs/recorder-format-notes.md (read from Recorder's sources).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from post_job.files import not_a_regular_file
from post_job.problems import SourceError

# A grammar that expands beyond this many calls per rank is treated as corrupt (it would
# need > 2 GB of memory to hold); real traces this large are out of scope for a post-job hook.
MAX_RECORDS_PER_RANK = 200_000_000
MAX_RANKS = 1_000_000
_BLOCK_HEADER = struct.Struct("<QQ")
# total_ranks, tracing flags (8 in 3.0, 6 in 2.5), start_ts, resolution, buffer, 4 flags
_MT_30 = struct.Struct("<i8?4xddi4?")
_MT_25 = struct.Struct("<i6?6xddi4?")
_MT_24 = struct.Struct("<i4xddiii")  # total_ranks, start_ts, res, buffer, ts algo, ipc
_MT_NAMES_OFFSET_25_30 = 1024
_MT_NAMES_OFFSET_24 = 40


@dataclass(frozen=True, slots=True)
class TraceMetadata:
    version: str
    layout: str  # "3.0", "2.5" or "2.4"
    total_ranks: int
    start_ts: float  # epoch seconds of the trace start (rank 0's logger start)
    time_resolution: float  # seconds per tick of the stored deltas
    ts_compression: bool
    interprocess_compression: bool
    store_tid: bool
    store_call_depth: bool
    function_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallSignature:
    """One entry of the call-signature table: everything about a call except its times."""

    terminal_id: int
    func_id: int
    function: str
    func_type: str  # POSIX, MPIIO, MPI, HDF5, PNETCDF, NETCDF, USER
    thread_id: int
    call_depth: int
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One traced call; times are seconds since the trace start (``start_ts``)."""

    rank: int
    thread_id: int
    func_id: int
    function: str
    func_type: str
    call_depth: int
    args: tuple[str, ...]
    tstart: float
    tend: float


@dataclass(slots=True)
class RankTrace:
    """One rank's calls in program order: signature ids and start/end seconds (NaN = lost)."""

    rank: int
    terminals: np.ndarray  # int64 terminal ids, one per call
    tstart: np.ndarray  # float64 seconds since start_ts
    tend: np.ndarray


@dataclass(slots=True)
class RecorderTrace:
    path: Path
    metadata: TraceMetadata
    signatures: dict[int, CallSignature]
    ranks: list[RankTrace]
    errors: list[str] = field(default_factory=list)

    @property
    def record_count(self) -> int:
        return sum(len(rank.terminals) for rank in self.ranks)

    def records(self, rank: int | None = None) -> Iterator[Record]:
        """Typed records in program order, rank by rank (or only ``rank``)."""
        for trace in self.ranks:
            if rank is not None and trace.rank != rank:
                continue
            starts = trace.tstart.tolist()
            ends = trace.tend.tolist()
            for terminal, tstart, tend in zip(trace.terminals.tolist(), starts, ends, strict=True):
                sig = self.signatures[terminal]
                yield Record(
                    trace.rank,
                    sig.thread_id,
                    sig.func_id,
                    sig.function,
                    sig.func_type,
                    sig.call_depth,
                    sig.args,
                    tstart,
                    tend,
                )

    def function_counts(self, rank: RankTrace) -> dict[str, int]:
        """Calls per function name on one rank, straight from the terminal ids (no records)."""
        counts: dict[str, int] = {}
        if len(rank.terminals) == 0:
            return counts
        ids, per_id = np.unique(rank.terminals, return_counts=True)
        for terminal, count in zip(ids.tolist(), per_id.tolist(), strict=True):
            name = self.signatures[terminal].function
            counts[name] = counts.get(name, 0) + count
        return counts


def function_type(name: str) -> str:
    """The layer a function belongs to, from its name (Recorder's own ranges, by prefix)."""
    if name.startswith("MPI_File"):
        return "MPIIO"
    if name.startswith("MPI_"):
        return "MPI"
    if name.startswith("H5"):
        return "HDF5"
    if name.startswith("ncmpi"):
        return "PNETCDF"
    if name.startswith(("nc_", "nc__", "NC_", "nctypelen")):
        return "NETCDF"
    if name == "user_function":
        return "USER"
    return "POSIX"


# ---------------------------------------------------------------------------------------------
# Entry point


def read_recorder_trace(path: Path) -> RecorderTrace:
    """Read one trace directory. Raises SourceError only when nothing can be read;
    problems confined to one rank are listed in ``errors`` and that rank is left out."""
    path = Path(path)
    if not path.is_dir():
        raise SourceError(f"{path}: not a Recorder trace directory")
    version = _read_version(path)
    if version.startswith(("3.0.", "2.5.")) or version in ("3.0", "2.5"):
        return _read_25_30(path, version)
    if version.startswith("2.4.") or version == "2.4":
        return _read_24(path, version)
    raise SourceError(
        f"{path}: Recorder version {version} is not supported (readable: 2.4, 2.5, 3.0)"
    )


def _read_version(path: Path) -> str:
    version_file = path / "VERSION"
    if not version_file.is_file():
        if (path / "recorder.dat").exists():
            raise SourceError(
                f"{path}: single-file 'recorder.dat' trace (Recorder after 3.0) is not supported"
            )
        if list(path.glob("*.itf")):
            raise SourceError(f"{path}: '.itf' trace of Recorder 2.2 or older is not supported")
        if (path / "recorder.mt").is_file():
            raise SourceError(
                f"{path}: no VERSION file (multi-file layout of Recorder after 3.0?); not supported"
            )
        raise SourceError(f"{path}: no VERSION file, not a Recorder trace directory")
    raw = version_file.read_bytes()[:64].strip(b"\0 \n\r\t")
    try:
        version = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SourceError(f"{version_file}: VERSION is not text: {raw!r}") from None
    parts = version.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise SourceError(f"{version_file}: unrecognised version string {version!r}")
    return version


# ---------------------------------------------------------------------------------------------
# 2.5 / 3.0 layout


def _read_25_30(path: Path, version: str) -> RecorderTrace:
    layout = "3.0" if version.startswith("3.") else "2.5"
    meta = _read_metadata_25_30(path, version, layout)
    errors: list[str] = []
    func_id_size = 4 if layout == "3.0" else 1
    nprocs = meta.total_ranks

    if (path / "recorder.cst").is_file():
        cst_path = path / "recorder.cst"
        signatures = _parse_cst(_read_blocks(cst_path, 1)[0], cst_path, func_id_size, meta)
        grammars = _interprocess_grammars(path, nprocs, errors)
    else:
        signatures = {}
        grammars = {}
        for rank in _present_ranks(path, nprocs, errors):
            cst_path, cfg_path = path / f"{rank}.cst", path / f"{rank}.cfg"
            try:
                rank_sigs = _parse_cst(_read_blocks(cst_path, 1)[0], cst_path, func_id_size, meta)
                grammars[rank] = _parse_cfg(_read_blocks(cfg_path, 1)[0], cfg_path)
            except SourceError as exc:
                errors.append(str(exc))
                continue
            grammars[rank] = _merge_rank_table(signatures, rank_sigs, grammars[rank])

    deltas = _read_timestamps_25_30(path / "recorder.ts", nprocs, meta.ts_compression, errors)
    ranks = []
    for rank in range(nprocs):
        if rank not in grammars:
            continue
        trace = _decode_rank(rank, grammars[rank], deltas.get(rank), signatures, meta, path, errors)
        if trace is not None:
            ranks.append(trace)
    return RecorderTrace(path, meta, signatures, ranks, errors)


def _read_metadata_25_30(path: Path, version: str, layout: str) -> TraceMetadata:
    mt_path = path / "recorder.mt"
    data = _read_file(mt_path)
    fmt = _MT_30 if layout == "3.0" else _MT_25
    if len(data) < _MT_NAMES_OFFSET_25_30:
        raise SourceError(f"{mt_path}: truncated ({len(data)} bytes, header needs 1024)")
    fields = fmt.unpack_from(data, 0)
    total_ranks, flags = fields[0], fields[1:-7]
    start_ts, resolution, _buffer, ts_comp, ipc, _inter_pat, _intra_pat = fields[-7:]
    store_tid, store_depth = flags[-2], flags[-1]
    names = _function_names(data[_MT_NAMES_OFFSET_25_30:], mt_path)
    return _checked_metadata(
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


def _interprocess_grammars(path: Path, nprocs: int, errors: list[str]) -> dict[int, _Grammar]:
    """ug.mt maps each rank to one of the unique grammars stored in ug.cfg."""
    ug_mt = path / "ug.mt"
    data = _read_file(ug_mt)
    if len(data) < 4 * (nprocs + 1):
        raise SourceError(
            f"{ug_mt}: truncated ({len(data)} bytes for {nprocs} ranks, need {4 * (nprocs + 1)})"
        )
    ids = struct.unpack_from(f"<{nprocs + 1}i", data)
    ug_ids, unique = ids[:nprocs], ids[nprocs]
    if not 0 < unique <= nprocs:
        raise SourceError(f"{ug_mt}: {unique} unique grammars for {nprocs} ranks")
    cfg_path = path / "ug.cfg"
    blocks = _read_blocks(cfg_path, unique, errors)
    grammars: dict[int, _Grammar] = {}
    parsed: dict[int, _Grammar | None] = {}
    for rank, ug in enumerate(ug_ids):
        if not 0 <= ug < unique:
            errors.append(f"{ug_mt}: rank {rank} uses grammar {ug} of {unique}; rank skipped")
            continue
        if ug not in parsed:
            parsed[ug] = None
            if ug < len(blocks):
                try:
                    parsed[ug] = _parse_cfg(blocks[ug], cfg_path)
                except SourceError as exc:
                    errors.append(f"{exc} (grammar {ug})")
        if parsed[ug] is None:
            errors.append(f"{cfg_path}: grammar {ug} of rank {rank} unreadable; rank skipped")
            continue
        grammars[rank] = parsed[ug]
    return grammars


def _read_timestamps_25_30(
    ts_path: Path, nprocs: int, compressed: bool, errors: list[str]
) -> dict[int, np.ndarray]:
    """recorder.ts = u64 size per rank, then each rank's blob (zlib blocks or raw u32)."""
    try:
        data = _read_file(ts_path)
    except SourceError as exc:
        errors.append(f"{exc}; no timestamps")
        return {}
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


def _timestamp_words(blob: bytes, compressed: bool, ts_path: Path) -> np.ndarray:
    if compressed:
        blob = b"".join(_iter_blocks(blob, ts_path))
    usable = len(blob) - len(blob) % 4
    return np.frombuffer(blob, dtype="<u4", count=usable // 4)


# ---------------------------------------------------------------------------------------------
# 2.4 layout


def _read_24(path: Path, version: str) -> RecorderTrace:
    mt_path = path / "recorder.mt"
    data = _read_file(mt_path)
    if len(data) < _MT_NAMES_OFFSET_24:
        raise SourceError(f"{mt_path}: truncated ({len(data)} bytes, header needs 40)")
    total_ranks, start_ts, resolution, _buffer, ts_algo, ipc = _MT_24.unpack_from(data, 0)
    if (path / "recorder.cst").exists() and not (path / "0.cst").exists():
        raise SourceError(
            f"{path}: Recorder 2.4 trace with interprocess compression (recorder.cst) is not "
            "supported (no such trace was available to verify the layout)"
        )
    names = _function_names(data[_MT_NAMES_OFFSET_24:], mt_path)
    meta = _checked_metadata(
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
    for rank in _present_ranks(path, total_ranks, errors):
        cst_path, cfg_path, ts_path = (path / f"{rank}.{ext}" for ext in ("cst", "cfg", "ts"))
        try:
            rank_sigs = _parse_cst(_read_file(cst_path), cst_path, 1, meta)
            grammar = _parse_cfg(_read_file(cfg_path), cfg_path)
        except SourceError as exc:
            errors.append(f"{exc}; rank {rank} skipped")
            continue
        grammar = _merge_rank_table(signatures, rank_sigs, grammar)
        try:
            words = _timestamp_words(_read_file(ts_path), meta.ts_compression, ts_path)
        except SourceError as exc:
            errors.append(str(exc))
            words = None
        trace = _decode_rank(rank, grammar, words, signatures, meta, path, errors)
        if trace is not None:
            ranks.append(trace)
    return RecorderTrace(path, meta, signatures, ranks, errors)


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _present_ranks(path: Path, nprocs: int, errors: list[str]) -> list[int]:
    """Ranks of a per-rank layout whose N.cst exists; one error names the missing ones."""
    present = sorted(
        int(p.stem) for p in path.glob("*.cst") if p.stem.isdigit() and int(p.stem) < nprocs
    )
    missing = nprocs - len(present)
    if missing:
        absent = sorted(set(range(min(nprocs, 10**6))) - set(present))[:5]
        errors.append(
            f"{path}: {missing} of {nprocs} ranks have no .cst file (first: "
            f"{', '.join(map(str, absent))}); those ranks skipped"
        )
    return present


def _read_file(path: Path) -> bytes:
    problem = not_a_regular_file(path)
    if problem:
        raise SourceError(problem)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _checked_metadata(mt_path: Path, meta: TraceMetadata) -> TraceMetadata:
    if not 0 < meta.total_ranks <= MAX_RANKS:
        raise SourceError(f"{mt_path}: implausible rank count {meta.total_ranks}")
    if not (0 < meta.time_resolution < 1):
        raise SourceError(f"{mt_path}: implausible time resolution {meta.time_resolution}")
    if not (0 <= meta.start_ts < 1e11):
        raise SourceError(f"{mt_path}: implausible start time {meta.start_ts}")
    return meta


def _function_names(data: bytes, mt_path: Path) -> tuple[str, ...]:
    names = data.decode("utf-8", "replace").split("\n")
    if names and names[-1] == "":
        names.pop()
    if not names:
        raise SourceError(f"{mt_path}: no function names")
    return tuple(names)


def _iter_blocks(data: bytes, path: Path) -> Iterator[bytes]:
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


def _read_blocks(path: Path, expected: int, errors: list[str] | None = None) -> list[bytes]:
    """The first ``expected`` zlib blocks of a file; with ``errors``, keep what decodes."""
    data = _read_file(path)
    blocks: list[bytes] = []
    try:
        for block in _iter_blocks(data, path):
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


def _parse_cst(
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
        args = _split_args(raw_args.decode("utf-8", "replace"), arg_count)
        name = names[func_id]
        signatures[terminal] = CallSignature(
            terminal, func_id, name, function_type(name), thread_id, depth, args
        )
    return signatures


def _split_args(text: str, arg_count: int) -> tuple[str, ...]:
    """Recorder ends every argument with a space (spaces inside arguments became '_')."""
    if arg_count == 0 or not text:
        return ()
    if text.endswith(" "):
        text = text[:-1]
    return tuple(text.split(" "))


def _merge_rank_table(
    signatures: dict[int, CallSignature], rank_sigs: dict[int, CallSignature], grammar: _Grammar
) -> _Grammar:
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
    return _shift_terminals(grammar, offset)


@dataclass(slots=True)
class _Grammar:
    rules: dict[int, tuple[np.ndarray, np.ndarray]]  # rule id -> (values, exponents)
    source: Path  # the .cfg file, for error messages


def _parse_cfg(payload: bytes, path: Path) -> _Grammar:
    """Sequitur grammar: n_rules, then per rule (id, n_symbols, (value, exponent) * n)."""
    words = np.frombuffer(payload, dtype="<i4", count=len(payload) // 4)
    if len(words) < 1:
        raise SourceError(f"{path}: grammar truncated (no rule count)")
    n_rules = int(words[0])
    rules: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    pos = 1
    for index in range(max(n_rules, 0)):
        if pos + 2 > len(words):
            raise SourceError(f"{path}: grammar truncated at rule {index} of {n_rules}")
        rule_id, n_symbols = int(words[pos]), int(words[pos + 1])
        pos += 2
        end = pos + 2 * n_symbols
        if n_symbols < 0 or end > len(words):
            raise SourceError(
                f"{path}: grammar rule {rule_id} claims {n_symbols} symbols (truncated)"
            )
        pairs = words[pos:end].astype(np.int64)
        pos = end
        values, exponents = pairs[0::2], pairs[1::2]
        if (exponents < 0).any():
            raise SourceError(f"{path}: grammar rule {rule_id} has a negative repeat")
        rules[rule_id] = (values, exponents)
    if -1 not in rules:
        raise SourceError(f"{path}: grammar has no start rule (-1)")
    return _Grammar(rules, path)


def _shift_terminals(grammar: _Grammar, offset: int) -> _Grammar:
    if offset == 0:
        return grammar
    shifted = {}
    for rule_id, (values, exponents) in grammar.rules.items():
        shifted[rule_id] = (np.where(values >= 0, values + offset, values), exponents)
    return _Grammar(shifted, grammar.source)


def _rule_lengths(grammar: _Grammar) -> dict[int, int]:
    """Expanded length of every rule reachable from the start; rejects cycles and
    missing rules. Iterative so deep hostile grammars cannot exhaust the Python stack."""
    lengths: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[int] = [-1]
    while stack:
        rule_id = stack[-1]
        if rule_id in lengths:
            stack.pop()
            continue
        if rule_id not in grammar.rules:
            raise SourceError(f"{grammar.source}: grammar refers to missing rule {rule_id}")
        values, exponents = grammar.rules[rule_id]
        pending = [int(v) for v in np.unique(values[values < 0]) if int(v) not in lengths]
        if pending:
            if rule_id in visiting:
                raise SourceError(f"{grammar.source}: grammar rule {rule_id} refers to itself")
            visiting.add(rule_id)
            for child in pending:
                if child in visiting:
                    raise SourceError(f"{grammar.source}: grammar rules form a cycle at {child}")
                stack.append(child)
            continue
        visiting.discard(rule_id)
        stack.pop()
        terminal = values >= 0
        total = int(exponents[terminal].sum())
        for value, exponent in zip(
            values[~terminal].tolist(), exponents[~terminal].tolist(), strict=True
        ):
            total += lengths[value] * exponent
            if total > MAX_RECORDS_PER_RANK:
                raise SourceError(
                    f"{grammar.source}: grammar expands to more than {MAX_RECORDS_PER_RANK:,} calls"
                )
        lengths[rule_id] = total
    return lengths


def _expand(grammar: _Grammar) -> np.ndarray:
    """Terminal ids of the start rule, in program order."""
    lengths = _rule_lengths(grammar)
    expanded: dict[int, np.ndarray] = {}
    for rule_id in lengths:  # insertion order = children before parents
        values, exponents = grammar.rules[rule_id]
        nonterminal = np.flatnonzero(values < 0)
        if len(nonterminal) == 0:
            expanded[rule_id] = np.repeat(values, exponents)
            continue
        pieces = []
        start = 0
        for index in nonterminal.tolist():
            if index > start:
                pieces.append(np.repeat(values[start:index], exponents[start:index]))
            pieces.append(np.tile(expanded[int(values[index])], int(exponents[index])))
            start = index + 1
        if start < len(values):
            pieces.append(np.repeat(values[start:], exponents[start:]))
        expanded[rule_id] = np.concatenate(pieces)
    return expanded[-1]


def _decode_rank(
    rank: int,
    grammar: _Grammar,
    words: np.ndarray | None,
    signatures: dict[int, CallSignature],
    meta: TraceMetadata,
    path: Path,
    errors: list[str],
) -> RankTrace | None:
    try:
        terminals = _expand(grammar)
    except SourceError as exc:
        errors.append(f"{exc}; rank {rank} skipped")
        return None
    if len(terminals):
        unknown = ~np.isin(terminals, np.fromiter(signatures, dtype=np.int64))
        if unknown.any():
            errors.append(
                f"{path}: rank {rank} grammar uses {int(unknown.sum())} calls with no "
                "call signature; those calls are dropped"
            )
            terminals = terminals[~unknown]
    n = len(terminals)
    tstart = np.full(n, np.nan)
    tend = np.full(n, np.nan)
    if words is None:
        errors.append(f"{path}: rank {rank} has no timestamps; times left empty")
    else:
        pairs = min(n, len(words) // 2)
        if pairs != n:
            errors.append(
                f"{path}: rank {rank} has {len(words) // 2} timestamp pairs for {n} "
                f"calls; times of the last {n - pairs} calls left empty"
            )
        deltas = words[: 2 * pairs].astype(np.int64)
        start_ticks = np.cumsum(deltas[0::2])
        previous = np.concatenate(([0], start_ticks[:-1]))
        tstart[:pairs] = start_ticks * meta.time_resolution
        tend[:pairs] = (previous + deltas[1::2]) * meta.time_resolution
    return RankTrace(rank, terminals, tstart, tend)
