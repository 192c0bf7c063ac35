"""Byte images of directory trees: `dir_image(path)` before and after an operation tells
whether it touched anything, down to the last byte (a refused write, a read-only open)."""

from __future__ import annotations

import os


def dir_image(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under `path`, by path relative to it, with its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out
