"""Fixture scopes that follow mutmut (docs/mutation.md, "A mapping gap for the compiler").

mutmut records which test calls which function while the test runs, its fixtures included,
and runs a mutant only against the tests it recorded. A fixture shared by a module or the
session runs its body once, inside the first test that asks for it, so every function that
body calls (a schema compiled by `compile_schema`, every builder of `dbsvc/compiler/`) would
be recorded for that first test only. Under mutmut (it sets `MUTANT_UNDER_TEST`, to "stats"
while recording and to the mutant's name after) such fixtures run once per test instead;
outside it they keep their scope, so the normal suite stays as fast as it is.
"""

from __future__ import annotations

import os

UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


def shared(scope: str) -> str:
    """The scope of a fixture that computes something from the code under test: `scope`
    normally, "function" under mutmut."""
    return "function" if UNDER_MUTMUT else scope
