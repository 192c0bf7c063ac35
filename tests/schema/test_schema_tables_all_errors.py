"""The `[runtime]` and `[auth]` tables (dbsvc/schema/tables.py) through `parse_schema`: every
bad entry of one table reported in one run, the two key sources excluding each other, and
the edge values each key takes (a capacity of 1, an http:// JWKS URL). Fixture-free, so
`bench/mutation_inprocess.py` runs it (session 16, wt-mpo6: tables.py's survivors)."""

from __future__ import annotations

from dbsvc.schema import parse_schema
from support.schemakit import schema_errors

MODEL = "model User {\n  id int @id\n}\n"


def test_every_bad_entry_of_a_table_is_reported_in_one_run():
    text = (
        "[runtime]\ncolour = 1\nreplication = 3\nchangefeed_capacity = 0\nreplication_retain_mb = -1\n\n"
        '[auth]\npubkey = "keys/idp.pem"\njwks_url = "http://id.example/jwks"\n'
        'jwks_url = "https://id.example/jwks"\nleeway = 1.5\n\n' + MODEL
    )
    assert schema_errors(text) == [
        "s.dbs:2:1: error: unknown key 'colour' in [runtime], expected one of replication, changefeed_capacity, replication_retain_mb",
        "s.dbs:3:15: error: [runtime] replication expects true or false, got 3",
        "s.dbs:4:23: error: [runtime] changefeed_capacity expects a positive integer, got 0",
        "s.dbs:5:25: error: [runtime] replication_retain_mb expects a non-negative integer, got -1",
        "s.dbs:9:1: error: [auth] pubkey and jwks_url exclude each other, expected only one",
        "s.dbs:10:1: error: duplicate key 'jwks_url' in [auth]",
        "s.dbs:11:10: error: [auth] leeway expects a non-negative integer, got 1.5",
    ]


def test_a_key_repeated_after_its_refused_value_is_a_duplicate():
    # Before: the first value's type error alone, and the repeat taken without a word.
    text = "[runtime]\nreplication = 3\nreplication = true\n" + MODEL
    assert schema_errors(text) == [
        "s.dbs:2:15: error: [runtime] replication expects true or false, got 3",
        "s.dbs:3:1: error: duplicate key 'replication' in [runtime]",
    ]


def test_a_capacity_of_one_and_an_http_jwks_url_are_taken():
    schema = parse_schema('[runtime]\nchangefeed_capacity = 1\n[auth]\njwks_url = "http://id.example/jwks"\n' + MODEL)
    assert schema.runtime.changefeed_capacity == 1
    assert schema.auth.jwks_url == "http://id.example/jwks"


def test_an_unknown_table_a_duplicate_key_and_a_bad_literal_do_not_end_the_run():
    text = (
        "[extra]\na = 1\n[runtime]\nreplication = true\nreplication = false\nchangefeed_capacity = 1.\n"
        'replication_retain_mb = -1\n[auth]\njwks_url = "https://id.example/jwks"\npubkey = "k.pem"\n' + MODEL
    )
    assert schema_errors(text) == [
        "s.dbs:1:2: error: unknown table 'extra', expected 'runtime' or 'auth'",
        "s.dbs:5:1: error: duplicate key 'replication' in [runtime]",
        "s.dbs:6:23: error: invalid number '1.', expected digits with an optional fraction and exponent",
        "s.dbs:7:25: error: [runtime] replication_retain_mb expects a non-negative integer, got -1",
        "s.dbs:10:1: error: [auth] pubkey and jwks_url exclude each other, expected only one",
    ]
