"""Recorder's Sequitur grammars: parse (.cfg), expand to a rank's call sequence, and pair
that sequence with the rank's time deltas, consumed strictly in expansion order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.recorder.model import CallSignature, RankTrace, TraceMetadata

# A grammar that expands beyond this many calls per rank is treated as corrupt (it would
# need > 2 GB of memory to hold); real traces this large are out of scope for a post-job hook.
MAX_RECORDS_PER_RANK = 200_000_000


@dataclass(slots=True)
class Grammar:
    rules: dict[int, tuple[np.ndarray, np.ndarray]]  # rule id -> (values, exponents)
    source: Path  # the .cfg file, for error messages


def parse_cfg(payload: bytes, path: Path) -> Grammar:
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
    return Grammar(rules, path)


def shift_terminals(grammar: Grammar, offset: int) -> Grammar:
    if offset == 0:
        return grammar
    shifted = {}
    for rule_id, (values, exponents) in grammar.rules.items():
        shifted[rule_id] = (np.where(values >= 0, values + offset, values), exponents)
    return Grammar(shifted, grammar.source)


def rule_lengths(grammar: Grammar) -> dict[int, int]:
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


def expand(grammar: Grammar) -> np.ndarray:
    """Terminal ids of the start rule, in program order."""
    lengths = rule_lengths(grammar)
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


def decode_rank(
    rank: int,
    grammar: Grammar,
    words: np.ndarray | None,
    signatures: dict[int, CallSignature],
    meta: TraceMetadata,
    path: Path,
    errors: list[str],
) -> RankTrace | None:
    try:
        terminals = expand(grammar)
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
