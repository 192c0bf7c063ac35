"""The demo blog schema (schemas/blog.dbs) compiled once per test process, for every test
module and kit that only reads it.

Collecting the suite imported it compiled sixteen times or more, some 0.12 s of CPU each, in
each xdist worker (both collect every file). A compiled module can be shared because nothing
a test does with it changes it: its models are frozen `CompiledModel`s, and the stores,
caches and parsers the tests build from it keep their state in themselves. A test that
needs a compile of its own (a fresh module, another schema text, the compiler itself under
test) calls `compile_schema` as before.
"""

from __future__ import annotations

from pathlib import Path

from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema

ROOT = Path(__file__).resolve().parents[2]
BLOG = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
