"""Hypothesis strategy shared by the tests that read post-job rows back: what a field can
hold when the rows come from a database anyone can write to."""

from __future__ import annotations

from hypothesis import strategies as st


def field_values(text_size: int) -> st.SearchStrategy:
    """None, bools, any int64, any float (NaN and infinities too), short text."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=text_size),
    )
