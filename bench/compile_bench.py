"""How long a schema takes to become a live module, stage by stage.

Generates a schema of N models (default 50; every field type, every attribute, refs to
earlier models, projections), then times, best of R runs each:

    parse+check   dbsvc.schema.parse_schema(text)
    build_module  IR -> ast.Module
    unparse       ast.unparse of that tree (the text `dbsvc generate` writes)
    compile       compile() of the text
    exec          executing the code object into a fresh module

Usage: python bench/compile_bench.py [--models 50] [--repeat 5]. Not part of the test run.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dbsvc.compiler import build_module, compile_schema
from dbsvc.schema import parse_schema


def schema_text(models: int) -> str:
    """A schema of `models` models, each with twelve fields of every type."""
    out = ["[runtime]", "replication = true", "changefeed_capacity = 1024", ""]
    for i in range(models):
        parent = f"  owner    int       @ref(Model{i - 1}) @filter\n" if i else ""
        out.append(
            f"model Model{i} {{\n"
            f"  id       int       @id\n"
            f"{parent}"
            f"  code     str       @unique @filter @min(1) @max(32)\n"
            f"  title    str       @sort @max(200)\n"
            f"  count    int       @filter @sort @min(0) @default(0)\n"
            f"  ratio    float?    @filter @sort @min(0) @max(1)\n"
            f"  flag     bool      @filter @default(false)\n"
            f"  kind     enum(a, b, c, d) @filter @sort @default(a)\n"
            f"  at       datetime  @sort @filter @default(now)\n"
            f"  day      date?     @filter\n"
            f"  token    uuid      @default(uuid) @filter\n"
            f"  extra    json?\n"
            f"  note     str?      @max(500)\n"
            f"  @projection(brief, id, code, title)\n"
            f"  @projection(stats, count, ratio)\n"
            f"}}\n"
        )
    return "\n".join(out)


def best(repeat: int, func):
    """(best seconds, last result) over `repeat` calls."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    text = schema_text(args.models)
    t_parse, schema = best(args.repeat, lambda: parse_schema(text, "bench.dbs"))
    t_build, tree = best(args.repeat, lambda: build_module(schema))
    t_unparse, source = best(args.repeat, lambda: ast.unparse(tree) + "\n")
    t_compile, code = best(args.repeat, lambda: compile(source, "<bench>", "exec"))

    def run() -> types.ModuleType:
        module = types.ModuleType("bench_generated")
        exec(code, module.__dict__)
        return module

    t_exec, module = best(args.repeat, run)
    t_total, _ = best(args.repeat, lambda: compile_schema(schema))
    assert len(module.MODELS) == args.models

    print(
        f"schema: {args.models} models, {len(text.splitlines())} lines of schema, "
        f"{len(source.splitlines())} generated lines ({len(source) // 1024} KiB); best of {args.repeat}"
    )
    for label, seconds in [
        ("parse+check", t_parse),
        ("build_module", t_build),
        ("unparse", t_unparse),
        ("compile", t_compile),
        ("exec", t_exec),
        ("compile_schema total", t_total),
    ]:
        print(f"  {label:<22}{seconds * 1000:9.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
