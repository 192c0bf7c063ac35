"""Hypothesis strategies for the values a record's field may hold, shared by the storage
tests that check an encoding against the stored bytes (test_storage_shared_encoding.py,
test_storage_kept_texts.py)."""

from __future__ import annotations

from hypothesis import strategies as st

# One JSON scalar as a record holds it: null, a bool, a signed 64-bit int, a finite float, any text.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
