"""The `supervisor` fixture for the supervisor tests here (test_supervisor_loop.py and
test_supervisor_waits.py): defined with its `Run` and cues in tests/support/supervisor_kit.py,
which both import by name for the cues; pytest finds a fixture by its name in a conftest, so
it is named here once rather than imported into each test module, where a linter reads the
test's parameter as hiding the import."""

from __future__ import annotations

from support.supervisor_kit import supervisor

__all__ = ["supervisor"]
