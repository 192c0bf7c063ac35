"""`dbsvc build`: one schema -> one self-contained zipapp (PEP 441) that serves it.

Archive layout (every entry stored with a fixed timestamp and fixed permissions, in sorted
order, so the same schema and the same installed packages give the same bytes)::

    #!/usr/bin/env python3          shebang line before the zip data
    __main__.py                     calls dbsvc.zipapp.main(argv), the app's entry point
    _dbsvc_app/__init__.py          the generated module (dbsvc.compiler.generate_source): the
                                    schema compiled, its OpenAPI and AsyncAPI documents inside
    _dbsvc_app/schema.dbs           the schema's source, which `APP.pyz client` compiles
    dbsvc/**.py                     the dbsvc package itself: .py files, no tests, plus the
    dbsvc/explorer/*.{html,css,js}  explorer's page (served at /_/, docs/explorer.md)
    h11/**, wsproto/**              the pure-Python dependencies, copied from the installed
                                    environment (no __pycache__)
    **.pyc                          beside every .py above: its bytecode (PEP 552, checked
                                    hash), so a start compiles nothing (half the start-up
                                    time, bench/README.md); another Python version skips them
    LICENSES/<dist>.txt             their license texts, when the installed metadata has them
    _dbsvc_embedded/**              --with-guard only: the installed `cryptography` and the
                                    distributions it requires (cffi, pycparser), every file its
                                    metadata lists, unpacked on first use (dbsvc/zipapp.py)
    _dbsvc_embedded/MANIFEST.json   their top-level names, versions, files with sha256, and
                                    the extension suffix of the Python that built the app

`python APP.pyz` serves the schema; `python APP.pyz --help` lists the companion commands
(the same command line as `dbsvc`, dbsvc/cli.py). Nothing outside the archive is needed
but a Python 3.11+ interpreter; the token guard also needs `cryptography`, installed on the
host or carried by the app (`--with-guard`, for a host of the same platform and Python).

The archive is written to a temporary file beside OUTPUT (a unique name, so builds side by
side do not collide), fsynced, then renamed over OUTPUT, so OUTPUT is either the old file or
the complete new one: `files.create_durably`, storage's one durable-new-file helper, through
its file seam. The directory fsync after the rename is best effort (a failure is ignored:
some file systems refuse to fsync a directory, and the archive itself is already durable).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import marshal
import os
import re
import secrets
import stat
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from dbsvc.errors import BuildError
from dbsvc.storage.files import create_durably, fsync_dir
from dbsvc.zipapp import APP_PACKAGE, APP_SCHEMA, EMBEDDED, MANIFEST

if TYPE_CHECKING:
    from dbsvc.schema.ir import Schema

DEPENDENCIES: tuple[str, ...] = ("h11", "wsproto")
GUARD_DISTRIBUTION = "cryptography"
SHEBANG = b"#!/usr/bin/env python3\n"
# ZIP cannot store dates before 1980; a fixed one keeps archives reproducible.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = frozenset({"__pycache__", "tests", "test"})
_SKIP_SUFFIXES = (".pyc", ".pyo")
# dbsvc's own files that travel: its code, the explorer's static page, the TypeScript client's parts.
_DBSVC_SUFFIXES = (".py", ".html", ".css", ".js", ".svg", ".ts")
# Files of an installed distribution that describe this installation, not the package.
_INSTALL_RECORDS = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})

# The interpreter check first, in the syntax every Python parses (dbsvc/launch.py).
MAIN_SOURCE = '''"""Entry point of a dbsvc app: the command line over the schema it was built for (dbsvc/zipapp.py)."""
import sys

from dbsvc.launch import require_python

require_python()

from dbsvc.zipapp import main

raise SystemExit(main(sys.argv[1:]))
'''


def build_zipapp(schema: Schema, output: str | os.PathLike[str], *, with_guard: bool = False) -> Path:
    """Compile `schema` and write the zipapp serving it to `output`; returns the path.
    `with_guard`: embed the installed cryptography too."""
    from dbsvc.compiler import generate_source

    return write_zipapp(output, generate_source(schema), with_guard=with_guard, schema_source=schema.source)


def write_zipapp(
    output: str | os.PathLike[str], generated_source: str, *, with_guard: bool = False, schema_source: str | None = None
) -> Path:
    """Package already generated source (and the schema's, for `APP.pyz client`) into a
    zipapp at `output`, atomically."""
    entries = dict(_archive_entries(generated_source, with_guard, schema_source))
    target = Path(output)
    directory = target.parent if str(target.parent) else Path(".")
    tmp_name = str(directory / f".{target.name}.{secrets.token_hex(8)}.tmp")
    # mode 0o777 less the umask: an executable, like zipapp's
    with create_durably(str(target), tmp=tmp_name, mode=0o777, sync_dir=False) as raw:
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
    try:
        fsync_dir(str(directory))
    except OSError:
        pass  # best effort: see the module docstring
    return target


def _archive_entries(generated_source: str, with_guard: bool, schema_source: str | None) -> Iterator[tuple[str, bytes]]:
    yield "__main__.py", MAIN_SOURCE.encode("utf-8")
    source = generated_source.encode("utf-8")
    yield f"{APP_PACKAGE}/__init__.py", source
    yield f"{APP_PACKAGE}/__init__.pyc", _bytecode(source, f"{APP_PACKAGE}/__init__.py")
    if schema_source is not None:
        yield f"{APP_PACKAGE}/{APP_SCHEMA}", schema_source.encode("utf-8")
    yield from _package_files("dbsvc", _package_dir("dbsvc"), only=_DBSVC_SUFFIXES)
    for name in DEPENDENCIES:
        yield from _package_files(name, _package_dir(name), only=None)
        license_text = _license_text(name)
        if license_text is not None:
            yield f"LICENSES/{name}.txt", license_text
    if with_guard:
        yield from embedded_entries(GUARD_DISTRIBUTION)


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
            f"environment ({sys.executable}); install it (pip install {name}) and retry"
        )
    return Path(locations[0])


def _package_files(package: str, root: Path, *, only: tuple[str, ...] | None) -> Iterator[tuple[str, bytes]]:
    """Every file of a package directory (`only`: with these suffixes) as (archive name,
    bytes), refusing compiled parts."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            if filename.endswith(_SKIP_SUFFIXES) or filename.startswith("."):
                continue
            if filename.endswith((".so", ".pyd", ".dylib")):
                raise BuildError(
                    f"cannot build the zipapp: {package!r} is not pure Python ({str(path)!r} is a compiled extension)"
                )
            if only is not None and not filename.endswith(only):
                continue
            relative = path.relative_to(root).as_posix()
            data = path.read_bytes()
            yield f"{package}/{relative}", data
            if filename.endswith(".py"):
                yield f"{package}/{relative}c", _bytecode(data, f"{package}/{relative}")


def _bytecode(source: bytes, name: str) -> bytes:
    """The checked-hash .pyc of a module (PEP 552), which zipimport reads instead of
    compiling the source at every start; an interpreter of another version skips it (its
    magic number differs) and compiles the .py beside it. `name` is the code's file name."""
    code = compile(source, name, "exec", dont_inherit=True, optimize=0)
    flags = (0b11).to_bytes(4, "little")  # hash-based, checked against the source
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


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


# ---------------------------------------------------------------- --with-guard


def embedded_entries(root: str) -> Iterator[tuple[str, bytes]]:
    """The installed distribution `root` and every distribution it requires, as archive
    entries under EMBEDDED, then the manifest (dbsvc/zipapp.py unpacks them)."""
    files: dict[str, bytes] = {}
    versions: dict[str, str] = {}
    for dist in required_distributions(root):
        versions[dist.metadata["Name"]] = dist.version
        files.update(_distribution_files(dist))
    manifest = {
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "distributions": versions,
        "top_level": sorted(_top_level_names(files)),
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }
    for name in sorted(files):
        yield f"{EMBEDDED}/{name}", files[name]
    yield MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")


def required_distributions(root: str) -> list[importlib.metadata.Distribution]:
    """`root` and, transitively, the installed distributions its metadata requires (extras
    left out, environment markers evaluated for this interpreter), in a stable order."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        key = _normalize(name)
        if key in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise BuildError(
                f"cannot build with --with-guard: the package {name!r} is not installed in this "
                f"environment ({sys.executable}); install it (pip install {name}) and retry"
            ) from None
        found[key] = dist
        pending.extend(required_names(dist.requires or []))
    return [found[key] for key in sorted(found)]


def required_names(requirements: list[str]) -> list[str]:
    """The names of the requirements (PEP 508 strings) this interpreter needs at run time:
    none behind an extra; markers evaluated with `packaging` when it is installed, and
    otherwise every requirement without an extra kept (a superset, never a miss)."""
    names = []
    for requirement in requirements:
        text, _, marker = requirement.partition(";")
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        if match is None:
            raise BuildError(f"cannot read the requirement {requirement!r} of an installed package")
        if not marker.strip() or _marker_holds(marker.strip()):
            names.append(match.group(1))
    return names


def _marker_holds(marker: str) -> bool:
    if re.search(r"\bextra\s*==", marker):
        return False  # an optional feature nobody asked for
    try:
        from packaging.markers import Marker
    except ImportError:
        return True
    return Marker(marker).evaluate()


def _distribution_files(dist: importlib.metadata.Distribution) -> Iterator[tuple[str, bytes]]:
    """(path relative to site-packages, bytes) of every file the installed metadata lists,
    leaving out caches, scripts outside site-packages and the installation's own records."""
    name = dist.metadata["Name"]
    if dist.files is None:
        raise BuildError(
            f"cannot build with --with-guard: the installed {name!r} lists no files "
            "(installed without a RECORD); reinstall it with pip"
        )
    for file in dist.files:
        parts = file.parts
        if parts[0] == ".." or "__pycache__" in parts or file.name.endswith(_SKIP_SUFFIXES):
            continue
        if parts[0].endswith(".dist-info") and file.name in _INSTALL_RECORDS:
            continue
        located = Path(str(file.locate()))
        if not located.is_file():
            raise BuildError(
                f"cannot build with --with-guard: {str(located)!r} of {name!r} is missing; reinstall it with pip"
            )
        yield file.as_posix(), located.read_bytes()


def _top_level_names(files: dict[str, bytes]) -> set[str]:
    """The importable top-level names: package directories and top-level modules."""
    names = set()
    for path in files:
        first = path.split("/")[0]
        if "/" in path and not first.endswith((".dist-info", ".data")):
            names.add(first)
        elif "/" not in path and path.endswith((".py", ".so")):
            names.add(first.split(".")[0])
    return names


def _normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()
