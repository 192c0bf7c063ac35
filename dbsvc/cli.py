"""The command line: one argparse parser over the library layers, for `dbsvc` and for a built app.

`main(argv)` is `dbsvc ...`: a command that works on a schema takes its path, SCHEMA.
`main(argv, module=M)` is the same parser inside a `dbsvc build` archive (dbsvc/zipapp.py),
where the schema is compiled already, as the module M: there those commands take no
SCHEMA, the commands that make schemas and apps (init, check, generate, build) are absent,
no command at all means `serve`, and `--version` names the schema's fingerprint.

This module is what the command line accepts: the parser, its help texts and argument
types. What each command does is commands.py's (`cmd_<name>`, named here as the parsed
arguments' `func`). Errors end the process through `dbsvc.exits` (0 ok, 1 failure, 2 usage
or configuration).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dbsvc import __version__, commands
from dbsvc.exits import run_reporting

TENANT_ENV = "the tenant named by SERVICE_TENANT (default: default) under SERVICE_DATA"


def _worker_count(text: str) -> int:
    """`--workers N`: an integer from 1 to 1024."""
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 1024, got {text!r}")
    return int(text)


def _offset(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an offset: expected an integer >= 0")
    return int(text)


def _identity(module: Any) -> tuple[str, str]:
    """(schema file name, schema fingerprint) of a compiled module."""
    from dbsvc.schema.describe import schema_fingerprint

    return os.path.basename(module.SCHEMA_PATH) or "<schema>", schema_fingerprint(module.DESCRIPTION)


class _CommandsHelp(argparse.HelpFormatter):
    """The top-level help with its command column where Python 3.11 puts it, on every Python:
    3.13 measures the commands' names one indent deeper and moved the column, so the same
    `dbsvc --help` printed differently per interpreter (docs/guide/configuration.md shows it)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=14)


def build_parser(module: Any = None) -> argparse.ArgumentParser:
    """The parser of `dbsvc`, or, given the compiled `module` a built app carries, of the app."""
    if module is None:
        parser = argparse.ArgumentParser(
            prog="dbsvc",
            description="Compile a schema into a database service and run it.",
            formatter_class=_CommandsHelp,
        )
        parser.add_argument("--version", action="version", version=f"dbsvc {__version__}")
    else:
        name, fingerprint = _identity(module)
        parser = argparse.ArgumentParser(
            prog=f"python {os.path.basename(sys.argv[0]) or 'APP.pyz'}",
            formatter_class=_CommandsHelp,
            description=f"A dbsvc database service built for one schema, {name} (fingerprint "
            f"{fingerprint}). With no COMMAND it serves; SERVICE_* variables configure it.",
        )
        parser.add_argument(
            "--version", action="version", version=f"dbsvc {__version__} (schema {name}, fingerprint {fingerprint})"
        )
    parser.set_defaults(module=module)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def schema_command(
        name: str,
        help_text: str,
        func: Callable[[argparse.Namespace], int],
        description: str | None = None,
        optional: bool = False,
    ) -> argparse.ArgumentParser:
        """A command on the schema: SCHEMA is its argument, except in an app, which has one.
        `optional`: without SCHEMA the command uses the schema the tenant holds."""
        p = sub.add_parser(name, help=help_text, description=description or help_text)
        if module is None and optional:
            p.add_argument(
                "schema", metavar="SCHEMA", nargs="?", help="path to a .dbs schema file (default: the tenant's own)"
            )
        elif module is None:
            p.add_argument("schema", metavar="SCHEMA", help="path to a .dbs schema file")
        p.set_defaults(func=func)
        return p

    schema = "SCHEMA" if module is None else "this app's schema"
    if module is None:
        _schema_tools(sub, schema_command)
    serve = schema_command(
        "serve", f"serve {schema}" + (", compiled in memory" if module is None else ""), commands.cmd_serve
    )
    serve.add_argument(
        "--follow",
        metavar="URL",
        help="serve as a read replica of the primary at URL (http://HOST:PORT): bootstrap from "
        "its snapshot, follow its /replicate stream, refuse writes "
        "(SERVICE_TOKEN: a token for a guarded primary); see docs/replication.md",
    )
    serve.add_argument(
        "--rebootstrap",
        action="store_true",
        help="with --follow: when the primary's history cannot continue this replica's and the "
        "primary holds fewer rows, bootstrap again anyway, discarding the rows it lacks "
        "(SERVICE_FOLLOW_REBOOTSTRAP=1); see docs/replication.md#histories",
    )
    serve.add_argument(
        "--workers",
        metavar="N",
        type=_worker_count,
        default=1,
        help="serve the tenant with N processes on one port (SO_REUSEPORT): one writer and N-1 "
        "readers that follow it and forward writes to it; 1 (the default) is one process; "
        "see docs/workers.md",
    )
    schema_command("openapi", f"print the OpenAPI 3.1 document of the service for {schema}", commands.cmd_openapi)
    schema_command(
        "asyncapi",
        f"print the AsyncAPI 3.0 document of the service's WebSocket routes for {schema}",
        commands.cmd_asyncapi,
    )
    client = schema_command(
        "client",
        f"write a typed client of the service for {schema}",
        commands.cmd_client,
        description=f"Write one self-contained client module of the service for {schema}, generated from "
        "the compiled schema (docs/guide/clients.md); the same schema gives the same bytes.",
    )
    client.add_argument("--lang", required=True, metavar="LANG", help="the client's language: python or typescript")
    client.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    _tenant_tools(sub)
    _data_tools(sub, schema_command)
    return parser


def _schema_tools(sub: Any, schema_command: Callable[..., argparse.ArgumentParser]) -> None:
    """The commands that make schemas and apps: `dbsvc` only."""
    init = sub.add_parser(
        "init",
        help="write a commented starter schema to NAME.dbs",
        description="Write a commented starter schema (two models, a @ref, filters, "
        "sorts, projections, a [runtime] table) to NAME.dbs; never "
        "overwrites a file. Then: dbsvc serve NAME.dbs.",
    )
    init.add_argument(
        "name", metavar="NAME", nargs="?", default="app", help="schema name or file (default: app, written to app.dbs)"
    )
    init.set_defaults(func=commands.cmd_init)
    schema_command("check", "report every error in SCHEMA; exit 1 if any", commands.cmd_check)
    gen = schema_command("generate", "write the generated Python module for SCHEMA", commands.cmd_generate)
    gen.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    build = schema_command(
        "build",
        "build a self-contained zipapp serving SCHEMA",
        commands.cmd_build,
        description="Build one file that serves SCHEMA with nothing installed but Python 3.11+: the "
        "generated module, dbsvc and its pure-Python packages; the same inputs give the same "
        "bytes. `python APP.pyz` serves; `python APP.pyz --help` lists its commands.",
    )
    build.add_argument("-o", "--output", metavar="APP.pyz", required=True, help="zipapp to write")
    build.add_argument(
        "--with-guard",
        action="store_true",
        help="also embed the installed cryptography (and what it needs), unpacked on first "
        "use into SERVICE_ZIPAPP_CACHE (default ~/.cache/dbsvc): the token guard then "
        "runs on a host of the same platform and Python with nothing installed",
    )


def _tenant_tools(sub: Any) -> None:
    tenant = sub.add_parser(
        "tenant",
        help="create, list or drop tenants under SERVICE_DATA",
        description="Manage tenant directories under SERVICE_DATA (default: ./data).",
    )
    tsub = tenant.add_subparsers(dest="tenant_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="create a tenant directory", description="Create a tenant directory.")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="restore a backup taken by `dbsvc backup DIR` (verified before it is installed)",
    )
    tsub.add_parser("list", help="list tenants with size and lock holder", description="List tenants.")
    drop = tsub.add_parser(
        "drop",
        help="delete a tenant (refused while a server holds it)",
        description="Delete a tenant directory; refused while a server holds it.",
    )
    drop.add_argument("name", metavar="NAME")
    drop.add_argument("--yes", action="store_true", help="confirm the deletion")
    tenant.set_defaults(func=commands.cmd_tenant)

    compact = sub.add_parser(
        "compact",
        help="compact the tenant named by SERVICE_TENANT (offline)",
        description="Offline compaction of the tenant named by SERVICE_TENANT; refused while a server holds it.",
    )
    compact.set_defaults(func=commands.cmd_compact)


def _data_tools(sub: Any, schema_command: Callable[..., argparse.ArgumentParser]) -> None:
    export = schema_command(
        "export",
        f"write the records of {TENANT_ENV} as JSON Lines",
        commands.cmd_export,
        description=f"Write the records of {TENANT_ENV} as JSON Lines, one "
        '{"model": NAME, "record": {...}} per line (docs/data-tools.md). The tenant is '
        "locked for the run and opened read-only; while a server holds it, the export takes a "
        "consistent copy beside it (as `backup` does, in TMPDIR) and exports that. Without "
        "SCHEMA it uses the schema the tenant holds.",
        optional=True,
    )
    export.add_argument("models", metavar="MODEL", nargs="*", help="models to export (default: all)")
    export.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    export.add_argument(
        "--as-of",
        action="append",
        metavar="[MODEL=]N",
        help="export MODEL as it was at watermark N of the current epoch (repeatable; "
        "a bare N needs exactly one MODEL)",
    )
    export.add_argument("-q", "--quiet", action="store_true", help="no progress on standard error")
    import_ = schema_command(
        "import",
        f"load a JSON Lines FILE into {TENANT_ENV}, all or nothing",
        commands.cmd_import,
        description=f"Load FILE (as written by `dbsvc export`) into {TENANT_ENV}: every line "
        "is validated and checked (ids, @unique, @ref across the file and the tenant) "
        "before anything is written, then all records are written with one fsync. "
        "A bad line refuses the whole import with FILE:LINE: message. Refused while a "
        "server holds the tenant. Without SCHEMA it uses the schema the tenant holds. "
        "With --frames FILE instead, an empty tenant is rebuilt from a `dbsvc replicate --out` "
        "file, keeping its offsets (docs/data-tools.md).",
        optional=True,
    )
    import_.add_argument("file", metavar="FILE", nargs="?", help="JSON Lines file to load")
    import_.add_argument(
        "--frames",
        metavar="FILE",
        help="instead, rebuild an empty tenant from a `dbsvc replicate --out` FILE: every frame applied "
        "as a replica applies it, so the tenant's offsets and head are FILE's (and its history continues "
        "FILE.history's); a torn tail is left out and reported; a damaged frame, a frame the schema does "
        "not fit or a tenant holding rows refuses it, nothing written. See docs/data-tools.md",
    )
    import_.add_argument("-q", "--quiet", action="store_true", help="no progress on standard error")
    backup = sub.add_parser(
        "backup",
        help=f"copy {TENANT_ENV} into DIR while a server may run on it",
        description=f"Take a consistent copy of {TENANT_ENV} into DIR (new or empty) without "
        "stopping or locking a server running on it; restore it with "
        "`dbsvc tenant create NAME --from DIR`.",
    )
    backup.add_argument("directory", metavar="DIR", help="directory to create the backup in")
    backup.set_defaults(func=commands.cmd_backup)

    replicate = sub.add_parser(
        "replicate",
        help="follow a server's /replicate stream into a file",
        description="Follow the /replicate stream of the server at URL: check every frame, append the good "
        "ones to FILE (raw log frames), resume after FILE's last offset, reconnect with backoff. "
        "Exit 0 when stopped by SIGINT/SIGTERM, 1 on a bad frame or a definitive refusal "
        "(410 offset_gone, 401/403, 404 replication_disabled), 2 on a usage error, 3 when the server's "
        "history no longer continues FILE's (a restore or a rewrite: FILE is left as it is). "
        "See docs/replication.md.",
    )
    replicate.add_argument("url", metavar="URL", help="the server's base URL: http://HOST:PORT or ws://HOST:PORT")
    replicate.add_argument(
        "--after", type=_offset, metavar="N", help="start after offset N (default: FILE's last offset, else 0)"
    )
    replicate.add_argument(
        "--out", metavar="FILE", help="append the frames to FILE (default: one JSON event per line on standard output)"
    )
    replicate.add_argument("--token", metavar="T", help="bearer token for a guarded server (default: $SERVICE_TOKEN)")
    replicate.set_defaults(func=commands.cmd_replicate)


# What a built app (or a generated module run as a script) reads as its own, not as `serve`'s.
APP_WORDS = frozenset({"-h", "--help", "--version"})


def main(argv: Sequence[str] | None = None, module: Any = None) -> int:
    """Run one command; the exit status. `module`: the compiled schema a built app carries."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if module is not None and (not arguments or arguments[0] not in APP_WORDS and arguments[0].startswith("-")):
        # `python APP.pyz` serves, and so does `python APP.pyz --follow URL`; an option
        # `serve` does not know is refused by name ("unrecognized arguments: --bogus")
        arguments = ["serve", *arguments]
    args = build_parser(module).parse_args(arguments)
    return run_reporting(lambda: args.func(args))
