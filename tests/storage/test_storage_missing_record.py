"""A write to a record that does not exist is 404 with the detail every route gives
(docs/guide/errors.md: "User 7 does not exist"), and changes nothing: PUT and DELETE reach
the store's own check (storage/constraints.py), GET and PATCH the access layer's."""

from __future__ import annotations

import pytest

from dbsvc.errors import NotFound
from support.storage import open_store, run, user


def test_replace_and_delete_of_a_missing_record_name_the_model_and_the_id(tenant):
    store = open_store(tenant)
    try:
        run(store.insert("User", user(1)))
        with pytest.raises(NotFound) as replaced:
            run(store.replace("User", 7, user(7)))
        assert str(replaced.value) == "User 7 does not exist"
        with pytest.raises(NotFound) as deleted:
            run(store.delete("User", 8))
        assert str(deleted.value) == "User 8 does not exist"
        assert store.head_offset == 1  # nothing was written
    finally:
        store.close()
