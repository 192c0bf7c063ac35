"""The memory form of an ordered index built one way or another (storage/indexes.py
`OrderedIndex`), in process and fixture-free: a number field's index keeps its keys, and
its key column, as 8-byte arrays of its typecode, whether made from pairs or from columns
(docs/mutation.md, "storage/query.py, indexes.py", session 8, late)."""

from __future__ import annotations

from array import array

import pytest

from dbsvc.storage.indexes import OrderedIndex


@pytest.mark.parametrize("typecode", ["q", "d"])
def test_an_index_made_from_pairs_keeps_its_key_column_as_an_array_of_its_typecode(typecode):
    one = 1.5 if typecode == "d" else 1
    index = OrderedIndex([(one, 1), (None, 2), (one, 3)], typecode)
    assert index.column.typecode == typecode
    assert type(index.column.slots) is array and index.column.slots.typecode == typecode
    assert [type(k) for k in index.key_sublists] == [array]
    assert list(index) == [(one, 1), (one, 3), (None, 2)]


def test_an_index_of_plain_keys_keeps_lists():
    index = OrderedIndex([("b", 1), ("a", 2)])
    assert index.column.typecode == ""
    assert type(index.column.slots) is list
    assert list(index) == [("a", 2), ("b", 1)]
