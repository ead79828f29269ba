"""The signals' formula inputs and ratios are computed for all of a module's formulas at once
(a few whole-matrix operations, big tables piece by piece): on hostile counters (-1, garbage
timers, -0.0, NaN, huge values, missing counters) they must equal, bit for bit, the
per-column definitions: ``_sum_columns`` for a sum of counters, and numerator * scale /
denominator with its NA reasons for a ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hpcmon.post_job.darshan import signals
from hpcmon.post_job.darshan.model import ModuleTable
from hpcmon.post_job.darshan.signals import LAYOUTS, NA_REASONS

_CODE = {reason: number for number, reason in enumerate(NA_REASONS, start=1)}


def formula_counters(module: str) -> list[str]:
    """Every counter the module's formulas name, and one they do not."""
    names = {
        name
        for _, numerator, denominator, _, _ in signals._ratio_formulas(module)
        for name in (*numerator, *denominator)
    }
    layout = LAYOUTS[module]
    names |= {name for name in (layout.meta_time, layout.slowest_rank_time) if name}
    if module == "POSIX":
        names |= {"POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN", "POSIX_F_VARIANCE_RANK_BYTES"}
    return sorted(names) + [f"{module}_NOT_IN_ANY_FORMULA"]


INTEGERS = st.one_of(
    st.integers(0, 50),
    st.sampled_from([-1, -1, -2, -(2**62), 2**53 + 1, 2**62]),
)
FLOATS = st.one_of(
    st.floats(0, 100),
    st.sampled_from([-1.0, -0.0, 0.0, np.nan, np.inf, -np.inf, -222.0, -1e-304, 1e11, 5e-324]),
)


@st.composite
def tables(draw) -> ModuleTable:
    module = draw(st.sampled_from(sorted(LAYOUTS)))
    rows = draw(st.integers(0, 7))
    counters, fcounters = {}, {}
    for name in formula_counters(module):
        if draw(st.integers(0, 9)) == 0:
            continue  # a counter this log lacks
        if "_F_" in name:
            fcounters[name] = draw(hnp.arrays(np.float64, rows, elements=FLOATS))
        else:
            counters[name] = draw(hnp.arrays(np.int64, rows, elements=INTEGERS))
    return ModuleTable(
        module=module,
        record_ids=np.arange(rows, dtype=np.uint64),
        ranks=np.zeros(rows, dtype=np.int64),
        counters=counters,
        fcounters=fcounters,
    )


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def reference_ratio(table: ModuleTable, formula) -> tuple[np.ndarray, np.ndarray]:
    """One ratio signal column by column, as the spec's formula table reads."""
    _, numerator_names, denominator_names, zero_reason, scale = formula
    rows = len(table)
    numerator = signals._sum_columns(table, numerator_names) if numerator_names else None
    denominator = signals._sum_columns(table, denominator_names) if denominator_names else None
    if numerator is None or denominator is None:
        return np.zeros(rows), np.full(rows, _CODE["not_available"], np.uint8)
    num = numerator.values.astype(np.float64) * scale
    den = denominator.values.astype(np.float64)
    with np.errstate(over="ignore"):
        values = np.divide(num, den, out=np.zeros(rows), where=den > 0)
    codes = np.where(den > 0, 0, _CODE[zero_reason]).astype(np.uint8)
    overflow = ~np.isfinite(values)  # a ratio no float holds: the timer is garbage
    values[overflow] = 0.0
    codes[overflow] = _CODE["invalid_time"]
    codes[numerator.invalid | denominator.invalid] = _CODE["invalid_time"]
    codes[numerator.unmonitored | denominator.unmonitored] = _CODE["not_monitored"]
    return values, codes


def check(table: ModuleTable) -> None:
    inputs = signals._Inputs(table)
    for names in {names for f in signals._ratio_formulas(table.module) for names in f[1:3]}:
        if not names:
            continue
        batched, alone = inputs.get(names), signals._sum_columns(table, names)
        assert (batched is None) == (alone is None), names
        if batched is not None and alone is not None:
            assert same(batched.values, alone.values), names
            assert same(batched.unmonitored, alone.unmonitored), names
            assert same(batched.invalid, alone.invalid), names
    ratios = signals._ratios(inputs)
    for formula in signals._ratio_formulas(table.module):
        values, codes = reference_ratio(table, formula)
        assert same(ratios[formula[0]].values, values), formula[0]
        assert same(ratios[formula[0]].codes, codes), formula[0]


@settings(max_examples=150, deadline=None)
@given(table=tables())
def test_batched_inputs_and_ratios_equal_the_column_by_column_definitions(table):
    check(table)


@settings(max_examples=40, deadline=None)
@given(table=tables())
def test_a_big_table_in_pieces_gives_the_same_inputs_and_ratios(table):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(signals, "_PIECE", 2)  # small tables take the path of big ones
        check(table)


def test_a_ratio_no_float_holds_is_na_invalid_time_without_a_warning(tmp_path) -> None:
    """A positive timer of 1e-305 s under 9e18 bytes: bytes/time overflows a double. The hook
    says NA(invalid_time) for that record's and module's bandwidths (an infinite value would
    be dropped from the line silently) and prints no numpy warning on stderr."""
    import warnings
    from pathlib import Path

    from hpcmon.post_job.darshan import collect_darshan
    from hpcmon.post_job.model import JobContext

    source = Path(__file__).resolve().parents[1] / "data/darshan/text"
    text = (source / "mpi-io-test-x86_64-3.5.0.txt").read_text()
    for name, old, new in (
        ("POSIX_BYTES_READ", "67108864", "9000000000000000000"),
        ("POSIX_F_READ_TIME", "0.045976", "1e-305"),
    ):
        assert f"\t{name}\t{old}\t" in text
        text = text.replace(f"\t{name}\t{old}\t", f"\t{name}\t{new}\t")
    log = tmp_path / "hostile.txt"
    log.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output = collect_darshan([], [log], JobContext("1"))
    assert not output.errors
    shared = [
        p
        for p in output.points
        if p.measurement == "darshan_record"
        and p.tags["module"] == "POSIX"
        and p.fields["rank"] == -1
    ]
    assert shared
    for point in shared:
        na_reasons = point.fields["na_reasons"]
        assert isinstance(na_reasons, str) and "read_bw:invalid_time" in na_reasons
    assert all("read_bw" not in p.fields for p in shared)
    assert all(
        math.isfinite(v) for p in output.points for v in p.fields.values() if isinstance(v, float)
    )
