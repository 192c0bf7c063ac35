"""Helpers shared by the storage tests (a uniquely named module, importable from any test)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from dbsvc.storage import Store

BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))


def user(i: int | None = None, **over) -> dict:
    rec = {"id": i, "email": f"u{i}@example.com" if i is not None else f"anon{id(over)}@x",
           "name": f"user {i}", "age": None, "role": "reader", "joined": "2026-01-01T00:00:00Z",
           "profile": None}
    rec.update(over)
    return rec


def post(i: int | None = None, author: int = 1, **over) -> dict:
    rec = {"id": i, "author_id": author, "title": f"title {i}", "body": "body", "published": False,
           "score": 0.0, "tags": None}
    rec.update(over)
    return rec


def open_store(path: str, **kw) -> Store:
    return Store.open(path, BLOG.MODELS, BLOG.DESCRIPTION, **kw)


def run(coro):
    return asyncio.run(coro)


def dir_image(path: str) -> dict[str, bytes]:
    """Every file under `path` with its bytes (for byte-identical checks)."""
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


