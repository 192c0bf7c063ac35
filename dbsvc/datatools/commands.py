"""The data tools' command bodies, called by `dbsvc.cli` (which only declares the arguments,
and hands over the compiled schema and the process's `Config`).

Each returns the exit status; errors are raised as dbsvc errors and mapped by `cli.main`
(usage and configuration errors and a locked tenant: 2; anything else: 1). A refused import
prints its `FILE:LINE: message` lines as they are, then one `dbsvc: error:` line.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from dbsvc.config import Config
from dbsvc.errors import ConfigError, ImportRejected, TenantLocked

EXIT_OK, EXIT_FAILURE = 0, 1


# What a refused export says to do instead: a backup is taken beside the server without
# pausing it, and is a tenant directory an export can open (docs/data-tools.md).
def export_a_backup() -> str:
    """The hint, naming the program as it was run (`python3 blog.pyz backup DIR`)."""
    from dbsvc.launch import program

    name = program()
    return (
        f"to export while a server runs, export a backup of it: {name} backup DIR, then "
        f"SERVICE_DATA=<DIR's parent> SERVICE_TENANT=<DIR's name> {name} export ..."
    )


def run_export(args: argparse.Namespace, module: Any, config: Config) -> int:
    from dbsvc.datatools import export
    from dbsvc.datatools.tenant import existing_tenant

    models = export.select_models(module, args.models)
    as_of = export.parse_as_of(args.as_of or (), models)
    directory = existing_tenant(config.data_dir, config.tenant)

    def export_from(source: str) -> Any:
        if args.output and args.output != "-":
            return export.export_to_path(source, module, args.output, models, as_of, quiet=args.quiet)
        report = export.export_records(source, module, sys.stdout, models, as_of, quiet=args.quiet)
        sys.stdout.flush()
        return report

    try:
        report = export_from(directory)
        note = ""
    except TenantLocked as exc:
        # A server holds the tenant: take a consistent copy beside it (the backup path,
        # which never pauses or locks the server) and export that, in one command.
        report, note = export_running(directory, config.tenant, exc.pid, export_from)
    print(report.summary() + note, file=sys.stderr)
    return EXIT_OK


def export_running(directory: str, tenant: str, pid: int | None, export_from: Any) -> tuple[Any, str]:
    """Export a copy of the tenant a server at `pid` holds: `take_backup` into a temporary
    directory (TMPDIR; removed afterwards, whatever happens), then `export_from` it. The
    copy is the state at one offset, so the file is one consistent state of the live tenant."""
    import tempfile

    from dbsvc.datatools.backup import take_backup

    with tempfile.TemporaryDirectory(prefix="dbsvc-export-") as scratch:
        copy = os.path.join(scratch, tenant)
        try:
            manifest = take_backup(directory, copy, tenant)
        except OSError as exc:
            raise TenantLocked(directory, pid, f"{export_a_backup()} (the copy failed: {exc})") from exc
        report = export_from(copy)
    held = f"process {pid}" if pid else "a server"
    return (
        report,
        f" (from a consistent copy taken beside the running server, {held}, at offset {manifest['head_offset']})",
    )


def run_import(args: argparse.Namespace, module: Any, config: Config) -> int:
    from dbsvc.datatools.load import import_file, open_source
    from dbsvc.datatools.tenant import existing_tenant
    from dbsvc.storage.tenants import create_tenant

    if args.frames is not None:
        return run_import_frames(args, module, config)
    source, _size = open_source(args.file)  # a file that cannot be imported touches no tenant
    source.close()
    directory = os.path.join(config.data_dir, config.tenant)
    if not config.tenant_explicit and not os.path.isdir(directory):
        create_tenant(config.data_dir, config.tenant)  # as `serve` does for `default`
    directory = existing_tenant(config.data_dir, config.tenant)
    try:
        report = import_file(
            directory,
            module,
            args.file,
            sync=config.sync,
            replication=config.replication,
            retain_bytes=config.replication_retain_bytes,
            quiet=args.quiet,
        )
    except ImportRejected as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        more = f" ({exc.count - len(exc.problems)} more not shown)" if exc.count > len(exc.problems) else ""
        print(f"dbsvc: error: import refused: {exc.count} bad line(s){more}; nothing was imported", file=sys.stderr)
        return EXIT_FAILURE
    print(report.summary(), file=sys.stderr)
    return EXIT_OK


def run_import_frames(args: argparse.Namespace, module: Any, config: Config) -> int:
    """`dbsvc import --frames FILE` (frames.py): an empty tenant rebuilt from a
    `replicate --out` file, offsets and all; a refusal leaves the tenant as it was."""
    from dbsvc.datatools.frames import import_frames
    from dbsvc.datatools.tenant import existing_tenant
    from dbsvc.storage.tenants import create_tenant

    if not os.path.isfile(args.frames):
        raise ConfigError(f"--frames {args.frames!r}: not a file (expected a `replicate --out` file)")
    directory = os.path.join(config.data_dir, config.tenant)
    if not config.tenant_explicit and not os.path.isdir(directory):
        create_tenant(config.data_dir, config.tenant)  # as `serve` does for `default`
    directory = existing_tenant(config.data_dir, config.tenant)
    try:
        report = import_frames(directory, module, args.frames, config.tenant, sync=config.sync)
    except ImportRejected as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        print(f"dbsvc: error: import refused; tenant {config.tenant!r} was left as it was", file=sys.stderr)
        return EXIT_FAILURE
    if report.torn is not None:
        print(f"{args.frames}: {report.torn}", file=sys.stderr)
    print(report.summary(), file=sys.stderr)
    return EXIT_OK


def run_backup(args: argparse.Namespace, config: Config) -> int:
    from dbsvc.datatools.backup import take_backup
    from dbsvc.datatools.tenant import existing_tenant

    name = config.tenant
    manifest = take_backup(existing_tenant(config.data_dir, name), args.directory, name)
    size = sum(f["bytes"] for f in manifest["files"].values())
    print(
        f"backed up tenant {name!r} to {args.directory}: {size} bytes, head offset {manifest['head_offset']}, "
        f"epoch {manifest['epoch'] or '(never opened)'}"
    )
    return EXIT_OK


def run_restore(args: argparse.Namespace, data_dir: str) -> int:
    from dbsvc.datatools.backup import restore_backup

    manifest = restore_backup(args.source, data_dir, args.name)
    print(
        f"created tenant {args.name!r} from the backup in {args.source} (tenant {manifest.get('tenant')!r}, "
        f"taken {manifest.get('created')}, head offset {manifest.get('head_offset')})"
    )
    return EXIT_OK
