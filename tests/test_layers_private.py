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

And the tests reach no private name of dbsvc at all: no `from dbsvc.x import _name`, no
`module._name`, no `Class._name` of a class imported from dbsvc, no `setattr(module,
"_name", ...)`. A rule or a kernel worth a test of its own gets a public name whose
docstring says why; an order of events is made by the fault seam (storage/files.py
`FaultPlan`, `OP:N:HOLD=<path>`), not by a patched private function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Container, Iterator
from pathlib import Path

from support.importscan import ROOT, Source, Violation, all_modules, imports_in, part_of, report, scan, sources


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


def private_attributes(tree: ast.AST, owners: Container[str]) -> Iterator[ast.Attribute]:
    """Each `Name._x` in `tree` whose `Name` is one of `owners` (a named tuple's own `_replace`,
    `_asdict` and the like aside): the one shape both reach checks below look for."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in owners
            and is_private(node.attr)
            and node.attr not in NAMED_TUPLE_API
        ):
            yield node


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
        for node in private_attributes(function, typed):
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


# A test file that may reach a private name: `x._name` (not self's or cls's), a private name
# in an import (on its line or alone on one of a parenthesised list's), or a `setattr(`.
CANDIDATE = re.compile(
    r"(?<!\bself)(?<!\bcls)\._[A-Za-z]|import[^\n]*[\s,(]_[A-Za-z]|^\s+_[A-Za-z]\w*,?\s*$|setattr\(", re.M
)


def sources_of_the_tests() -> Iterator[Source]:
    """The test files that import dbsvc and hold a candidate, parsed (a parse costs more than
    the search: one in seven is parsed)."""
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "dbsvc" not in text or not CANDIDATE.search(text):
            continue
        relative = path.relative_to(ROOT).as_posix()
        module = relative[: -len(".py")].replace("/", ".")
        yield Source(path, relative, module, ast.parse(text, relative))


def patched_private_names(source: Source, modules: frozenset[str]) -> Iterator[Violation]:
    """`setattr(module, "_name", ...)` (monkeypatch's or the builtin's) where `module` is a
    name this file bound to a dbsvc module: a private name replaced by its name."""
    bound = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(source.tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
        for alias in node.names
        if f"{node.module}.{alias.name}" in modules
    }
    for node in ast.walk(source.tree):
        if (
            isinstance(node, ast.Call)
            and dotted_name(node.func) in ("setattr", "monkeypatch.setattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in bound
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            yield Violation(
                source.relative,
                f"{source.relative}:{node.lineno}: {node.args[0].id}.{node.args[1].value} patched: "
                f"{node.args[1].value} is private to {bound[node.args[0].id]}; ask it for a public name",
            )


def reached_through_an_imported_name(source: Source, modules: frozenset[str]) -> Iterator[Violation]:
    """`Name._name` where `Name` is a class or function this file imported from a dbsvc
    module (`VerifyKey._ec_checker`): a private member reached from outside."""
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(source.tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level and part_of(node.module) is not None
        for alias in node.names
        if f"{node.module}.{alias.name}" not in modules
    }
    for node in private_attributes(source.tree, imported):
        yield Violation(
            source.relative,
            f"{source.relative}:{node.lineno}: {node.value.id}.{node.attr}: "
            f"{node.attr} is private to {imported[node.value.id]}.{node.value.id}; ask it for a public name",
        )


def test_no_test_imports_reaches_or_patches_a_private_name_of_dbsvc():
    """The tests drive public surfaces: no `from dbsvc.x import _name`, no `module._name`, no
    `setattr(module, "_name", ...)`. A rule or kernel worth testing alone gets a public name
    whose docstring says so (auth/settings.py `env_value`, storage/followrun.py `column_keys`)."""
    modules = all_modules()
    violations = []
    for source in sources_of_the_tests():
        for found in imports_in(
            source.tree, source.module, source.relative, source.path.name == "__init__.py", modules
        ):
            if part_of(found.target) is not None:
                violations.extend(
                    Violation(source.relative, f"{found.where()}: {name} is private to {found.target}")
                    for name in found.names
                    if is_private(name)
                )
        violations.extend(private_reach(source, modules))
        violations.extend(patched_private_names(source, modules))
        violations.extend(reached_through_an_imported_name(source, modules))
    report(violations, "no test imports, reaches or patches a private name of dbsvc")


def test_the_test_scanner_finds_a_private_name_patched():
    tree = ast.parse(
        "from dbsvc.storage import heap\nimport os\n"
        "monkeypatch.setattr(heap, '_MADVISE', None)\nsetattr(heap, 'MADVISE', None)\n"
        "monkeypatch.setattr(os, '_exit', None)\n"
    )
    source = Source(Path("sample.py"), "sample.py", "tests.sample", tree)
    found = list(patched_private_names(source, frozenset({"dbsvc.storage.heap"})))
    assert [violation.message.split(": ")[1] for violation in found] == ["heap._MADVISE patched"]


def test_the_test_scanner_finds_a_private_member_of_an_imported_class():
    tree = ast.parse(
        "from dbsvc.auth.keys import VerifyKey\nVerifyKey._ec_checker('ES256', k)\nVerifyKey(a, b, c).verify\n"
    )
    source = Source(Path("sample.py"), "sample.py", "tests.sample", tree)
    found = list(reached_through_an_imported_name(source, frozenset({"dbsvc.auth.keys"})))
    assert [violation.message.split(": ")[1] for violation in found] == ["VerifyKey._ec_checker"]


def test_the_test_scanner_finds_a_read_of_state_and_leaves_the_files_own_names():
    tree = ast.parse(
        "class Fake:\n    def __init__(self):\n        self._mine = 1\n"
        "def _helper(): ...\n"
        "def test(index, fake):\n    index._keys, fake._mine, index.key_sublists, self._keys, mod._helper\n"
    )
    assert list(state_reads(tree, frozenset({"_keys", "_mine", "_helper"}))) == [(6, "_keys")]
