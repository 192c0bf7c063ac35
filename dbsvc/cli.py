"""The command line: one argparse parser over the library layers, for `dbsvc` and for a built app.

`main(argv)` is `dbsvc ...`: a command that works on a schema takes its path, SCHEMA.
`main(argv, module=M)` is the same parser inside a `dbsvc build` archive (dbsvc/zipapp.py),
where the schema is compiled already, as the module M: there those commands take no
SCHEMA, the commands that make schemas and apps (init, check, generate, build) are absent,
no command at all means `serve`, and `--version` names the schema's fingerprint.

Every command that reads the SERVICE_* environment reads it through `dbsvc.config`: one
`Config`, with one default and one check per variable. Errors end the process through
`dbsvc.exits` (0 ok, 1 failure, 2 usage or configuration). Each command imports what it
needs lazily, so `dbsvc --help` stays fast, `check` never loads the HTTP stack, and the
server's packages are checked (`dbsvc.deps`) before `serve` touches anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsvc import __version__
from dbsvc.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, report, run_reporting

TENANT_ENV = "the tenant named by SERVICE_TENANT (default: default) under SERVICE_DATA"


def _load(path: str) -> Any:
    """The schema at `path`; a file that cannot be read is a usage error naming SCHEMA."""
    from dbsvc.errors import ConfigError
    from dbsvc.launch import program
    from dbsvc.schema import load_schema

    try:
        return load_schema(path)
    except FileNotFoundError as exc:
        raise ConfigError(
            f"schema file {path!r} does not exist: give the path of a .dbs file as SCHEMA "
            f"(`{program()} init NAME` writes a starter one)"
        ) from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"SCHEMA {path!r} is a directory: give the path of a .dbs file in it") from exc
    except PermissionError as exc:
        raise ConfigError(f"cannot read the schema file {path!r}: permission denied") from exc


def _schema_module(args: argparse.Namespace) -> Any:
    """The compiled schema a command works on: the app's own, or SCHEMA compiled now."""
    if args.module is not None:
        return args.module
    from dbsvc.compiler import compile_schema

    return compile_schema(_load(args.schema))


def _config(module: Any = None) -> Any:
    """The Config of this process (`module`: the schema whose [runtime] table applies)."""
    from dbsvc.config import load_config

    return load_config(os.environ, module.RUNTIME if module is not None else None)


def cmd_check(args: argparse.Namespace) -> int:
    from dbsvc.errors import SchemaErrors
    from dbsvc.schema import format_errors

    try:
        schema = _load(args.schema)
    except SchemaErrors as exc:
        print(format_errors(exc), file=sys.stderr)
        return EXIT_FAILURE
    print(f"{args.schema}: ok ({len(schema.models)} models)")
    return EXIT_OK


def cmd_generate(args: argparse.Namespace) -> int:
    from dbsvc.compiler import generate_source

    source = generate_source(_load(args.schema))
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(source)
    else:
        sys.stdout.write(source)
    return EXIT_OK


def cmd_client(args: argparse.Namespace) -> int:
    from dbsvc.clients import generate_client

    source = generate_client(_client_schema(args), args.lang)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(source)
    else:
        sys.stdout.write(source)
    return EXIT_OK


def _client_schema(args: argparse.Namespace) -> Any:
    """The IR a client is generated from: SCHEMA's; in an app, the source it carries; for a
    generated module run as a script, its schema file when that still describes the same
    schema; else the schema the module's description keeps (docs/guide/clients.md)."""
    if args.module is None:
        return _load(args.schema)
    from dbsvc.schema import load_schema, parse_schema
    from dbsvc.schema.describe import describe_schema, schema_from_description
    from dbsvc.zipapp import app_schema_source

    module = args.module
    source = app_schema_source(module)
    if source is not None:
        return parse_schema(source, module.SCHEMA_PATH)
    if os.path.isfile(module.SCHEMA_PATH):
        schema = load_schema(module.SCHEMA_PATH)
        if describe_schema(schema) == module.DESCRIPTION:
            return schema
    return schema_from_description(module.DESCRIPTION, module.SCHEMA_PATH)


def cmd_openapi(args: argparse.Namespace) -> int:
    if args.module is not None:
        document = json.loads(args.module.OPENAPI_JSON)
    else:
        from dbsvc.compiler.openapi import build_openapi

        document = build_openapi(_load(args.schema))
    print(json.dumps(document, indent=2))
    return EXIT_OK


def cmd_asyncapi(args: argparse.Namespace) -> int:
    if args.module is not None:
        document = json.loads(args.module.ASYNCAPI_JSON)
    else:
        from dbsvc.compiler.asyncapi import build_asyncapi

        document = build_asyncapi(_load(args.schema))
    print(json.dumps(document, indent=2))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from dbsvc.service import serve

    environ: Mapping[str, str] = os.environ
    if args.rebootstrap:  # the flag is the variable's twin (config.py)
        environ = {**os.environ, "SERVICE_FOLLOW_REBOOTSTRAP": "1"}
    if args.workers > 1 and not os.environ.get("DBSVC_WORKER"):  # not a worker yet: supervise them
        from dbsvc.errors import ConfigError
        from dbsvc.supervisor import supervise

        if args.follow:
            raise ConfigError("--workers and --follow do not go together: a read replica runs as one process")
        return supervise(_schema_module(args), environ, args.workers)
    return serve(_schema_module(args), environ, follow=args.follow)


def _worker_count(text: str) -> int:
    """`--workers N`: an integer from 1 to 1024."""
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 1024, got {text!r}")
    return int(text)


def cmd_init(args: argparse.Namespace) -> int:
    from importlib import resources
    from string import Template

    path = args.name if args.name.endswith(".dbs") else f"{args.name}.dbs"
    stem = os.path.basename(path)[: -len(".dbs")]
    if not stem or not stem.isprintable():
        report(f"{args.name!r} is not a schema name: expected a file name such as 'shop' or 'shop.dbs'")
        return EXIT_USAGE
    template = resources.files("dbsvc").joinpath("templates/starter.dbs").read_text(encoding="utf-8")
    text = Template(template).substitute(name=stem, file=path)
    try:
        with open(path, "x", encoding="utf-8") as out:  # "x": never overwrite a schema
            out.write(text)
    except FileExistsError:
        report(f"{path} already exists: choose another NAME, or remove it first")
        return EXIT_FAILURE
    except (FileNotFoundError, NotADirectoryError):
        parent = os.path.dirname(path)
        report(
            f"cannot write {path!r}: the directory {parent!r} does not exist: create it first "
            f"(mkdir -p {parent}), or give NAME in an existing directory"
        )
        return EXIT_USAGE
    except PermissionError:
        report(f"cannot write {path!r}: permission denied: give NAME in a directory you can write")
        return EXIT_USAGE
    schema = _load(path)
    print(
        f"wrote {path} ({len(schema.models)} models: {', '.join(m.name for m in schema.models)})\n"
        f"next: dbsvc check {path} && dbsvc serve {path}"
    )
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from dbsvc.build import build_zipapp

    build_zipapp(_load(args.schema), args.output, with_guard=args.with_guard)
    print(f"wrote {args.output}")
    return EXIT_OK


def cmd_tenant(args: argparse.Namespace) -> int:
    from dbsvc.storage import tenants

    data_dir = _config().data_dir
    if args.tenant_command == "create" and args.source:
        from dbsvc.datatools.commands import run_restore

        return run_restore(args, data_dir)
    if args.tenant_command == "create":
        path = tenants.create_tenant(data_dir, args.name)
        print(f"created tenant {args.name!r} at {path}")
    elif args.tenant_command == "list":
        for info in tenants.list_tenants(data_dir):
            state = f"held by pid {info.holder_pid}" if info.locked else "free"
            print(f"{info.name}\t{info.size_bytes}\t{state}")
    elif args.tenant_command == "drop":
        if not args.yes:
            report(f"refusing to drop tenant {args.name!r} without --yes")
            return EXIT_USAGE
        tenants.drop_tenant(data_dir, args.name)
        print(f"dropped tenant {args.name!r}")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    from dbsvc.datatools.tenant import existing_tenant
    from dbsvc.storage import tenants

    config = _config()
    existing_tenant(config.data_dir, config.tenant)  # a missing one: the hint names this program
    print(tenants.compact_tenant(config.data_dir, config.tenant))
    return EXIT_OK


def cmd_replicate(args: argparse.Namespace) -> int:
    from dbsvc.replica.consumer import replicate

    token = args.token or _config().token
    return replicate(args.url, after=args.after, out=args.out, token=token)


def cmd_export(args: argparse.Namespace) -> int:
    from dbsvc.datatools.commands import run_export

    if args.module is None and args.schema is not None and not _names_a_schema(args.schema):
        args.models.insert(0, args.schema)  # `dbsvc export User`: a MODEL, no SCHEMA
        args.schema = None
    module = _data_tool_module(args)
    return run_export(args, module, _config(module))


def cmd_import(args: argparse.Namespace) -> int:
    from dbsvc.datatools.commands import run_import
    from dbsvc.errors import ConfigError

    if args.file is None and args.frames is None and getattr(args, "schema", None) is not None:
        args.file, args.schema = args.schema, None  # `dbsvc import FILE`: a FILE, no SCHEMA
    if (args.file is None) == (args.frames is None):
        raise ConfigError("import: give FILE (JSON Lines) or --frames FILE (a `replicate --out` file), one of them")
    module = _data_tool_module(args)
    return run_import(args, module, _config(module))


def _names_a_schema(word: str) -> bool:
    """Whether export's first word is SCHEMA (a .dbs name or a file) rather than a MODEL."""
    return word.endswith(".dbs") or os.path.isfile(word)


def _data_tool_module(args: argparse.Namespace) -> Any:
    """The schema export and import work with: the app's own, SCHEMA, else the one the
    tenant holds (the description it was created or last served with: every model, field
    and projection; docs/data-tools.md)."""
    if args.module is not None or args.schema is not None:
        return _schema_module(args)
    from dbsvc.compiler import compile_schema
    from dbsvc.errors import ConfigError
    from dbsvc.launch import program
    from dbsvc.schema.describe import schema_from_description
    from dbsvc.storage.migrate import read_description
    from dbsvc.storage.tenants import tenant_dir

    config = _config()
    directory = tenant_dir(config.data_dir, config.tenant)
    description = read_description(directory) if os.path.isdir(directory) else None
    if description is None:
        raise ConfigError(
            f"tenant {config.tenant!r} under {config.data_dir!r} holds no schema yet (it was never "
            f"served): give SCHEMA, as in `{program()} {args.command} SCHEMA ...`"
        )
    return compile_schema(schema_from_description(description, os.path.join(directory, "schema.json")))


def cmd_backup(args: argparse.Namespace) -> int:
    from dbsvc.datatools.commands import run_backup

    return run_backup(args, _config())


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
    serve = schema_command("serve", f"serve {schema}" + (", compiled in memory" if module is None else ""), cmd_serve)
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
    schema_command("openapi", f"print the OpenAPI 3.1 document of the service for {schema}", cmd_openapi)
    schema_command(
        "asyncapi", f"print the AsyncAPI 3.0 document of the service's WebSocket routes for {schema}", cmd_asyncapi
    )
    client = schema_command(
        "client",
        f"write a typed client of the service for {schema}",
        cmd_client,
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
    init.set_defaults(func=cmd_init)
    schema_command("check", "report every error in SCHEMA; exit 1 if any", cmd_check)
    gen = schema_command("generate", "write the generated Python module for SCHEMA", cmd_generate)
    gen.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    build = schema_command(
        "build",
        "build a self-contained zipapp serving SCHEMA",
        cmd_build,
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
    tenant.set_defaults(func=cmd_tenant)

    compact = sub.add_parser(
        "compact",
        help="compact the tenant named by SERVICE_TENANT (offline)",
        description="Offline compaction of the tenant named by SERVICE_TENANT; refused while a server holds it.",
    )
    compact.set_defaults(func=cmd_compact)


def _data_tools(sub: Any, schema_command: Callable[..., argparse.ArgumentParser]) -> None:
    export = schema_command(
        "export",
        f"write the records of {TENANT_ENV} as JSON Lines",
        cmd_export,
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
        cmd_import,
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
    backup.set_defaults(func=cmd_backup)

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
    replicate.set_defaults(func=cmd_replicate)


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
