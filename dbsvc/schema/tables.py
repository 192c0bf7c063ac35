"""The `[runtime]` and `[auth]` tables: known keys, value kinds, and the settings they make.

Rules (docs/guide/schema.md#tables, docs/guide/auth.md):

- `[runtime]`: `replication` true/false; `changefeed_capacity` a positive integer;
  `replication_retain_mb` a non-negative integer (MiB of compacted log kept for replicas
  that resume, storage/retain.py; 0 keeps nothing).
- `[auth]`: `issuer`, `audience`, `tenant_claim`, `pubkey`, `jwks_url` strings; `alg` an
  asymmetric JWS algorithm; `leeway` a non-negative integer; `pubkey` and `jwks_url`
  exclude each other. `pubkey` is resolved against the schema file's directory (pure path
  arithmetic: the file is not opened here).
- Any other table, a key repeated or unknown, a table declared twice: an error.

Imports nothing from dbsvc but `dbsvc.errors` and `dbsvc.schema.*`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from dbsvc.errors import SchemaError
from dbsvc.schema.ir import AuthSettings, RuntimeSettings
from dbsvc.schema.syntax import Literal, LiteralKind, TableDecl
from dbsvc.schema.values import shown

ASYMMETRIC_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

# A value check returns None when the literal fits, else what was expected.
_Check = Callable[[Literal], "str | None"]


def _bool(lit: Literal) -> str | None:
    return None if lit.kind is LiteralKind.BOOL else "true or false"


def _positive_int(lit: Literal) -> str | None:
    ok = lit.kind is LiteralKind.INT and lit.value > 0  # type: ignore[operator]
    return None if ok else "a positive integer"


def _non_negative_int(lit: Literal) -> str | None:
    ok = lit.kind is LiteralKind.INT and lit.value >= 0  # type: ignore[operator]
    return None if ok else "a non-negative integer"


def _string(lit: Literal) -> str | None:
    return None if lit.kind is LiteralKind.STRING else "a string"


def _alg(lit: Literal) -> str | None:
    if lit.kind is LiteralKind.STRING and lit.value in ASYMMETRIC_ALGS:
        return None
    return f"an asymmetric algorithm, one of {', '.join(ASYMMETRIC_ALGS)}"


def _url(lit: Literal) -> str | None:
    if lit.kind is LiteralKind.STRING and str(lit.value).startswith(("https://", "http://")):
        return None
    return "an http:// or https:// url string"


TABLE_KEYS: dict[str, dict[str, _Check]] = {
    "runtime": {"replication": _bool, "changefeed_capacity": _positive_int, "replication_retain_mb": _non_negative_int},
    "auth": {
        "issuer": _string,
        "audience": _string,
        "alg": _alg,
        "tenant_claim": _string,
        "leeway": _non_negative_int,
        "pubkey": _string,
        "jwks_url": _url,
    },
}


def check_tables(
    tables: tuple[TableDecl, ...], path: str, errors: list[SchemaError]
) -> tuple[RuntimeSettings, AuthSettings]:
    """Check every table, append each problem to `errors`, return the settings that hold."""
    values: dict[str, dict[str, Literal]] = {"runtime": {}, "auth": {}}
    # Every key written, its value taken or refused: a key repeated after a refused value is
    # still a duplicate, so the schema's author hears of both lines.
    written: dict[str, set[str]] = {"runtime": set(), "auth": set()}
    first_line: dict[str, int] = {}

    def error(message: str, line: int, col: int) -> None:
        errors.append(SchemaError(message, line, col, path))

    for table in tables:
        known = TABLE_KEYS.get(table.name)
        if known is None:
            error(f"unknown table {table.name!r}, expected 'runtime' or 'auth'", table.line, table.col)
            continue
        if table.name in first_line:
            error(
                f"duplicate table {table.name!r}, first declared at line {first_line[table.name]}",
                table.line,
                table.col,
            )
        first_line.setdefault(table.name, table.line)
        seen, keys = values[table.name], written[table.name]
        for entry in table.entries:
            check = known.get(entry.key)
            if check is None:
                error(
                    f"unknown key {entry.key!r} in [{table.name}], expected one of {', '.join(known)}",
                    entry.line,
                    entry.col,
                )
                continue
            if entry.key in keys:
                error(f"duplicate key {entry.key!r} in [{table.name}]", entry.line, entry.col)
                continue
            keys.add(entry.key)
            if entry.value.kind is LiteralKind.BAD:
                continue
            expected = check(entry.value)
            if expected is not None:
                error(
                    f"[{table.name}] {entry.key} expects {expected}, got {shown(entry.value)}",
                    entry.value.line,
                    entry.value.col,
                )
                continue
            if (
                entry.key == "pubkey"
                and "jwks_url" in values["auth"]
                or (entry.key == "jwks_url" and "pubkey" in values["auth"])
            ):
                error("[auth] pubkey and jwks_url exclude each other, expected only one", entry.line, entry.col)
                continue
            seen[entry.key] = entry.value
    return _runtime(values["runtime"]), _auth(values["auth"], path)


def _runtime(values: dict[str, Literal]) -> RuntimeSettings:
    defaults = RuntimeSettings()
    return RuntimeSettings(
        replication=bool(values["replication"].value) if "replication" in values else defaults.replication,
        changefeed_capacity=(
            int(values["changefeed_capacity"].value)  # type: ignore[call-overload]
            if "changefeed_capacity" in values
            else defaults.changefeed_capacity
        ),
        replication_retain_mb=(
            int(values["replication_retain_mb"].value)  # type: ignore[call-overload]
            if "replication_retain_mb" in values
            else defaults.replication_retain_mb
        ),
    )


def _auth(values: dict[str, Literal], path: str) -> AuthSettings:
    def text(key: str) -> str | None:
        return str(values[key].value) if key in values else None

    pubkey = text("pubkey")
    if pubkey is not None and not os.path.isabs(pubkey):
        pubkey = os.path.normpath(os.path.join(os.path.dirname(path), pubkey))
    leeway = values.get("leeway")
    return AuthSettings(
        issuer=text("issuer"),
        audience=text("audience"),
        alg=text("alg"),
        tenant_claim=text("tenant_claim"),
        leeway=int(leeway.value) if leeway is not None else None,  # type: ignore[call-overload]
        pubkey=pubkey,
        jwks_url=text("jwks_url"),
    )
