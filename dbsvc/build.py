"""`dbsvc build`: one schema -> one self-contained zipapp (PEP 441) that serves it.

Archive layout (every entry stored with a fixed timestamp, in sorted order, so the same
schema and the same installed packages give the same bytes)::

    #!/usr/bin/env python3          shebang line before the zip data
    __main__.py                     three lines: call dbsvc.build.run_zipapp(argv)
    _dbsvc_app/__init__.py          the generated module (dbsvc.compiler.generate_source)
    _dbsvc_app/openapi.json         the OpenAPI document (dbsvc.compiler.openapi)
    dbsvc/**.py                     the dbsvc package itself: .py files only, no tests
    h11/**, wsproto/**              the pure-Python dependencies, copied from the installed
                                    environment (no __pycache__)
    LICENSES/<dist>.txt             their license texts, when the installed metadata has them

`python APP.pyz` serves the schema; `python APP.pyz tenant ...` and `compact` run the
companion commands of `dbsvc.cli`; `python APP.pyz openapi` prints the document. Nothing
outside the archive is needed but a Python 3.11+ interpreter (plus `cryptography` when the
token guard is on: it has compiled parts and cannot travel in a zipapp).

The archive is written to a temporary file beside OUTPUT, fsynced, then renamed over
OUTPUT (`os.replace`), so OUTPUT is either the old file or the complete new one.

Imports only the stdlib, `dbsvc` and `dbsvc.errors` at module level: this module also runs
inside the archive, where `run_zipapp` is the entry point. The compiler is imported lazily
by `build_zipapp`, the CLI and server lazily by `run_zipapp`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import stat
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dbsvc import __version__
from dbsvc.errors import BuildError

if TYPE_CHECKING:
    from dbsvc.schema.ir import Schema

APP_PACKAGE = "_dbsvc_app"
DEPENDENCIES: tuple[str, ...] = ("h11", "wsproto")
SHEBANG = b"#!/usr/bin/env python3\n"
# ZIP cannot store dates before 1980; a fixed one keeps archives reproducible.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = frozenset({"__pycache__", "tests", "test"})
_SKIP_SUFFIXES = (".pyc", ".pyo")

MAIN_SOURCE = '''"""Entry point of a dbsvc zipapp: serve the built-in schema, or run a companion command."""
import sys

from dbsvc.build import run_zipapp

raise SystemExit(run_zipapp(sys.argv[1:]))
'''

USAGE = """\
usage: python APP.pyz [serve | openapi | tenant ACTION ... | compact | --help | --version]

A dbsvc database service built for one schema ({schema}).

commands:
  serve (default)   serve the schema; configured by SERVICE_HOST, SERVICE_PORT,
                    SERVICE_DATA, SERVICE_TENANT, SERVICE_JWT_* ... (environment only)
  openapi           print the OpenAPI 3.1 document of the service
  tenant ACTION     create NAME | list | drop NAME --yes: tenant directories under SERVICE_DATA
  compact           offline compaction of the tenant named by SERVICE_TENANT
"""



def build_zipapp(schema: Schema, output: str | os.PathLike[str]) -> Path:
    """Compile `schema` and write the zipapp serving it to `output`; returns the path."""
    from dbsvc.compiler import generate_source
    from dbsvc.compiler.openapi import build_openapi

    document = json.dumps(build_openapi(schema), indent=2) + "\n"
    return write_zipapp(output, generate_source(schema), document,
                        schema_name=os.path.basename(schema.path))


def write_zipapp(output: str | os.PathLike[str], generated_source: str, openapi_json: str,
                 *, schema_name: str = "") -> Path:
    """Package already generated source into a zipapp at `output`, atomically."""
    entries = dict(_archive_entries(generated_source, openapi_json, schema_name))
    target = Path(output)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw:
            raw.write(SHEBANG)
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for name in sorted({*entries, *_directories(entries)}):
                    info = zipfile.ZipInfo(name, date_time=_EPOCH)
                    if name.endswith("/"):
                        info.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10  # MS-DOS dir bit
                        archive.writestr(info, b"")
                        continue
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = (stat.S_IFREG | 0o644) << 16
                    archive.writestr(info, entries[name])
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp_name, 0o777 & ~_umask())  # an executable, like zipapp's
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)
    return target


def _archive_entries(generated_source: str, openapi_json: str,
                     schema_name: str) -> Iterator[tuple[str, bytes]]:
    yield "__main__.py", MAIN_SOURCE.encode("utf-8")
    yield f"{APP_PACKAGE}/__init__.py", generated_source.encode("utf-8")
    yield f"{APP_PACKAGE}/openapi.json", openapi_json.encode("utf-8")
    yield f"{APP_PACKAGE}/BUILD.json", json.dumps(
        {"schema": schema_name, "dbsvc": __version__}, sort_keys=True).encode("utf-8")
    yield from _package_files("dbsvc", _package_dir("dbsvc"), python_only=True)
    for name in DEPENDENCIES:
        yield from _package_files(name, _package_dir(name), python_only=False)
        license_text = _license_text(name)
        if license_text is not None:
            yield f"LICENSES/{name}.txt", license_text


def _directories(names: dict[str, bytes]) -> set[str]:
    """Every parent directory entry (`a/`, `a/b/`). Python 3.11's zipimport finds namespace
    packages (a directory without `__init__.py`) only through explicit directory entries."""
    out: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]) + "/")
    return out


def _package_dir(name: str) -> Path:
    """The directory of an installed package, or a BuildError that says how to get it."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise BuildError(
            f"cannot build the zipapp: the package {name!r} is not installed in this "
            f"environment ({sys.executable}); install it (pip install {name}) and retry")
    return Path(locations[0])


def _package_files(package: str, root: Path, *, python_only: bool) -> Iterator[tuple[str, bytes]]:
    """Every file of a package directory as (archive name, bytes), refusing compiled parts."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            if filename.endswith(_SKIP_SUFFIXES) or filename.startswith("."):
                continue
            if filename.endswith((".so", ".pyd", ".dylib")):
                raise BuildError(f"cannot build the zipapp: {package!r} is not pure Python "
                                 f"({str(path)!r} is a compiled extension)")
            if python_only and not filename.endswith(".py"):
                continue
            relative = path.relative_to(root).as_posix()
            yield f"{package}/{relative}", path.read_bytes()


def _license_text(distribution: str) -> bytes | None:
    """The installed distribution's license file, to travel with its copied code."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.upper().startswith(("LICENSE", "COPYING")):
            located = Path(str(file.locate()))
            if located.is_file():
                return located.read_bytes()
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (POSIX: the directory entry lives in the directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- inside the archive

def run_zipapp(argv: Sequence[str]) -> int:
    """The archive's entry point: `python APP.pyz [serve|openapi|tenant ...|compact]`."""
    args = list(argv)
    command = args[0] if args else "serve"
    if command in ("-h", "--help", "help"):
        sys.stdout.write(USAGE.format(schema=_built_schema_name()))
        return 0
    if command == "--version":
        sys.stdout.write(f"dbsvc {__version__}\n")
        return 0
    if command in ("tenant", "compact"):
        from dbsvc.cli import main

        return main(args)
    if len(args) > 1 or command not in ("serve", "openapi"):
        sys.stderr.write(USAGE.format(schema=_built_schema_name()))
        sys.stderr.write(f"error: unexpected arguments {args!r}\n")
        return 2
    if command == "openapi":
        document = importlib.resources.files(APP_PACKAGE).joinpath("openapi.json")
        sys.stdout.write(document.read_text(encoding="utf-8"))
        return 0
    from dbsvc.cli import serve_generated

    return serve_generated(importlib.import_module(APP_PACKAGE))


def _built_schema_name() -> str:
    try:
        data = importlib.resources.files(APP_PACKAGE).joinpath("BUILD.json").read_text("utf-8")
        return str(json.loads(data).get("schema") or "unknown schema")
    except (ModuleNotFoundError, FileNotFoundError, ValueError):
        return "unknown schema"
