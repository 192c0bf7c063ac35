"""Every broken `[runtime]` or `[auth]` table is reported with the exact message, line and column
(docs/guide/schema.md): the table's syntax, an unknown or repeated table or key, and a value
of the wrong type or range.

One table, one parametrized test: each case is a source and the full list of
(line, col, message) that `parse_schema` must raise, in source order. Messages are part of
the interface: `dbsvc check` prints them and users grep for them.
"""

from __future__ import annotations

import pytest

from support.schemakit import placed_errors, src

CASES = [
    pytest.param(
        src('[runtime]', 'replication true', 'model A {', '  id int @id', '}'),
        [(2, 13, "expected '=' after key 'replication', got 'true'")],
        id='table_missing_eq',
    ),
    pytest.param(
        src('[runtime]', 'replication =', 'model A {', '  id int @id', '}'),
        [(2, 14, "expected a value after 'replication =', got end of line")],
        id='table_missing_value',
    ),
    pytest.param(
        src('[runtime', 'model A {', '  id int @id', '}'),
        [(1, 9, "expected ']' after table name 'runtime', got end of line")],
        id='table_bad_header',
    ),
    pytest.param(
        src('[server]', 'port = 1', 'model A {', '  id int @id', '}'),
        [(1, 2, "unknown table 'server', expected 'runtime' or 'auth'")],
        id='unknown_table',
    ),
    pytest.param(
        src(
            '[runtime]', 'replication = true', '[runtime]', 'changefeed_capacity = 5', 'model A {', '  id int @id', '}'
        ),
        [(3, 2, "duplicate table 'runtime', first declared at line 1")],
        id='duplicate_table',
    ),
    pytest.param(
        src('[runtime]', 'replicas = 2', 'model A {', '  id int @id', '}'),
        [
            (
                2,
                1,
                "unknown key 'replicas' in [runtime], expected one of replication, changefeed_capacity, "
                "replication_retain_mb",
            )
        ],
        id='runtime_unknown_key',
    ),
    pytest.param(
        src('[runtime]', 'replication = "yes"', 'model A {', '  id int @id', '}'),
        [(2, 15, '[runtime] replication expects true or false, got "yes"')],
        id='runtime_replication_type',
    ),
    pytest.param(
        src('[runtime]', 'changefeed_capacity = 0', 'model A {', '  id int @id', '}'),
        [(2, 23, '[runtime] changefeed_capacity expects a positive integer, got 0')],
        id='runtime_capacity_zero',
    ),
    pytest.param(
        src('[runtime]', 'replication_retain_mb = -1', 'model A {', '  id int @id', '}'),
        [(2, 25, '[runtime] replication_retain_mb expects a non-negative integer, got -1')],
        id='runtime_retain_negative',
    ),
    pytest.param(
        src('[runtime]', 'replication_retain_mb = 1.5', 'model A {', '  id int @id', '}'),
        [(2, 25, '[runtime] replication_retain_mb expects a non-negative integer, got 1.5')],
        id='runtime_retain_float',
    ),
    pytest.param(
        src('[runtime]', 'replication_retain_mb = "256"', 'model A {', '  id int @id', '}'),
        [(2, 25, '[runtime] replication_retain_mb expects a non-negative integer, got "256"')],
        id='runtime_retain_string',
    ),
    pytest.param(
        src('[runtime]', 'replication_retain_mb = true', 'model A {', '  id int @id', '}'),
        [(2, 25, "[runtime] replication_retain_mb expects a non-negative integer, got 'true'")],
        id='runtime_retain_bool',
    ),
    pytest.param(
        src('[runtime]', 'replication_retain_mb = 1', 'replication_retain_mb = 2', 'model A {', '  id int @id', '}'),
        [(3, 1, "duplicate key 'replication_retain_mb' in [runtime]")],
        id='runtime_retain_dup_key',
    ),
    pytest.param(
        src('[runtime]', 'replication = true', 'replication = false', 'model A {', '  id int @id', '}'),
        [(3, 1, "duplicate key 'replication' in [runtime]")],
        id='runtime_dup_key',
    ),
    pytest.param(
        src('[auth]', 'secret = "x"', 'model A {', '  id int @id', '}'),
        [
            (
                2,
                1,
                "unknown key 'secret' in [auth], expected one of issuer, audience, alg, tenant_claim, leeway, pubkey, jwks_url",
            )
        ],
        id='auth_unknown_key',
    ),
    pytest.param(
        src('[auth]', 'issuer = 5', 'model A {', '  id int @id', '}'),
        [(2, 10, '[auth] issuer expects a string, got 5')],
        id='auth_issuer_type',
    ),
    pytest.param(
        src('[auth]', 'leeway = -1', 'model A {', '  id int @id', '}'),
        [(2, 10, '[auth] leeway expects a non-negative integer, got -1')],
        id='auth_leeway_negative',
    ),
    pytest.param(
        src('[auth]', 'alg = "HS256"', 'model A {', '  id int @id', '}'),
        [
            (
                2,
                7,
                '[auth] alg expects an asymmetric algorithm, one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, got "HS256"',
            )
        ],
        id='auth_alg_symmetric',
    ),
    pytest.param(
        src('[auth]', 'pubkey = "k.pem"', 'jwks_url = "https://id/jwks"', 'model A {', '  id int @id', '}'),
        [(3, 1, '[auth] pubkey and jwks_url exclude each other, expected only one')],
        id='auth_pubkey_and_jwks',
    ),
    pytest.param(
        src('[auth]', 'jwks_url = "id/jwks"', 'model A {', '  id int @id', '}'),
        [(2, 12, '[auth] jwks_url expects an http:// or https:// url string, got "id/jwks"')],
        id='auth_jwks_not_url',
    ),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_parse_reports_every_error_with_its_place(source: str, expected: list[tuple[int, int, str]]) -> None:
    assert placed_errors(source) == expected
