"""The command line: argparse subcommands over the library layers.

Exit statuses: 0 success, 1 failure (a schema with errors, a failed operation), 2 usage or
configuration error (bad arguments, bad environment, a tenant locked by another process).
Each command imports what it needs lazily so `dbsvc --help` stays fast and `check` never
loads the HTTP stack.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dbsvc import __version__
from dbsvc.errors import ConfigError, DbsvcError, SchemaErrors, TenantLocked

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _err(message: str) -> None:
    print(f"dbsvc: error: {message}", file=sys.stderr)


def _load(path: str):
    from dbsvc.schema import load_schema

    return load_schema(path)


def cmd_check(args: argparse.Namespace) -> int:
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


def cmd_openapi(args: argparse.Namespace) -> int:
    import json

    from dbsvc.compiler.openapi import build_openapi

    print(json.dumps(build_openapi(_load(args.schema)), indent=2))
    return EXIT_OK


def cmd_asyncapi(args: argparse.Namespace) -> int:
    import json

    from dbsvc.compiler.asyncapi import build_asyncapi

    print(json.dumps(build_asyncapi(_load(args.schema)), indent=2))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from dbsvc.compiler import compile_schema

    return serve_generated(compile_schema(_load(args.schema)), follow=args.follow)


def serve_generated(module, follow: str | None = None) -> int:
    """Serve an already generated module (also the entry point of `python generated.py`);
    `follow`: the primary's base URL when this server is a read replica."""
    from dbsvc.service import run_server

    return run_server(module, os.environ, follow=follow)


def cmd_build(args: argparse.Namespace) -> int:
    from dbsvc.build import build_zipapp

    build_zipapp(_load(args.schema), args.output)
    print(f"wrote {args.output}")
    return EXIT_OK


def cmd_tenant(args: argparse.Namespace) -> int:
    from dbsvc.storage import tenants

    data_dir = os.environ.get("SERVICE_DATA", "data")
    if args.tenant_command == "create":
        path = tenants.create_tenant(data_dir, args.name)
        print(f"created tenant {args.name!r} at {path}")
    elif args.tenant_command == "list":
        for info in tenants.list_tenants(data_dir):
            state = f"held by pid {info.holder_pid}" if info.locked else "free"
            print(f"{info.name}\t{info.size_bytes}\t{state}")
    elif args.tenant_command == "drop":
        if not args.yes:
            _err(f"refusing to drop tenant {args.name!r} without --yes")
            return EXIT_USAGE
        tenants.drop_tenant(data_dir, args.name)
        print(f"dropped tenant {args.name!r}")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    from dbsvc.storage import tenants

    data_dir = os.environ.get("SERVICE_DATA", "data")
    name = os.environ.get("SERVICE_TENANT") or "default"
    report = tenants.compact_tenant(data_dir, name)
    print(report)
    return EXIT_OK


def cmd_replicate(args: argparse.Namespace) -> int:
    from dbsvc.replica.consumer import replicate

    token = args.token or os.environ.get("SERVICE_TOKEN") or None
    return replicate(args.url, after=args.after, out=args.out, token=token)


def _offset(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an offset: expected an integer >= 0")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dbsvc", description="Compile a schema into a database service and run it."
    )
    parser.add_argument("--version", action="version", version=f"dbsvc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def schema_command(name: str, help_text: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("schema", metavar="SCHEMA", help="path to a .dbs schema file")
        p.set_defaults(func=func)
        return p

    serve = schema_command("serve", "compile SCHEMA in memory and serve it", cmd_serve)
    serve.add_argument("--follow", metavar="URL",
                       help="serve as a read replica of the primary at URL (http://HOST:PORT): bootstrap from "
                            "its snapshot, follow its /replicate stream, refuse writes "
                            "(SERVICE_FOLLOW_TOKEN: a token for a guarded primary); see docs/replication.md")
    schema_command("check", "report every error in SCHEMA; exit 1 if any", cmd_check)
    gen = schema_command("generate", "write the generated Python module for SCHEMA", cmd_generate)
    gen.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    build = schema_command("build", "build a self-contained zipapp serving SCHEMA", cmd_build)
    build.add_argument("-o", "--output", metavar="APP.pyz", required=True, help="zipapp to write")
    schema_command("openapi", "print the OpenAPI 3.1 document of the service for SCHEMA", cmd_openapi)
    schema_command("asyncapi", "print the AsyncAPI 3.0 document of the service's WebSocket routes "
                   "for SCHEMA", cmd_asyncapi)

    tenant = sub.add_parser(
        "tenant", help="create, list or drop tenants under SERVICE_DATA",
        description="Manage tenant directories under SERVICE_DATA (default: ./data).",
    )
    tsub = tenant.add_subparsers(dest="tenant_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="create a tenant directory", description="Create a tenant directory.")
    create.add_argument("name", metavar="NAME")
    tsub.add_parser("list", help="list tenants with size and lock holder", description="List tenants.")
    drop = tsub.add_parser("drop", help="delete a tenant (refused while a server holds it)",
                           description="Delete a tenant directory; refused while a server holds it.")
    drop.add_argument("name", metavar="NAME")
    drop.add_argument("--yes", action="store_true", help="confirm the deletion")
    tenant.set_defaults(func=cmd_tenant)

    compact = sub.add_parser(
        "compact", help="compact the tenant named by SERVICE_TENANT (offline)",
        description="Offline compaction of the tenant named by SERVICE_TENANT; refused while a server holds it.",
    )
    compact.set_defaults(func=cmd_compact)

    replicate = sub.add_parser(
        "replicate", help="follow a server's /replicate stream into a file",
        description="Follow the /replicate stream of the server at URL: check every frame, append the good "
                    "ones to FILE (raw log frames), resume after FILE's last offset, reconnect with backoff. "
                    "Exit 0 when stopped by SIGINT/SIGTERM, 1 on a bad frame or a definitive refusal "
                    "(410 offset_gone, 401/403, 404 replication_disabled), 2 on a usage error. "
                    "See docs/replication.md.",
    )
    replicate.add_argument("url", metavar="URL", help="the server's base URL: http://HOST:PORT or ws://HOST:PORT")
    replicate.add_argument("--after", type=_offset, metavar="N",
                           help="start after offset N (default: FILE's last offset, else 0)")
    replicate.add_argument("--out", metavar="FILE",
                           help="append the frames to FILE (default: one JSON event per line on standard output)")
    replicate.add_argument("--token", metavar="T", help="bearer token for a guarded server (default: $SERVICE_TOKEN)")
    replicate.set_defaults(func=cmd_replicate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args)
    except SchemaErrors as exc:
        from dbsvc.schema import format_errors

        print(format_errors(exc), file=sys.stderr)
        return EXIT_FAILURE
    except (ConfigError, TenantLocked) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except DbsvcError as exc:
        _err(str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        _err(str(exc))
        return EXIT_FAILURE
