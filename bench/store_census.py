"""How many `Store` objects are still alive after each test: a pytest plugin, not a test.

    CENSUS=NAME PYTHONPATH=bench python -m pytest -q -n 2 --dist loadfile -p store_census tests/storage

Each worker writes `/tmp/store-census-NAME-<pid>.txt`, a line a test: the stores alive after
it and one `gc.collect()`, the permanent generation's size (`gc.get_freeze_count()`), the
test's id. A store counted there outlives its test: something holds it, or an open or a
compaction froze the heap while it was alive (recovery.py, compactor.py `gc.freeze`) and no
collection looks at it again. The count rises where a test leaves one (and falls when
something unfreezes, as the power-loss harness does). Print where it rises:

    awk 'BEGIN{p=0} $1!=p {print $1-p, $1, $3; p=$1}' /tmp/store-census-NAME-*.txt

It wraps `Store.__init__` to take a weak reference to each store: a measurement of the test
run, never loaded by it. The collection after every test makes the run slower.
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any

from dbsvc.storage import store as store_module

_made: list[weakref.ref] = []
_init = store_module.Store.__init__


def _counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    _made.append(weakref.ref(self))


store_module.Store.__init__ = _counted_init  # type: ignore[method-assign]


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    gc.collect()
    alive = sum(ref() is not None for ref in _made)
    name = os.environ.get("CENSUS", "run")
    with open(f"/tmp/store-census-{name}-{os.getpid()}.txt", "a", encoding="utf-8") as f:
        f.write(f"{alive} {gc.get_freeze_count()} {nodeid}\n")
