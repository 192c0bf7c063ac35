"""A plainly good value is taken without a call of its field's check, on every bound
(dbsvc/compiler/validators.py rule 8, `_accepted` and `_within`): a value on a field's @min or
@max, on the signed 64-bit range, or of a bool or enum field, costs the validator no call.
test_validators_accept.py holds that the outcome is the check's either way, so a test made
stricter than the check (`<` for `<=` at a bound) changes only this: written for the hand
mutants of docs/mutation.md (session 13, wt-mpo3). Calls are counted with cProfile."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from support.mutation import shared
from tests.compiler.test_validators_accept import CURRENT, SCHEMA

# (model, field, value): each on a bound of the golden schema, or a plain value of a type
# with no bound; each is kept by the check as it is.
PLAIN = [
    ("thing", "n", -5), ("thing", "n", 5),  # @min(-5) @max(5)
    ("thing", "big", -(2**63)), ("thing", "big", 2**63 - 1),  # the int64 range
    ("thing", "f", 0.0), ("thing", "f", 10.5),  # @min(0) @max(10.5)
    ("thing", "s", "a"), ("thing", "s", "abcd"),  # lengths 1 and 4
    ("thing", "t", "xy"),  # @min(2), no @max
    ("thing", "b", False), ("thing", "e", "red"), ("thing", "j", [1, {"x": None}]),
    ("counter", "level", 2.5),  # @max(2.5), no @min
]  # fmt: skip

# (model, field, value) the check converts or refuses: it is called once.
CHECKED = [
    ("thing", "n", 5.0), ("thing", "n", 6), ("thing", "big", 2**63), ("thing", "f", 10), ("thing", "f", 10.6),
    ("thing", "s", ""), ("thing", "s", "abcde"), ("thing", "s", "cafe\u0301"), ("thing", "t", "x"),
    ("thing", "b", 1), ("thing", "e", "blue"), ("thing", "j", None), ("counter", "level", 2.6),
]  # fmt: skip


@pytest.fixture(scope=shared("module"))
def golden() -> Any:
    return compile_schema(load_schema(str(SCHEMA)))


def check_calls(module: Any, model: str, field: str, value: Any) -> int:
    """How many times `validate_patch_<model>` called `check_<model>__<field>` for a body of
    that one field (a refusal raises; the count is taken either way)."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        getattr(module, f"validate_patch_{model}")({field: value}, dict(CURRENT[model]))
    except Exception:  # noqa: BLE001 - the refusals of CHECKED; only the count is asked
        pass
    finally:
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    wanted = f"check_{model}__{field}"
    return sum(row[1] for (_file, _line, fn), row in stats.items() if fn == wanted)


@pytest.mark.parametrize(("model", "field", "value"), PLAIN, ids=lambda v: repr(v)[:20])
def test_a_value_on_a_bound_is_taken_without_calling_its_check(golden: Any, model: str, field: str, value: Any) -> None:
    assert check_calls(golden, model, field, value) == 0


@pytest.mark.parametrize(("model", "field", "value"), CHECKED, ids=lambda v: repr(v)[:20])
def test_a_value_the_check_converts_or_refuses_goes_to_the_check(
    golden: Any, model: str, field: str, value: Any
) -> None:
    assert check_calls(golden, model, field, value) == 1
