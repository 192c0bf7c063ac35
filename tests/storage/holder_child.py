"""Hold a tenant open as its writer until stdin closes: `python holder_child.py TENANT_DIR`."""

from __future__ import annotations

import os
import sys

# Run by path as a child process: tests/ on sys.path for the shared kit, `support`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.storage import open_store

store = open_store(sys.argv[1])
print(f"READY {os.getpid()}", flush=True)
sys.stdin.read()
store.close()
