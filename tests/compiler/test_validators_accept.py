"""A validator takes a plainly good value without calling its field's check
(dbsvc/compiler/validators.py rule 8): whatever the value, the validator's outcome for a
field is the check function's own, the same value of the same type or the same violation.
Every field of tests/compiler/golden/validators.dbs (every type, every bound), through
validate_patch (one field at a time), validate_create and validate_replace."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbsvc.compiler import compile_schema
from dbsvc.errors import ConstraintViolation
from dbsvc.schema import load_schema
from support.mutation import shared

SCHEMA = Path(__file__).resolve().parent / "golden" / "validators.dbs"

# (model, field) pairs of the golden schema but its ids (an id's check is the same int's
# or str's check as another field's, and a PATCH may not change it)
FIELDS = [("thing", f) for f in ("n", "big", "f", "s", "t", "b", "e", "at", "day", "u", "j")] + [("counter", "level")]
CURRENT = {
    "thing": {"key": "k1", "n": 0, "big": None, "f": 1.0, "s": "ab", "t": "xy", "b": True, "e": "green",
              "at": "2024-01-01T00:00:00Z", "day": None, "u": "00000000-0000-4000-8000-000000000000", "j": 1},
    "counter": {"id": 1, "level": None},
}  # fmt: skip

EDGES = [
    None, True, False, 0, 1, -1, 5, 6, -5, -6, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30,
    0.0, -0.0, 1.0, 2.5, 2.50001, 10.5, 10.6, -0.5, 3.0, math.nan, math.inf, -math.inf, 1e308,
    "", "a", "ab", "abcd", "abcde", "caf\u00e9", "cafe\u0301", "e\u0301\u0301\u0301", "red", "green", "Red",
    "2024-01-01T00:00:00Z", "2024-01-01", "00000000-0000-4000-8000-000000000000", ".", [], [1], {}, {"a": 1},
]  # fmt: skip


@pytest.fixture(scope=shared("module"))
def golden() -> Any:
    return compile_schema(load_schema(str(SCHEMA)))


def same(a: Any, b: Any) -> bool:
    """Equal, of the same type, with the same sign of zero (a float stays a float)."""
    if a is b:  # (NaN, which a json field keeps)
        return True
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def by_check(module: Any, model: str, field: str, value: Any) -> tuple[str, Any]:
    errors: list[dict[str, str]] = []
    kept = getattr(module, f"check_{model}__{field}")(value, errors)
    return ("refused", errors) if errors else ("kept", kept)


def by_patch(module: Any, model: str, field: str, value: Any) -> tuple[str, Any]:
    try:
        record = getattr(module, f"validate_patch_{model}")({field: value}, dict(CURRENT[model]))
    except ConstraintViolation as exc:
        return ("refused", exc.errors)
    return ("kept", record[field])


def agree(module: Any, model: str, field: str, value: Any) -> None:
    want, got = by_check(module, model, field, value), by_patch(module, model, field, value)
    assert want[0] == got[0] and (want[1] == got[1] if want[0] == "refused" else same(want[1], got[1])), (
        field, value, want, got)  # fmt: skip


@pytest.mark.parametrize(("model", "field"), FIELDS)
def test_each_field_takes_or_refuses_each_edge_value_as_its_check_does(golden: Any, model: str, field: str) -> None:
    for value in EDGES:
        agree(golden, model, field, value)


# (the fixture is the module's, but a function's under mutmut: compiled from each mutant)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(FIELDS),
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats()
    | st.text(max_size=6)
    | st.lists(st.integers(), max_size=2),
)
def test_a_field_takes_any_value_as_its_check_does(golden: Any, field: tuple[str, str], value: Any) -> None:
    agree(golden, field[0], field[1], value)


def test_create_and_replace_keep_the_same_record_as_the_checks(golden: Any) -> None:
    """A whole body through validate_create and validate_replace: the record the checks
    alone make of it (every plainly good value, and one value of each field converted)."""
    body = {"key": "k2", "n": -5, "big": 2**63 - 1, "f": 10.5, "s": "abcd", "t": "zz", "b": False, "e": "red",
            "at": "2024-01-01T01:00:00+01:00", "day": "2024-02-29", "u": "00000000-0000-4000-8000-00000000000A",
            "j": [1, {"x": None}]}  # fmt: skip
    for changed in ({}, {"n": 5.0, "f": 10, "s": "cafe\u0301", "t": None}):
        given_body = {**body, **changed}
        want = {f: by_check(golden, "thing", f, v)[1] for f, v in given_body.items()}
        for record in (golden.validate_create_thing(given_body), golden.validate_replace_thing(given_body, "k2")):
            assert list(record) == list(want)
            assert all(same(record[f], want[f]) for f in want), (record, want)
