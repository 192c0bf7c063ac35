"""The entry point of a `dbsvc build` app, and the loader of the packages it embeds.

An app is one zip file (PEP 441; its layout is drawn in dbsvc/build.py). Its `__main__.py`
calls `main(argv)`, which imports the generated module the app was built for and runs the
one command line with it, `dbsvc.cli.main(argv, module=...)`: `python APP.pyz` serves, and
`tenant`, `compact`, `export`, `import`, `backup`, `replicate` run from the same file.

Embedded packages (`dbsvc build --with-guard`). `cryptography`, and the `cffi` it needs,
have compiled parts, and Python imports no compiled module out of a zip file. The app
carries them under `_dbsvc_embedded/` beside a manifest, and unpacks them on first use
into a cache directory, as shiv does::

    <cache>/<id>/                 a sys.path entry: cryptography/, _cffi_backend*.so, cffi/,
                                  pycparser/, their *.dist-info/ (licenses, metadata)
    <cache>/<id>/UNPACKED.json    {"files": {name: [size, mtime_ns]}}: each file as unpacked
    <cache>/<id>/MANIFEST.json    the app's manifest, written last
    <cache>                       SERVICE_ZIPAPP_CACHE, else $XDG_CACHE_HOME/dbsvc, else
                                  ~/.cache/dbsvc (`dbsvc.config.zipapp_cache_dir`)
    <id>                          16 hex digits of the manifest's sha256: one directory per
                                  embedded set, so a rebuild with other packages gets its own

Rules:

1. Nothing is unpacked before the first import of an embedded top-level name: a finder at
   the front of `sys.meta_path` does it then. A guarded server imports `cryptography` at
   start-up (`dbsvc.deps.require_guard_package`); an app without the guard writes nothing.
2. Unpacking is atomic: into a new temporary directory beside the final one, every file
   checked against the manifest's sha256 and fsynced, the manifest last, then one rename.
   A directory in place is complete; of two processes unpacking at once, the one whose
   rename loses uses the winner's directory.
3. The cache is this user's alone: it is created 0700, and one that another user owns or
   may write is refused (whoever can write there can run code in this process).
4. The compiled parts run only where they were built: the manifest names the extension
   suffix (`.cpython-311-x86_64-linux-gnu.so`); another interpreter or platform is refused
   with a message that says so, before anything is unpacked.
5. What runs is what was unpacked. Every start that imports an embedded name checks the
   directory against UNPACKED.json: each file the manifest lists is still a regular file
   of the size and modification time (to the nanosecond) it had when it was unpacked. On
   any difference (a truncated `.so` would crash the process with SIGBUS; an edited `.py`
   would run) it logs one warning naming the file and what differed, and unpacks the set
   again. A stat per file is cheap where a sha256 of every byte at every start is not
   (an order of magnitude apart: bench/README.md, "Zipapp cache check"). A change that
   keeps both size and mtime (a deliberate `touch -d`) is not seen: the cache
   is this user's alone (rule 3), and who can write there can run code as this user anyway.
   Repairs are serialized by an flock on the cache directory, and re-checked under it, so
   two starts never both replace the directory.

Imports only the standard library and `dbsvc.errors` at module level: this is the first
dbsvc module an app runs. Unpacking writes through storage's file seam
(`dbsvc.storage.files`: `write_new`, `fsync_dir`, `ops.rename`), imported when an unpack
begins: a pure-Python module, so it loads from the archive like the rest of dbsvc, and by
then `dbsvc.config` has imported `dbsvc.storage` already.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.resources
import json
import logging
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from dbsvc.errors import ConfigError

APP_PACKAGE = "_dbsvc_app"  # the generated module of the app's schema
APP_SCHEMA = "schema.dbs"  # beside it, the schema's source: what `client` compiles
EMBEDDED = "_dbsvc_embedded"  # the compiled packages, unpacked on first use
MANIFEST = f"{EMBEDDED}/MANIFEST.json"
MANIFEST_NAME = "MANIFEST.json"
UNPACKED_NAME = "UNPACKED.json"

log = logging.getLogger("dbsvc.zipapp")


def main(argv: Sequence[str]) -> int:
    """The app's entry point: the command line over the built-in schema; the exit status."""
    loader: Any = __spec__.loader  # a zipimporter inside an app
    archive = getattr(loader, "archive", None)
    if archive is not None:
        install_embedded(loader, archive)
    module = importlib.import_module(APP_PACKAGE)
    from dbsvc.cli import main as cli_main

    return cli_main(argv, module=module)


def app_schema_source(module: ModuleType) -> str | None:
    """The schema source an app carries beside its generated module (`APP.pyz client`
    compiles it); None in an app built before apps carried it, or for a generated module
    run as a script (a module, not a package)."""
    if not hasattr(module, "__path__"):
        return None
    try:
        return importlib.resources.files(module.__name__).joinpath(APP_SCHEMA).read_text(encoding="utf-8")
    except OSError:
        return None


def install_embedded(loader: Any, archive: str) -> EmbeddedPackages | None:
    """Put the finder of the archive's embedded packages first in `sys.meta_path`, when
    the archive has any (None when it was built without). `loader`: the archive's
    zipimporter, which has its directory in memory already."""
    try:
        manifest = loader.get_data(os.path.join(archive, MANIFEST))
    except OSError:
        return None
    finder = EmbeddedPackages(archive, manifest)
    sys.meta_path.insert(0, finder)
    return finder


class EmbeddedPackages(importlib.abc.MetaPathFinder):
    """Finds the embedded top-level modules, unpacking them all on the first request."""

    def __init__(self, archive: str, manifest: bytes) -> None:
        self.archive = archive
        self.manifest = manifest
        self.names = frozenset(json.loads(manifest)["top_level"])
        self.directory: str | None = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or fullname not in self.names:
            return None  # submodules come through their package's __path__
        if self.directory is None:
            from dbsvc.config import zipapp_cache_dir

            self.directory = unpack(self.archive, self.manifest, zipapp_cache_dir(os.environ))
            sys.path.insert(0, self.directory)  # importlib.metadata finds their dist-info too
        return importlib.machinery.PathFinder.find_spec(fullname, [self.directory])


def unpack(archive: str, manifest: bytes, cache: str) -> str:
    """The directory holding the archive's embedded packages, unpacked under `cache` if
    not yet there or not as unpacked (rules 2 to 5)."""
    described = json.loads(manifest)
    _check_platform(described)
    _own_directory(cache)
    target = os.path.join(cache, hashlib.sha256(manifest).hexdigest()[:16])
    if check_unpacked(target, manifest, described["files"]) is None:
        return target
    try:
        with _cache_locked(cache):
            found = check_unpacked(target, manifest, described["files"])  # again: another start may have repaired it
            if found is None:
                return target
            if os.path.lexists(target):  # not ours to guess at: start over
                if found:
                    log.warning(
                        "the app's unpacked packages in %r are damaged: %s; unpacking them again", target, found
                    )
                _remove(target)
            _unpack_new(archive, manifest, described["files"], cache, target)
    except OSError as exc:  # the lock, or setting the old directory aside
        raise ConfigError(
            f"cannot unpack the app's embedded packages into {cache!r} ({exc}); set "
            "SERVICE_ZIPAPP_CACHE to a directory this user can write"
        ) from exc
    return target


def _unpack_new(archive: str, manifest: bytes, names: dict[str, str], cache: str, target: str) -> None:
    from dbsvc.storage import files

    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=cache)
    try:
        _extract(archive, names, scratch)
        files.write_new(os.path.join(scratch, UNPACKED_NAME), _unpacked_record(scratch, names), 0o644)
        files.write_new(os.path.join(scratch, MANIFEST_NAME), manifest, 0o644)
        try:
            files.ops.rename(scratch, target)
        except OSError:
            if check_unpacked(target, manifest, names) is not None:  # not a lost race: a real failure
                raise
            shutil.rmtree(scratch, ignore_errors=True)
        files.fsync_dir(cache)
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise ConfigError(
            f"cannot unpack the app's embedded packages into {cache!r} ({exc}); set "
            "SERVICE_ZIPAPP_CACHE to a directory this user can write"
        ) from exc
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _unpacked_record(directory: str, names: dict[str, str]) -> bytes:
    """UNPACKED.json of a directory just unpacked: each file's size and mtime."""
    record = {}
    for name in sorted(names):
        info = os.lstat(os.path.join(directory, *name.split("/")))
        record[name] = [info.st_size, info.st_mtime_ns]
    return json.dumps({"files": record}, separators=(",", ":")).encode("utf-8")


def check_unpacked(target: str, manifest: bytes, names: dict[str, str]) -> str | None:
    """None when `target` holds the set as it was unpacked (rule 5); else what differs
    first: "" when nothing is there at all, else a phrase naming the file."""
    try:
        with open(os.path.join(target, MANIFEST_NAME), "rb") as handle:
            if handle.read() != manifest:
                return f"{MANIFEST_NAME} is not this app's"
        with open(os.path.join(target, UNPACKED_NAME), "rb") as handle:
            record = json.loads(handle.read())["files"]
    except FileNotFoundError as exc:
        if not os.path.lexists(target):
            return ""
        return f"{os.path.basename(str(exc.filename))} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its record cannot be read ({exc})"
    for name in names:
        expected = record.get(name) if type(record) is dict else None
        if type(expected) is not list or len(expected) != 2:
            return f"{UNPACKED_NAME} has no size and mtime for {name!r}"
        try:
            info = os.lstat(os.path.join(target, *name.split("/")))
        except FileNotFoundError:
            return f"{name!r} is missing"
        except OSError as exc:
            return f"{name!r} cannot be read ({exc.strerror or exc})"
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            return f"{name!r} is {kind}, expected a file"
        size, mtime_ns = expected
        if info.st_size != size:
            return f"{name!r} is {info.st_size} bytes, expected {size}"
        if info.st_mtime_ns != mtime_ns:
            return f"{name!r} was modified after it was unpacked (its mtime changed)"
    return None


@contextlib.contextmanager
def _cache_locked(cache: str) -> Iterator[None]:
    """An exclusive flock on the cache directory itself, for one check-and-repair."""
    fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _check_platform(described: dict[str, Any]) -> None:
    built_for = described.get("ext_suffix")
    here = sysconfig.get_config_var("EXT_SUFFIX")
    if built_for != here:
        raise ConfigError(
            f"this app embeds cryptography built for {built_for!r} (Python and platform of the build "
            f"host), and this interpreter loads {here!r}: rebuild it with `dbsvc build SCHEMA -o "
            "APP.pyz --with-guard` on a host like this one, or install cryptography for this Python"
        )


def _own_directory(cache: str) -> None:
    """Create the cache 0700 if needed; refuse one that others own or may write (rule 3)."""
    try:
        os.makedirs(cache, mode=0o700, exist_ok=True)
        info = os.stat(cache)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the cache directory {cache!r} for the app's embedded packages "
            f"({exc.strerror or exc}); set SERVICE_ZIPAPP_CACHE to a writable directory"
        ) from exc
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"the cache directory {cache!r} is owned or writable by another user, so code "
            "unpacked there could be replaced; set SERVICE_ZIPAPP_CACHE to a directory only "
            "this user can write (mode 0700)"
        )


def _extract(archive: str, files: dict[str, str], scratch: str) -> None:
    """Every file the manifest lists, read out of the archive (zipfile checks each CRC) and
    checked against its sha256 before it is written, fsynced (`write_new`)."""
    from dbsvc.storage.files import write_new

    with zipfile.ZipFile(archive) as source:
        for name, digest in sorted(files.items()):
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or "" in parts:
                raise ConfigError(f"the app is damaged: embedded file name {name!r} leaves its directory")
            data = source.read(f"{EMBEDDED}/{name}")
            if hashlib.sha256(data).hexdigest() != digest:
                raise ConfigError(f"the app is damaged: embedded file {name!r} does not match its manifest")
            path = os.path.join(scratch, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_new(path, data, 0o755 if name.endswith(".so") else 0o644)


def _remove(target: str) -> None:
    """Set an incomplete directory aside (one rename) and delete it."""
    from dbsvc.storage import files

    aside = tempfile.mkdtemp(prefix=".discard.", dir=os.path.dirname(target))
    files.ops.rename(target, os.path.join(aside, "old"))
    shutil.rmtree(aside, ignore_errors=True)
