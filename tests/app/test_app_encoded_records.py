"""The per-record JSON cache: fresh exactly while the store still holds the same record object."""

from __future__ import annotations

import json

from dbsvc.app import EncodedRecords
from dbsvc.compiler import compile_schema
from dbsvc.schema import load_schema
from support.server import ROOT

MODULE = compile_schema(load_schema(str(ROOT / "schemas" / "blog.dbs")))
USER = MODULE.BY_NAME["User"]


def user(id_: int, name: str) -> dict:
    return {
        "id": id_,
        "email": f"{id_}@x.io",
        "name": name,
        "age": None,
        "role": "reader",
        "joined": "2024-01-01T00:00:00Z",
        "profile": None,
    }


def test_same_record_object_is_encoded_once():
    cache = EncodedRecords(list(MODULE.MODELS))
    record = user(1, "Ann")
    first = cache.encode(USER, record)
    assert cache.encode(USER, record) is first
    assert json.loads(first) == record


def test_a_replaced_record_with_the_same_id_is_encoded_again():
    cache = EncodedRecords(list(MODULE.MODELS))
    cache.encode(USER, user(1, "Ann"))
    assert json.loads(cache.encode(USER, user(1, "Bea")))["name"] == "Bea"


def test_capacity_evicts_the_oldest_entry():
    cache = EncodedRecords(list(MODULE.MODELS), capacity=2)
    records = [user(i, f"n{i}") for i in range(3)]
    encoded = [cache.encode(USER, r) for r in records]
    assert cache.encode(USER, records[2]) is encoded[2]
    assert cache.encode(USER, records[0]) is not encoded[0]  # evicted, encoded afresh
    assert cache.encode(USER, records[0]) == encoded[0]


def test_an_encoding_over_the_largest_is_not_kept_nor_its_record():
    cache = EncodedRecords(list(MODULE.MODELS), largest=200)
    small, big = user(1, "Ann"), user(2, "x" * 300)
    cache.encode(USER, small)
    first = cache.encode(USER, big)
    assert json.loads(first) == big and cache.encode(USER, big) is not first  # encoded each time
    assert cache._entries["User"].keys() == {1}  # no entry holds the big dict
    grown = user(1, "y" * 300)  # a record that grew past it
    cache.encode(USER, grown)
    assert cache._entries["User"] == {} and json.loads(cache.encode(USER, grown)) == grown
