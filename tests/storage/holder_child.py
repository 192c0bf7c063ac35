"""Hold a tenant open as its writer until stdin closes: `python holder_child.py TENANT_DIR`."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from storage_helpers import open_store

store = open_store(sys.argv[1])
print(f"READY {os.getpid()}", flush=True)
sys.stdin.read()
store.close()
