"""The command line's commands: what each `dbsvc COMMAND` does, once cli.py has parsed it.

Each `cmd_<name>(args) -> int` takes the parsed arguments and returns the exit status; the
parser that hands them over (cli.build_parser, which names them as `func`) is cli.py's. They
stand apart from the parser because they are the other job: cli.py says what the command
line accepts, this module does it, and the parser grows with every option while the
commands grow with every tool.

A command that works on a schema takes it from `args.schema` (SCHEMA's path) or, inside a
built app or a generated module run as a script, from `args.module` (the compiled schema).
Every command that reads the SERVICE_* environment reads it through `dbsvc.config`: one
`Config`, with one default and one check per variable. Each command imports what it needs
lazily, so `dbsvc --help` stays fast, `check` never loads the HTTP stack, and the server's
packages are checked (`dbsvc.deps`) before `serve` touches anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dbsvc.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, report


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

    return _write_source(generate_source(_load(args.schema)), args.output)


def cmd_client(args: argparse.Namespace) -> int:
    from dbsvc.clients import generate_client

    return _write_source(generate_client(_client_schema(args), args.lang), args.output)


def _write_source(source: str, output: str | None) -> int:
    """Write a generated module to `output` (`-` or none: standard output), as UTF-8 either
    way: Python source is UTF-8 whatever the locale, and a schema's text may hold any letter
    (an ASCII locale's stdout would refuse it). A text-only stdout (a caller's StringIO)
    takes the text as it is."""
    if output and output != "-":
        with open(output, "w", encoding="utf-8") as out:
            out.write(source)
        return EXIT_OK
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:
        sys.stdout.write(source)
    else:
        sys.stdout.flush()
        raw.write(source.encode("utf-8"))
        raw.flush()
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
    from dbsvc.compiler.openapi import build_openapi

    return _print_document(args, "OPENAPI_JSON", build_openapi)


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from dbsvc.compiler.asyncapi import build_asyncapi

    return _print_document(args, "ASYNCAPI_JSON", build_asyncapi)


def _print_document(args: argparse.Namespace, kept: str, build: Callable[[Any], dict]) -> int:
    """A schema's API document, indented: the one a generated module keeps (`kept`), or
    built from the schema file."""
    document = json.loads(getattr(args.module, kept)) if args.module is not None else build(_load(args.schema))
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
