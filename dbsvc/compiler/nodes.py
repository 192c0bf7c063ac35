"""Tiny constructors for `ast` nodes, so the builders read like the code they emit.

The builders never glue source strings: every statement is a tree made here, and
`ast.unparse` turns the finished module into text (pytest's assertion rewriter works the
same way). Conventions:

- `name("x")` is a variable read; a plain `str` argument is never silently turned into a
  name or a constant, except where a parameter says "dotted name" (`call`, `attr`).
- Every helper returns a fresh node; nodes are never shared between two places in a tree.
- Nodes carry no source locations: the finished tree is unparsed and the *text* is
  compiled, so `dbsvc generate` output and tracebacks agree line for line. Only `def`,
  `for` and assignments get `lineno=0`, which `ast.unparse` reads to look up type comments.

Imports only the standard library.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Sequence
from typing import Any

Stmts = list[ast.stmt]


def name(identifier: str) -> ast.Name:
    """A variable read."""
    return ast.Name(id=identifier, ctx=ast.Load())


def const(value: Any) -> ast.Constant:
    """A constant: None, bool, int, float, str."""
    assert value is None or isinstance(value, (bool, int, float, str)), value
    return ast.Constant(value=value)


def dotted(path: str) -> ast.expr:
    """`"a.b.c"` -> the expression reading `a.b.c`."""
    head, *rest = path.split(".")
    node: ast.expr = name(head)
    for part in rest:
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def call(func: str | ast.expr, *args: ast.expr, **kwargs: ast.expr) -> ast.Call:
    """A call; `func` as a str is a dotted name."""
    target = dotted(func) if isinstance(func, str) else func
    keywords = [ast.keyword(arg=key, value=value) for key, value in kwargs.items()]
    return ast.Call(func=target, args=list(args), keywords=keywords)


def subscript(value: ast.expr, key: ast.expr) -> ast.Subscript:
    """`value[key]`."""
    return ast.Subscript(value=value, slice=key, ctx=ast.Load())


def item(variable: str, key: Any) -> ast.Subscript:
    """`variable[key]` for a constant key."""
    return subscript(name(variable), const(key))


def literal(value: Any) -> ast.expr:
    """A JSON-like value (dict, list, tuple, scalars) as a literal expression."""
    if isinstance(value, dict):
        return ast.Dict(keys=[literal(k) for k in value], values=[literal(v) for v in value.values()])
    if isinstance(value, list):
        return ast.List(elts=[literal(v) for v in value], ctx=ast.Load())
    if isinstance(value, tuple):
        return tuple_(literal(v) for v in value)
    return const(value)


def tuple_(items: Iterable[ast.expr]) -> ast.Tuple:
    return ast.Tuple(elts=list(items), ctx=ast.Load())


def str_set(items: Iterable[str]) -> ast.Set:
    """A set display of strings; `x in {...}` compiles to a frozenset constant."""
    members = list(items)
    assert members, "an empty set display does not exist"
    return ast.Set(elts=[const(m) for m in members])


def dict_(pairs: Sequence[tuple[ast.expr, ast.expr]]) -> ast.Dict:
    return ast.Dict(keys=[k for k, _ in pairs], values=[v for _, v in pairs])


def concat(*parts: ast.expr) -> ast.expr:
    """`a + b + c` (string building in messages)."""
    node = parts[0]
    for part in parts[1:]:
        node = ast.BinOp(left=node, op=ast.Add(), right=part)
    return node


def compare(left: ast.expr, op: ast.cmpop, right: ast.expr) -> ast.Compare:
    return ast.Compare(left=left, ops=[op], comparators=[right])


def eq(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.Eq(), right)


def ne(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.NotEq(), right)


def lt(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.Lt(), right)


def gt(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.Gt(), right)


def in_(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.In(), right)


def not_in(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.NotIn(), right)


def is_(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.Is(), right)


def is_not(left: ast.expr, right: ast.expr) -> ast.Compare:
    return compare(left, ast.IsNot(), right)


def is_none(value: ast.expr) -> ast.Compare:
    return is_(value, const(None))


def is_not_none(value: ast.expr) -> ast.Compare:
    return is_not(value, const(None))


def type_is_not(value: ast.expr, type_name: str) -> ast.Compare:
    """`type(value) is not T`: exact, so a bool is never taken for an int."""
    return is_not(call("type", value), name(type_name))


def and_(*values: ast.expr) -> ast.expr:
    return values[0] if len(values) == 1 else ast.BoolOp(op=ast.And(), values=list(values))


def or_(*values: ast.expr) -> ast.expr:
    return values[0] if len(values) == 1 else ast.BoolOp(op=ast.Or(), values=list(values))


def not_(value: ast.expr) -> ast.UnaryOp:
    return ast.UnaryOp(op=ast.Not(), operand=value)


def assign(target: str, value: ast.expr) -> ast.Assign:
    """`target = value` for a plain variable."""
    return ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=value, lineno=0)


def set_item(variable: str, key: ast.expr, value: ast.expr) -> ast.Assign:
    """`variable[key] = value`."""
    target = ast.Subscript(value=name(variable), slice=key, ctx=ast.Store())
    return ast.Assign(targets=[target], value=value, lineno=0)


def expr(value: ast.expr) -> ast.Expr:
    """An expression statement (a call whose result is dropped)."""
    return ast.Expr(value=value)


def return_(value: ast.expr) -> ast.Return:
    return ast.Return(value=value)


def raise_(exc: ast.expr) -> ast.Raise:
    return ast.Raise(exc=exc, cause=None)


def if_(test: ast.expr, body: Sequence[ast.stmt], orelse: Sequence[ast.stmt] | None = None) -> ast.If:
    return ast.If(test=test, body=list(body), orelse=list(orelse or []))


def if_chain(branches: Sequence[tuple[ast.expr, Sequence[ast.stmt]]], orelse: Sequence[ast.stmt]) -> Stmts:
    """`if a: ... elif b: ... else: ...` from (test, body) pairs."""
    tail: Stmts = list(orelse)
    for test, body in reversed(branches):
        tail = [if_(test, body, tail)]
    return tail


def for_(target: str | tuple[str, ...], iterable: ast.expr, body: Sequence[ast.stmt]) -> ast.For:
    """`for target in iterable: body` (target a name or a tuple of names)."""
    if isinstance(target, str):
        store: ast.expr = ast.Name(id=target, ctx=ast.Store())
    else:
        store = ast.Tuple(elts=[ast.Name(id=t, ctx=ast.Store()) for t in target], ctx=ast.Store())
    return ast.For(target=store, iter=iterable, body=list(body), orelse=[], lineno=0)


def function(func_name: str, params: Sequence[str], docstring: str, body: Sequence[ast.stmt]) -> ast.FunctionDef:
    """`def func_name(params): "docstring"; body`."""
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=p) for p in params],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    if "\n" in docstring:  # indent continuation lines the way a hand-written docstring is
        first, *rest = docstring.split("\n")
        docstring = "\n".join([first, *[("    " + line) if line else "" for line in rest]]) + "\n    "
    # Type parameters (PEP 695) are a field from 3.12 on.
    version_fields: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}
    return ast.FunctionDef(
        name=func_name,
        args=args,
        body=[expr(const(docstring)), *body],
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=0,
        **version_fields,
    )


def import_(module: str, alias: str | None = None) -> ast.Import:
    """`import module [as alias]`."""
    return ast.Import(names=[ast.alias(name=module, asname=alias)])


def import_from(module: str, names: Sequence[str]) -> ast.ImportFrom:
    """`from module import a, b`."""
    return ast.ImportFrom(module=module, names=[ast.alias(name=n) for n in names], level=0)
