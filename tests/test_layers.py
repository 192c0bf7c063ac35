"""The house's layering, as a test: every import in dbsvc/ (and dbsvc.py) against its rules.

docs/architecture.md draws the house, and its dependencies point one way:

    errors <- schema <- compiler
    errors <- runtime <- storage, http, auth <- realtime, replica <- app <- service <- cli

This file is that drawing in a form that fails. It reads every module with `ast` (nothing is
imported, so it is fast and sees imports inside functions and under `if TYPE_CHECKING:` too)
and holds each import to these rules:

1. one home for each foreign package: h11 only in dbsvc/http/, wsproto only in
   dbsvc/http/ws/, cryptography only in dbsvc/auth/keys.py;
2. realtime is sans-IO: it imports no h11, wsproto, socket or asyncio;
3. storage and http import nothing of each other, nor of realtime, replica, app or service;
4. `ALLOWED` is the table of which part may import which; a type-only import may also take
   an edge of `TYPE_ONLY`, each with its reason;
5. `BACK_EDGES` are the only run-time imports against the table, each with its reason, and
   each sits inside a function, so it runs after both modules are loaded;
6. no `from dbsvc.x import _private`, no `module._private` across modules, and no
   `param._private` on a parameter typed with another module's class (test_layers_private.py);
7. no import cycle between modules; a circle closed by a type-only import is allowed only
   when `TYPE_ONLY_CIRCLES` lists that import with its reason.

A "part" is a subpackage (`storage`, `http`, ...) or a top-level module (`errors`, `app`, ...)
of dbsvc; `dbsvc` is the package's `__init__` (the version) and `launcher` is dbsvc.py. A new
module in an existing part needs nothing here; a new part needs a row in `ALLOWED`.

The scanner that reads the imports (`scan`, `Import`, `sources`) is tests/support/importscan.py.
"""

from __future__ import annotations

import ast

from support.importscan import (
    PACKAGE,
    ROOT,
    Import,
    Violation,
    between_parts,
    imports_in,
    part_of,
    report,
    scan,
    top_package,
)

# Rule 4. Each part and the parts it may import (its own modules always). The table reads
# bottom-up: a part's row comes after the rows of every part it imports.
ALLOWED: dict[str, frozenset[str]] = {
    name: frozenset(parts)
    for name, parts in {
        # the foundation: values and pure functions
        "dbsvc": (),  # __init__: the version and public names, no logic
        "errors": (),  # every exception class
        "launch": (),  # the interpreter check every entry point runs first (old syntax)
        "routes": (),  # the route table as pure data
        "notify": (),  # systemd's READY=1 / STOPPING=1
        # the datetime, date and uuid types' one parser each: the schema's literals and the runtime's requests
        "formats": (),
        # the strict JSON decoder (no NaN, no Infinity, no number past the doubles) of every
        # reader of JSON from outside the process: bodies, tokens, frames, snapshots, files
        "strictjson": (),
        "schema": ("errors", "formats"),  # source text -> IR
        "rules": (),  # what compiled access rules answer (Scope, ModelRules) and the claim helpers
        "runtime": ("errors", "rules", "formats"),  # the helpers generated code calls
        "bodies": (
            "errors",
            "runtime",
            "strictjson",
        ),  # the strict JSON decoder of request bodies, tokens and imported lines
        "operators": ("errors",),  # issue 34: query operators' bounds, called by generated parsers
        # a list's `cursor` and next-page `Link`, called by generated parsers and parsedlists (a cursor
        # carries its sort as operators' `sort_text`); its JSON refuses NaN and Infinity (strictjson)
        "cursors": ("errors", "operators", "strictjson"),
        "textsearch": ("errors",),  # issue 34: text search's tokenizer, for storage's index and generated matchers
        "logformat": (),  # the log line formats: escapes, redaction, text and JSON lines
        "logs": ("errors", "logformat"),  # RUST_LOG, the span log and its buffer
        "deps": ("errors",),  # a missing runtime package -> one line with its fix
        "admission": (),  # second-ask admission: the record and page caches of storage and the app
        "compiler": (
            "dbsvc",
            "errors",
            "launch",
            "schema",
            "rules",
            "runtime",
            "routes",
            "textsearch",
        ),  # IR -> code object
        # issue 37: IR -> a client's source (a client model, then one emitter per language)
        "clients": ("dbsvc", "errors", "schema", "compiler"),
        "interfaces": ("rules", "runtime"),  # the Protocols at the app's boundaries
        # the three layers over runtime, which know nothing of each other
        # operators: the range a `__prefix` is (`prefix_end`), which bucketplan.py recognises
        "storage": ("errors", "rules", "runtime", "schema", "textsearch", "operators", "admission", "strictjson"),
        "http": ("errors", "routes", "logs"),
        "auth": ("errors", "runtime", "bodies", "schema", "deps", "interfaces"),
        # what is built on them
        "explorer": ("errors", "routes", "http"),
        "realtime": ("errors", "rules", "runtime", "interfaces", "storage", "http", "auth"),
        "replica": ("errors", "storage", "http", "strictjson"),
        # access rules on the REST routes (issue 31): what a compiled rule's answer means for a
        # request (404, 403, a list's narrowed query); the app asks it, nothing below does
        "access": ("errors", "rules", "runtime"),
        # issue 34: `expand=`, the referenced records a get or a list embeds under `_expand`
        "expand": ("rules", "runtime", "interfaces"),
        "config": ("errors", "schema", "storage", "http", "auth"),
        "exits": ("errors", "schema", "deps"),
        # issue 32: /metrics' request meters and text format; the read path's caches; /api/'s index
        "metrics": ("errors",),
        "readcache": ("errors", "runtime", "http", "admission"),
        "parsedlists": ("errors", "runtime", "http", "cursors", "admission"),
        "index": ("routes", "runtime", "http"),
        # /health, /ready, /metrics, the index, the documents and /snapshot: a base of the app
        "operational": (
            "dbsvc",
            "errors",
            "explorer",
            "http",
            "index",
            "interfaces",
            "metrics",
            "realtime",
            "replica",
            "rules",
            "runtime",
        ),
        # issue 35: POST /batch, its ops parsed and run through the store's atomic batch
        "batchops": ("access", "errors", "rules", "runtime", "interfaces", "http"),
        # the write routes (POST, PUT, PATCH, DELETE of a model): a base of the app
        "writeroutes": (
            "access",
            "bodies",
            "errors",
            "http",
            "interfaces",
            "readcache",
            "replica",
            "routes",
            "rules",
            "runtime",
        ),
        "app": (
            "dbsvc",
            "operational",
            "writeroutes",
            "bodies",
            "access",
            "expand",
            "batchops",
            "operators",
            "cursors",
            "metrics",
            "parsedlists",
            "readcache",
            "index",
            "errors",
            "routes",
            "schema",
            "rules",
            "runtime",
            "interfaces",
            "http",
            "auth",
            "explorer",
            "realtime",
            "replica",
        ),
        "datatools": ("errors", "launch", "runtime", "bodies", "storage", "config", "strictjson"),
        # issue 36 item 5: what a worker of `serve --workers N` adds (private port, forwarding)
        "workers": ("errors", "routes", "runtime", "interfaces", "http", "realtime", "replica"),
        "service": (
            "errors",
            "launch",
            "schema",
            "deps",
            "logs",
            "logformat",
            "notify",
            "interfaces",
            "storage",
            "http",
            "auth",
            "explorer",
            "realtime",
            "replica",
            "config",
            "exits",
            "app",
            "workers",
        ),
        # issue 36 item 5: `serve --workers N`'s supervisor, over the service it starts N times
        "supervisor": ("errors", "deps", "logs", "notify", "http", "explorer", "config", "exits", "service", "workers"),
        # a built app's first module; it reaches cli: BACK_EDGES. Both write files durably through
        # storage's one seam (files.py), so the power-loss simulator sees every fsync.
        "zipapp": ("errors", "config", "storage"),
        "build": ("errors", "schema", "compiler", "storage", "zipapp"),
        # what each command of the command line does (cli.py parses, commands.py does)
        "commands": (
            "errors",
            "launch",
            "schema",
            "compiler",
            "storage",
            "replica",
            "config",
            "exits",
            "datatools",
            "service",
            "supervisor",
            "build",
            "clients",
            "zipapp",
        ),
        "cli": ("dbsvc", "schema", "exits", "commands"),  # the command line's parser
        "launcher": ("launch", "cli"),
        "__main__": ("launch", "cli"),  # `python -m dbsvc`: the launcher inside the package
    }.items()
}

# Rule 4. Part edges taken only under `if TYPE_CHECKING:`, against the table, and why.
TYPE_ONLY: dict[tuple[str, str], str] = {
    ("interfaces", "storage"): "ServedStore's annotations name storage's ChangeEvent and WriteHealth; "
    "at run time the Protocols need only runtime"
}

# Rule 5. Run-time imports against the table: (importing module, imported part) -> why.
BACK_EDGES: dict[tuple[str, str], str] = {
    ("dbsvc.zipapp", "cli"): "zipapp.main is a built app's entry point and hands its command line to "
    "cli.main; build imports zipapp's layout names, so zipapp sits below build"
}

# Rule 7. Type-only imports that close a circle of modules: (importing, imported) -> why.
TYPE_ONLY_CIRCLES: dict[tuple[str, str], str] = {
    ("dbsvc.realtime.session", "dbsvc.realtime.broker"): "a session holds its broker to unregister "
    "itself and count what it sent; the broker "
    "creates the sessions"
}


# Rules 1 and 2: foreign packages and the one place (a path prefix) that may import each.
ONE_HOME: dict[str, tuple[str, str]] = {
    "h11": ("dbsvc/http/", "only dbsvc/http/ imports h11 (the protocol layer)"),
    "wsproto": ("dbsvc/http/ws/", "only the WebSocket modules (dbsvc/http/ws/) import wsproto"),
    "cryptography": ("dbsvc/auth/keys.py", "only dbsvc/auth/keys.py imports cryptography"),
}
SANS_IO_PARTS = ("realtime",)
SANS_IO_FORBIDDEN = ("h11", "wsproto", "socket", "asyncio")

# Rule 3.
NEITHER_KNOWS_THE_OTHER = ("storage", "http")
ABOVE_STORAGE_AND_HTTP = ("realtime", "replica", "app", "service")


def foreign_packages_away_from_home() -> list[Violation]:
    violations = []
    for found in scan():
        home = ONE_HOME.get(top_package(found.target))
        if home is not None and not found.path.startswith(home[0]):
            violations.append(Violation(found.path, f"{found.where()}: {home[1]}"))
    return violations


def test_foreign_packages_are_imported_only_in_their_one_home():
    report(foreign_packages_away_from_home(), "h11, wsproto and cryptography each have one home")


def test_realtime_never_touches_a_socket_or_the_protocol_libraries():
    violations = [
        Violation(
            found.path, f"{found.where()}: realtime is sans-IO (sessions get a Channel, the broker gets call_soon)"
        )
        for found in scan()
        if part_of(found.module) in SANS_IO_PARTS and top_package(found.target) in SANS_IO_FORBIDDEN
    ]
    report(violations, f"realtime imports none of {', '.join(SANS_IO_FORBIDDEN)}")


def test_storage_and_http_know_nothing_of_each_other_or_of_what_is_built_on_them():
    violations = []
    for found, source, target in between_parts():
        if source not in NEITHER_KNOWS_THE_OTHER or source == target:
            continue
        if target in NEITHER_KNOWS_THE_OTHER:
            violations.append(
                Violation(found.path, f"{found.where()}: {source} must not know {target} (app ties them together)")
            )
        elif target in ABOVE_STORAGE_AND_HTTP:
            violations.append(Violation(found.path, f"{found.where()}: {source} sits below {target}"))
    report(violations, "storage and http import nothing of each other, nor of realtime, replica, app or service")


def test_every_import_between_parts_is_an_edge_of_the_table():
    violations = []
    for found, source, target in between_parts():
        if source == target:
            continue
        if source not in ALLOWED:
            violations.append(
                Violation(
                    found.path, f"{found.where()}: part {source!r} has no row in ALLOWED; give it one, in layer order"
                )
            )
            continue
        if target in ALLOWED[source]:
            continue
        if found.type_only and (source, target) in TYPE_ONLY:
            continue
        if found.lazy and (found.module, target) in BACK_EDGES:
            continue
        allowed = ", ".join(sorted(ALLOWED[source])) or "nothing else in dbsvc"
        violations.append(Violation(found.path, f"{found.where()}: {source} may import {allowed}; not {target}"))
    report(violations, "a part imports only what its row of ALLOWED lists")


def test_every_back_edge_is_imported_on_use_and_still_needed():
    problems = []
    for (module, target), reason in BACK_EDGES.items():
        uses = [
            found
            for found, _source, found_target in between_parts()
            if found.module == module and found_target == target and not found.type_only
        ]
        if not uses:
            problems.append(
                Violation(
                    module, f"BACK_EDGES lists {module} -> {target}, which no module imports any more: delete the entry"
                )
            )
        problems.extend(
            Violation(
                found.path, f"{found.where()}: a back-edge ({reason}) is imported inside the function that needs it"
            )
            for found in uses
            if not found.lazy
        )
    report(problems, "the only back-edges are BACK_EDGES' entries, each imported on use")


def test_every_listed_type_only_edge_is_still_needed():
    type_edges = {(source, target) for found, source, target in between_parts() if found.type_only}
    type_imports = {(found.module, found.target) for found in scan() if found.type_only}
    stale = [
        Violation(f"{a} -> {b}", f"TYPE_ONLY lists {a} -> {b}, which no module imports: delete it")
        for a, b in TYPE_ONLY
        if (a, b) not in type_edges
    ]
    stale += [
        Violation(
            f"{a} -> {b}", f"TYPE_ONLY_CIRCLES lists {a} -> {b}, which is not a type-only import any more: delete it"
        )
        for a, b in TYPE_ONLY_CIRCLES
        if (a, b) not in type_imports
    ]
    report(stale, "TYPE_ONLY and TYPE_ONLY_CIRCLES hold only type-only imports in use")


def test_the_table_points_one_way():
    """ALLOWED, read as a graph, has no circle: each row names only parts of earlier rows."""
    seen: set[str] = set()
    problems = []
    for part, imported in ALLOWED.items():
        later = sorted(imported - seen)
        if later:
            problems.append(
                Violation(
                    part, f"ALLOWED[{part!r}] names {', '.join(later)}, which come(s) later in the table or not at all"
                )
            )
        seen.add(part)
    report(problems, "the table of allowed edges points one way")


def strongly_connected(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The circles of modules: components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(edges.get(node, {})):
            if after not in index:
                connect(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(components)


def circles() -> list[Violation]:
    """Run-time imports (at module level or inside functions) form no circle; nor do type-only
    ones, except through an import TYPE_ONLY_CIRCLES lists. A listed back-edge is no circle.
    A circle's key names its type-only or lazy links, the ones a fix would cut."""
    edges: dict[str, dict[str, Import]] = {}
    for found, _source, target in between_parts():
        if found.lazy and (found.module, target) in BACK_EDGES:
            continue
        if found.type_only and (found.module, found.target) in TYPE_ONLY_CIRCLES:
            continue
        # a run-time import of the pair is the one to show, when there is one
        previous = edges.setdefault(found.module, {}).get(found.target)
        if previous is None or (previous.type_only and not found.type_only):
            edges[found.module][found.target] = found
    problems = []
    for component in strongly_connected(edges):
        members = set(component)
        links = [edges[a][b] for a in component for b in sorted(edges.get(a, {})) if b in members]
        closing = [link for link in links if link.type_only or link.lazy] or links
        key = " ; ".join(f"{link.module} -> {link.target}" for link in closing)
        shown = "\n    ".join(link.where() for link in links)
        problems.append(Violation(key, f"{' <-> '.join(component)} import each other:\n    {shown}"))
    return problems


def test_no_import_cycle_between_modules():
    report(circles(), "no import cycle between modules (move what both need down into its own module)")


def test_the_scanner_sees_every_kind_of_import():
    """The rules are only as good as the scan: imports in functions, under TYPE_CHECKING and
    relative ones are all found, and a submodule named in `from ... import` is a module."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import h11\n"
        "from dbsvc.storage import compact, Store\n"
        "from . import events\n"
        "if TYPE_CHECKING:\n"
        "    from dbsvc.app import Application\n"
        "def later():\n"
        "    import wsproto\n"
    )
    modules = frozenset({"dbsvc.storage.compact", "dbsvc.storage.events"})
    seen = {
        (found.target, found.names, found.lazy, found.type_only)
        for found in imports_in(tree, "dbsvc.storage.sample", "sample.py", False, modules)
    }
    assert seen == {
        ("typing", ("TYPE_CHECKING",), False, False),
        ("h11", (), False, False),
        ("dbsvc.storage.compact", (), False, False),
        ("dbsvc.storage", ("Store",), False, False),
        ("dbsvc.storage.events", (), False, False),
        ("dbsvc.app", ("Application",), False, True),
        ("wsproto", (), True, False),
    }


MAX_MODULE_LINES = 600


def test_no_module_is_past_600_lines():
    """shared/style.md: modules stay under 600 lines, split by job before that (h11's largest
    is about 660). Counted as `ruff format` writes them, which .ci/run checks."""
    long = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"past {MAX_MODULE_LINES} lines (split by job):\n  " + "\n  ".join(long)
