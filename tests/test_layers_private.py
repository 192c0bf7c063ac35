"""The house's rule 6 (tests/test_layers.py), as a test: no `from dbsvc.x import _private`, no
`module._private` across modules, and no `param._private` on a parameter typed with another
module's class. A private name is a module's own business; another module that reaches it
breaks when the owner renames it. Read with the scanner of tests/support/importscan.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.importscan import Source, Violation, all_modules, part_of, report, scan, sources


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted_name(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reach(source: Source, modules: frozenset[str]) -> Iterator[Violation]:
    """`module._name` (or `dbsvc.x._name`) where `module` is a name this file bound to
    another dbsvc module by an import."""
    bound: dict[str, str] = {}  # local name -> the dotted module it stands for
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.split(".")[0]
                bound[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        dotted = dotted_name(node.value)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head not in bound:
            continue
        target = f"{bound[head]}.{rest}" if rest else bound[head]
        if target in modules and target != source.module:
            yield Violation(
                source.relative,
                f"{source.relative}:{node.lineno}: {dotted}.{node.attr}: "
                f"{node.attr} is private to {target}; ask it for a public name",
            )


# A named tuple's own methods start with one underscore so as not to clash with field names.
NAMED_TUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def private_state_reach(source: Source) -> Iterator[Violation]:
    """`param._name` where `param` is annotated with a class another dbsvc module defines:
    one module reading another's private state (`store._log_base` in a helper of the store)."""
    classes: dict[str, str] = {}  # a class name imported here -> its module
    for node in ast.walk(source.tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and part_of(node.module) is not None
            and node.module != source.module
        ):
            for alias in node.names:
                if alias.name[:1].isupper():
                    classes[alias.asname or alias.name] = node.module
    for function in ast.walk(source.tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
        typed = {
            argument.arg: classes[name]
            for argument in arguments
            if argument.annotation is not None
            for name in annotation_names(argument.annotation)
            if name in classes
        }
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in typed
                and is_private(node.attr)
                and node.attr not in NAMED_TUPLE_API
            ):
                yield Violation(
                    source.relative,
                    f"{source.relative}:{node.lineno}: {node.value.id}.{node.attr}: "
                    f"private state of {typed[node.value.id]}'s object; "
                    "ask it for a public name",
                )


def annotation_names(annotation: ast.expr) -> Iterator[str]:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            yield node.id


def private_breaks() -> list[Violation]:
    modules = all_modules()
    violations = [
        Violation(found.path, f"{found.where()}: {name} is private to {found.target}; ask it for a public name")
        for found in scan()
        if part_of(found.target) is not None and found.target != found.module
        for name in found.names
        if is_private(name)
    ]
    for source in sources():
        violations.extend(private_reach(source, modules))
        violations.extend(private_state_reach(source))
    return violations


def test_no_private_name_crosses_a_module():
    report(private_breaks(), "no module imports or reaches for another module's _private names")


def test_the_scanner_finds_a_reach_for_a_private_name():
    tree = ast.parse(
        "from dbsvc.storage import logfile\nimport dbsvc.storage.files\n"
        "logfile._frame(b'')\ndbsvc.storage.files._write(1)\nlogfile.frame(b'')\n"
    )
    source = Source(Path("sample.py"), "sample.py", "dbsvc.sample", tree)
    found = list(private_reach(source, frozenset({"dbsvc.storage.logfile", "dbsvc.storage.files"})))
    assert [violation.message.split(": ")[1] for violation in found] == ["logfile._frame", "dbsvc.storage.files._write"]


def test_the_scanner_finds_a_reach_for_another_modules_private_state():
    tree = ast.parse(
        "from dbsvc.storage.store import Store\n"
        "from dbsvc.storage.events import ChangeEvent\n"
        "def f(store: Store, event: 'ChangeEvent', other) -> None:\n"
        "    store._epoch, store.epoch, event._replace(), other._x\n"
        "    event._payload\n"
    )
    source = Source(Path("sample.py"), "sample.py", "dbsvc.storage.replay", tree)
    assert sorted(violation.message.split(": ")[1] for violation in private_state_reach(source)) == [
        "event._payload",
        "store._epoch",
    ]
