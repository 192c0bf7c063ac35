"""Every import of dbsvc/ and dbsvc.py read with `ast`, for tests/test_layers.py and
tests/test_layers_private.py: nothing is imported, so it is fast and sees imports inside
functions and under `if TYPE_CHECKING:` too. `scan` gives each module's `Import` edges;
`part_of` names the part (a subpackage or a top-level module of dbsvc) a module belongs to.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/support/ is two below it
PACKAGE = ROOT / "dbsvc"
LAUNCHER = ROOT / "dbsvc.py"
LAUNCHER_MODULE = "dbsvc.py"  # not importable by that name: it runs as __main__


@dataclass(frozen=True)
class Import:
    """One import statement's edge to one module, as written in one module."""

    module: str  # the importing module, dotted ("dbsvc.storage.store")
    path: str  # its file, relative to the checkout
    line: int
    target: str  # the module imported, dotted and absolute
    names: tuple[str, ...]  # `from target import names`; () for a module imported whole
    lazy: bool  # inside a function: runs on the call, not on import
    type_only: bool  # under `if TYPE_CHECKING:`: never runs
    package: str | None = None  # `from package import module`: the package as written

    def where(self) -> str:
        if self.names:
            written = f"from {self.target} import {', '.join(self.names)}"
        elif self.package:
            written = f"from {self.package} import {self.target.rsplit('.', 1)[-1]}"
        else:
            written = f"import {self.target}"
        how = " [type-only]" if self.type_only else " [inside a function]" if self.lazy else ""
        return f"{self.path}:{self.line}: {written}{how}"


@dataclass(frozen=True)
class Violation:
    key: str  # what broke: a file, or a module edge
    message: str


def module_name(path: Path, root: Path = ROOT) -> str:
    if path == LAUNCHER:
        return LAUNCHER_MODULE
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str | None:
    """The part a dbsvc module belongs to; None for a module outside dbsvc."""
    if module == LAUNCHER_MODULE:
        return "launcher"
    pieces = module.split(".")
    if pieces[0] != "dbsvc":
        return None
    return pieces[1] if len(pieces) > 1 else "dbsvc"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(tree: ast.Module, module: str, path: str, is_package: bool, modules: frozenset[str]) -> Iterator[Import]:
    """Every import statement of one module, wherever it sits. `modules`: the dotted names of
    every module in the tree, to tell `from dbsvc.storage import compact` (a module) from
    `from dbsvc.storage import Store` (a name of the package)."""

    def visit(node: ast.AST, lazy: bool, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name, (), lazy, type_only)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield Import(module, path, node.lineno, f"{base}.{alias.name}", (), lazy, type_only, base)
                else:
                    names.append(alias.name)
            if names:
                yield Import(module, path, node.lineno, base, tuple(names), lazy, type_only)
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                yield from visit(child, lazy, True)
            for child in node.orelse:
                yield from visit(child, lazy, type_only)
        else:
            inside = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                yield from visit(child, inside, type_only)

    yield from visit(tree, False, False)


@dataclass(frozen=True)
class Source:
    path: Path
    relative: str
    module: str
    tree: ast.Module


@cache
def sources() -> tuple[Source, ...]:
    paths = sorted(PACKAGE.rglob("*.py")) + [LAUNCHER]
    return tuple(
        Source(
            path, str(path.relative_to(ROOT)), module_name(path), ast.parse(path.read_text(encoding="utf-8"), str(path))
        )
        for path in paths
    )


@cache
def all_modules() -> frozenset[str]:
    return frozenset(source.module for source in sources())


@cache
def scan() -> tuple[Import, ...]:
    modules = all_modules()
    return tuple(
        found
        for source in sources()
        for found in imports_in(source.tree, source.module, source.relative, source.path.name == "__init__.py", modules)
    )


def between_parts() -> Iterator[tuple[Import, str, str]]:
    """The imports of one dbsvc module by another, with both parts."""
    for found in scan():
        source, target = part_of(found.module), part_of(found.target)
        if target is not None and found.target != found.module:
            assert source is not None
            yield found, source, target


def report(violations: Iterable[Violation], rule: str) -> None:
    """Fail listing every break of `rule`."""
    lines = [v.message for v in violations]
    if lines:
        listed = "\n  ".join(lines)
        footer = "(the rules: tests/test_layers.py's docstring; the drawing: docs/architecture.md)"
        pytest.fail(f"{len(lines)} break(s) of the rule: {rule}\n  {listed}\n{footer}", pytrace=False)


def top_package(module: str) -> str:
    return module.split(".")[0]
