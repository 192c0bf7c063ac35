"""The `ast` constructors every builder uses (dbsvc/compiler/nodes.py), each unparsed and
compared with the Python text it must stand for, and run where the text alone cannot show
the difference (a function's parameters and docstring)."""

from __future__ import annotations

import ast

import pytest

from dbsvc.compiler import nodes as n


def text(node: ast.AST) -> str:
    return ast.unparse(node)


def test_names_constants_and_dotted_reads():
    assert text(n.name("x")) == "x"
    assert isinstance(n.name("x").ctx, ast.Load)
    assert [text(n.const(v)) for v in (None, True, 3, 2.5, "s")] == ["None", "True", "3", "2.5", "'s'"]
    with pytest.raises(AssertionError):
        n.const([1])
    assert text(n.dotted("a")) == "a"
    assert text(n.dotted("a.b.c")) == "a.b.c"
    assert isinstance(n.dotted("a.b").ctx, ast.Load)


def test_calls_subscripts_and_literals():
    assert text(n.call("f")) == "f()"
    assert (
        text(n.call("m.f", n.name("x"), n.const(1), key=n.const("v"), other=n.name("y")))
        == "m.f(x, 1, key='v', other=y)"
    )
    assert text(n.call(n.name("g"), n.name("x"))) == "g(x)"
    assert text(n.subscript(n.name("row"), n.const(2))) == "row[2]"
    assert text(n.item("body", "title")) == "body['title']"
    assert text(n.literal({"a": [1, (2, None)], "b": {"c": True}})) == "{'a': [1, (2, None)], 'b': {'c': True}}"
    assert text(n.literal(())) == "()"
    assert text(n.tuple_([n.const(1)])) == "(1,)"
    assert text(n.str_set(["a", "b"])) == "{'a', 'b'}"
    with pytest.raises(AssertionError) as refused:
        n.str_set([])
    assert str(refused.value) == "an empty set display does not exist"
    assert text(n.dict_([(n.const("k"), n.name("v")), (n.const("l"), n.const(2))])) == "{'k': v, 'l': 2}"


def test_operators():
    a, b, c = n.name("a"), n.name("b"), n.name("c")
    assert text(n.concat(n.const("x"))) == "'x'"
    assert text(n.concat(a, b, c)) == "a + b + c"
    assert [text(f(n.name("a"), n.name("b"))) for f in (n.eq, n.ne, n.lt, n.gt, n.in_, n.not_in, n.is_, n.is_not)] == [
        "a == b",
        "a != b",
        "a < b",
        "a > b",
        "a in b",
        "a not in b",
        "a is b",
        "a is not b",
    ]
    assert text(n.is_none(n.name("a"))) == "a is None"
    assert text(n.is_not_none(n.name("a"))) == "a is not None"
    assert text(n.type_is_not(n.name("v"), "int")) == "type(v) is not int"
    assert text(n.and_(n.name("a"))) == "a"
    assert text(n.and_(n.name("a"), n.name("b"), n.name("c"))) == "a and b and c"
    assert text(n.or_(n.name("a"))) == "a"
    assert text(n.or_(n.name("a"), n.name("b"))) == "a or b"
    assert text(n.not_(n.name("a"))) == "not a"


def test_statements():
    assert text(n.assign("x", n.const(1))) == "x = 1"
    assert text(n.set_item("body", n.const("k"), n.name("v"))) == "body['k'] = v"
    assert text(n.expr(n.call("f"))) == "f()"
    assert text(n.return_(n.name("x"))) == "return x"
    assert text(n.raise_(n.call("E", n.const("m")))) == "raise E('m')"
    assert text(n.if_(n.name("a"), [n.return_(n.const(1))])) == "if a:\n    return 1"
    assert text(n.if_(n.name("a"), [n.return_(n.const(1))], [n.return_(n.const(2))])) == (
        "if a:\n    return 1\nelse:\n    return 2"
    )
    chain = n.if_chain(
        [(n.name("a"), [n.return_(n.const(1))]), (n.name("b"), [n.return_(n.const(2))])], [n.return_(n.const(3))]
    )
    assert len(chain) == 1
    assert text(chain[0]) == "if a:\n    return 1\nelif b:\n    return 2\nelse:\n    return 3"
    assert n.if_chain([], [n.return_(n.const(3))])[0].value.value == 3  # type: ignore[attr-defined]
    assert text(n.for_("k", n.name("body"), [n.expr(n.call("f", n.name("k")))])) == "for k in body:\n    f(k)"
    assert text(n.for_(("k", "v"), n.name("pairs"), [n.expr(n.name("k"))])) == "for k, v in pairs:\n    k"
    assert text(n.import_("dbsvc.rules", "_dbsvc_rules")) == "import dbsvc.rules as _dbsvc_rules"
    assert text(n.import_("json")) == "import json"
    assert text(n.import_from("dbsvc.errors", ["A", "B"])) == "from dbsvc.errors import A, B"


def _run(func: ast.FunctionDef):
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    namespace: dict = {}
    exec(compile(module, "<test>", "exec"), namespace)
    return namespace[func.name]


def test_a_function_with_a_one_line_docstring():
    func = n.function("add", ["a", "b"], "Adds.", [n.return_(n.concat(n.name("a"), n.name("b")))])
    assert text(func) == 'def add(a, b):\n    """Adds."""\n    return a + b'
    made = _run(func)
    assert made(2, 3) == 5 and made.__doc__ == "Adds."


def test_a_function_whose_docstring_has_lines_and_a_blank_one():
    func = n.function("f", [], "First.\n\nThird.\nFourth.", [n.return_(n.const(None))])
    assert text(func) == 'def f():\n    """First.\n\n    Third.\n    Fourth.\n    """\n    return None'
    assert _run(func).__doc__ == "First.\n\n    Third.\n    Fourth.\n    "


def test_the_trees_are_valid_python_not_only_valid_text():
    """Every node the builders make compiles as a tree too (contexts, a one-value `and`):
    the generated module is unparsed first, but a malformed tree that unparse happens to
    print would break the day it is compiled directly or unparse grows stricter."""
    body = [
        n.import_from("json", ["dumps"]),
        n.import_("os.path"),
        n.assign("out", n.literal({"list": [1, 2], "pair": (3, 4)})),
        n.set_item("out", n.const("key"), n.call("os.path.basename", n.name("path"))),
        n.assign("seen", n.literal([])),
        n.for_(
            ("k", "v"),
            n.call("sorted", n.call(n.dotted("out.items"))),
            [n.expr(n.call(n.dotted("seen.append"), n.tuple_([n.name("k"), n.subscript(n.name("out"), n.name("k"))])))],
        ),
        n.for_(
            "k", n.name("out"), [n.if_(n.and_(n.is_none(n.name("k"))), [n.raise_(n.call("ValueError", n.name("k")))])]
        ),
        n.if_(n.or_(n.not_in(n.const("key"), n.name("out"))), [n.raise_(n.call("KeyError", n.const("key")))]),
        n.return_(n.call("dumps", n.name("seen"))),
    ]
    made = _run(n.function("f", ["path"], "Doc.", body))
    assert made("/a/b.txt") == '[["key", "b.txt"], ["list", [1, 2]], ["pair", [3, 4]]]'
