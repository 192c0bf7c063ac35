"""The house's rule 6 (tests/test_layers.py), as a test: no `from dbsvc.x import _private`, no
`module._private` across modules, and no `param._private` on a parameter typed with another
module's class. A private name is a module's own business; another module that reaches it
breaks when the owner renames it. Read with the scanner of tests/support/importscan.py.

The tests are held to it too, for state: a test that reads `obj._name`, where `_name` is
private state of a dbsvc class (a `self._name` it assigns or a `__slots__` entry), breaks
when the class renames it and tests what the class keeps, not what it answers
(test_storage_descending_cursor_edges.py read `index._keys`; it asks `key_sublists` now).
A test file's own private names (its helpers, its classes' state) are its own business, and
patching a module's private function is not state. `TESTS_READING_STATE` lists the reads
left, each with why; one no longer made must leave the list.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from support.importscan import ROOT, Source, Violation, all_modules, part_of, report, scan, sources


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


# Test files that still read private state of a dbsvc object: file -> {name: why}. Shrinks only.
TESTS_READING_STATE: dict[str, dict[str, str]] = {
    "tests/realtime/test_realtime_broker.py": {
        "_queue": "one queued frame sent by hand, as a transport would: the pump sends both small"
        " frames in one batch, so no public call leaves the second queued"
    }
}
NOT_STATE = frozenset({"_fields"})  # a named tuple's own API, not state
REACH = re.compile(r"(?<!\bself)(?<!\bcls)\.(_[A-Za-z]\w*)")  # `.name` after anything but self or cls


def private_state_names() -> frozenset[str]:
    """Every `self._name` a dbsvc module assigns and every private `__slots__` entry."""
    names: set[str] = set()
    for source in sources():
        for node in ast.walk(source.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and is_private(node.attr)
            ):
                names.add(node.attr)
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
            ):
                names.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and is_private(c.value)
                )
    return frozenset(names - NOT_STATE)


def state_reads(tree: ast.Module, state: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of each `obj._name` in a test file where `_name` is dbsvc state and not a
    name of the file's own (a helper, a class, a variable, its objects' `self._name`)."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in state
            and node.attr not in own
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            yield node.lineno, node.attr


def test_no_test_reads_private_state_of_a_dbsvc_object_but_those_listed():
    state = private_state_names()
    found: dict[str, set[str]] = {}
    violations = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        allowed = TESTS_READING_STATE.get(relative, {})
        text = path.read_text(encoding="utf-8")
        if not any(name in state for name in REACH.findall(text)):
            continue  # parsed only with a candidate: a file's parse costs more than the search
        for line, name in state_reads(ast.parse(text), state):
            found.setdefault(relative, set()).add(name)
            if name not in allowed:
                violations.append(
                    Violation(
                        relative,
                        f"{relative}:{line}: .{name} is private state of a dbsvc object; ask it for a public name",
                    )
                )
    for relative, names in TESTS_READING_STATE.items():
        for name in sorted(set(names) - found.get(relative, set())):
            violations.append(
                Violation(relative, f"{relative}: reads .{name} no more: take it off TESTS_READING_STATE")
            )
    report(violations, "no test reads a dbsvc object's private state (but TESTS_READING_STATE)")


def test_the_test_scanner_finds_a_read_of_state_and_leaves_the_files_own_names():
    tree = ast.parse(
        "class Fake:\n    def __init__(self):\n        self._mine = 1\n"
        "def _helper(): ...\n"
        "def test(index, fake):\n    index._keys, fake._mine, index.key_sublists, self._keys, mod._helper\n"
    )
    assert list(state_reads(tree, frozenset({"_keys", "_mine", "_helper"}))) == [(6, "_keys")]
