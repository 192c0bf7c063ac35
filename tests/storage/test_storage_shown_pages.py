"""A list page's dicts (table.py `Table.shown_all`): the ids of a page shown lately, each
still the very stored record it was, give the same dicts again (the encoded-JSON cache of
the app trusts them by identity); a record replaced or deleted since is read afresh."""

from __future__ import annotations

import json

from dbsvc.runtime import Query
from support.storage import run, user


def test_a_page_shown_again_is_the_same_dicts_until_a_record_of_it_changes(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    query = Query(sort=(("name", False),), limit=3)

    async def go() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i, name=f"n{i}"))
        first = store.list_page("User", query)[0]
        again = store.list_page("User", query)[0]
        assert again == first and all(a is b for a, b in zip(again, first))
        again.append({})  # the caller's list is its own
        assert len(store.list_page("User", query)[0]) == 3
        await store.replace("User", 2, user(2, name="n2-new"))
        third = store.list_page("User", query)[0]
        assert [r["name"] for r in third] == ["n1", "n2-new", "n3"]
        assert third[0] is first[0] and third[2] is first[2]
        await store.delete("User", 1)
        assert [r["name"] for r in store.list_page("User", query)[0]] == ["n2-new", "n3", "n4"]

    run(go())


def test_a_page_sent_whole_ends_on_its_id_and_sorted_on_its_id_and_sort_keys(tmp_path, stores):
    """With texts, the last record's `Link` reads its id alone in id order (shown.py
    `_sent_id`: never decoded for it) and, sorted, its id and the sort keys the store read
    from its key columns (`sort_keys`, session 32: never decoded either)."""
    store = stores(str(tmp_path), sync="off")

    async def go() -> None:
        for i in range(1, 6):
            await store.insert("User", user(i, name=f"n{i}"))
        for _ask in range(3):  # made, kept from its second ask, found kept
            plain, _total, _watermark, more = store.list_page("User", Query(limit=3), texts=True)
            assert more and dict(plain[-1]) == {"id": 3} and json.loads(plain[-1].text)["name"] == "n3"
            assert [json.loads(r)["id"] for r in plain[:-1]] == [1, 2]
            by_name = store.list_page("User", Query(sort=(("name", True),), limit=3), texts=True)[0]
            assert dict(by_name[-1]) == {"id": 3} and by_name[-1].sort_keys == ("n3",)
            assert json.loads(by_name[-1].text)["name"] == "n3"

    run(go())
