"""Makes the shared test kit importable as `support` (tests/support/) from every test file.

pytest runs with `--import-mode=importlib` (setup.cfg): test files are imported without
touching sys.path, so they may share basenames across folders. This puts `tests/` itself on
sys.path, once, so `from support.server import start_server` works from any folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
