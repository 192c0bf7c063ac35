"""Start-up dependency check: a missing runtime package is one line that says how to fix it.

`dbsvc check`, `openapi`, `init` and the tenant tools run on the standard library alone, so
the packages the server needs are imported lazily, deep inside `serve`. Without this check
a host lacking `h11` would open the tenant and then die in a traceback naming a module the
user never asked for. `require_server_packages()` runs before `serve` touches anything;
`missing_package_message()` turns the same failure, when it surfaces as an import error
anyway, into the same line; `require_guard_package()` checks `cryptography` as soon as the
guard is configured. Inside a `dbsvc build` app the fix named is a rebuild `--with-guard`.

The command line prints the message as `dbsvc: error: ...` and exits with status 2 (a
configuration error: nothing was touched). Imports only the standard library and
`dbsvc.errors`: it must work in exactly the environment that lacks everything else.
"""

from __future__ import annotations

import importlib.util

from dbsvc.errors import ConfigError

# What the server imports at run time, and what each one is for (docs/guide/configuration.md).
SERVER_PACKAGES = ("h11", "wsproto")
GUARD_PACKAGE = "cryptography"


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken parent or a bad __spec__
        return False


def missing_package_message(name: str) -> str | None:
    """The one-line fix for a missing runtime package `name`, or None when it is not one."""
    if name in SERVER_PACKAGES:
        return (
            f"the package {name!r} is not installed, and `dbsvc serve` needs it: run "
            f"`python -m pip install {' '.join(SERVER_PACKAGES)}`, or with no install here, "
            "build a self-contained app where dbsvc is installed (`dbsvc build SCHEMA -o APP.pyz`) "
            "and run `python APP.pyz` on this host"
        )
    if name == GUARD_PACKAGE:
        return (
            f"the package {name!r} is not installed, and the token guard needs it "
            f"(SERVICE_JWT_PUBKEY, SERVICE_JWKS_URL or the schema's [auth] names a key): {guard_fix()}"
        )
    return None


def in_archive() -> bool:
    """Whether dbsvc runs from a `dbsvc build` app (this module came out of a zip archive)."""
    return hasattr(__spec__.loader, "archive")


def guard_fix() -> str:
    """How to get `cryptography` where it is missing: an app is rebuilt to carry it."""
    if in_archive():
        return (
            "this app was built without it: rebuild it with `dbsvc build SCHEMA -o APP.pyz "
            "--with-guard` where cryptography is installed (the app then carries it), or run the "
            f"app with a Python that has it (`python -m pip install {GUARD_PACKAGE}`)"
        )
    return (
        f"run `python -m pip install {GUARD_PACKAGE}`, or serve without the guard; "
        "`dbsvc build SCHEMA -o APP.pyz --with-guard` makes an app that carries it"
    )


def require_guard_package(setting: str) -> None:
    """Raise ConfigError when the guard is asked for by `setting` and `cryptography` cannot
    be imported: at start-up, before anything is opened, for either key source. In a
    `--with-guard` app this is where the embedded copy is unpacked (dbsvc/zipapp.py)."""
    if not _installed(GUARD_PACKAGE):
        raise ConfigError(f"{setting} is set but the {GUARD_PACKAGE!r} package is not installed: {guard_fix()}")


def require_server_packages() -> None:
    """Raise ConfigError naming the first server package that is not importable."""
    for name in SERVER_PACKAGES:
        if not _installed(name):
            raise ConfigError(str(missing_package_message(name)))


def translate_import_error(exc: ModuleNotFoundError) -> ConfigError | None:
    """The ConfigError for an import error of a runtime package, else None (a real bug)."""
    top = (exc.name or "").partition(".")[0]
    message = missing_package_message(top)
    return ConfigError(message) if message is not None else None
