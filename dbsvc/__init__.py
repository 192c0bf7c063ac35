"""dbsvc: a database service compiled from a schema file.

This module holds the version and nothing else: no logic, no imports, so every part may
read `__version__` without loading anything. It is the first module of every entry point,
so it stays in the syntax every Python parses (dbsvc/launch.py, rule 1): an interpreter too
old for dbsvc gets as far as the version check.

The package is layered, and imports point one way only (docs/architecture.md draws each
part and what it may import; tests/test_layers.py fails on any import against it):

    errors <- schema <- compiler
    errors <- runtime <- storage, http, auth <- realtime, replica <- app <- service <- cli

storage and http know nothing of each other or of realtime; realtime knows storage's events
and http's session interface, never a socket; app ties them together.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
