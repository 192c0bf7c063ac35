"""Pages of one sort key asked of a real store, at their edges, with the answers written out.

A list sorted by one field with a range on that field, or with a cursor, and no other
condition is a seek (seek.py plan 1): ascending, the page is sliced out of the index by
position (walks.py `ascending_page`); descending, the nulls, the rest of the cursor's run,
then the runs below it from the top (`descending_page`). Ten records, their keys chosen so
that every edge is one page away (`n`, nulls last ascending and first descending, ties on
the id ascending):

    ascending   3: 2 5 9 | 5: 1 3 7 | 7: 6 10 | null: 4 8
    descending  null: 4 8 | 7: 6 10 | 5: 1 3 7 | 3: 2 5 9

Held here: a cursor on each place of a run of equal keys (its first, middle and last id),
on the first and the last record, on a null; a page that ends exactly at a run's end or at
the last record (no next page); an offset into the nulls; windows that hold nothing; a
cursor whose record was deleted, and records written before and after its place between
two pages; a list at a past watermark (`as_of`). One store of 1,200 records (runs of 300
across the index's sublists, LOAD 512) checks the same walks where runs cross sublists.

The in-process mutation runner calls these (no fixture; each test opens its own store in
a throwaway directory): session 20 left `ascending_page` and `descending_page` unjudged
because their only fast tests were hypothesis ones (docs/mutation.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.cursors import encode_cursor
from dbsvc.schema import parse_schema
from dbsvc.storage import Store
from dbsvc.storage.tenants import create_tenant

SCHEMA = """
model Item {
  id  int   @id
  n   int?  @sort
  k   str   @filter
}
"""
MODULE = compile_schema(parse_schema(SCHEMA, "edges.dbs"))
ITEM = MODULE.BY_NAME["Item"]
KEYS = {1: 5, 2: 3, 3: 5, 4: None, 5: 3, 6: 7, 7: 5, 8: None, 9: 3, 10: 7}
ASCENDING = [2, 5, 9, 1, 3, 7, 6, 10, 4, 8]
DESCENDING = [4, 8, 6, 10, 1, 3, 7, 2, 5, 9]


@contextlib.contextmanager
def store_of(keys: dict[int, int | None]) -> Iterator[Store]:
    """A store in a throwaway tenant holding one Item per (id, n), closed after the block."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(create_tenant(tmp, "t"), MODULE.MODELS, MODULE.DESCRIPTION, sync="off")
        try:

            async def fill() -> None:
                for id_, n in keys.items():
                    await store.insert("Item", ITEM.validate_create({"id": id_, "n": n, "k": "x"}))

            asyncio.run(fill())
            yield store
        finally:
            store.close()


def insert(store: Store, id_: int, n: int | None) -> None:
    asyncio.run(store.insert("Item", ITEM.validate_create({"id": id_, "n": n, "k": "x"})))


def delete(store: Store, *ids: int) -> None:
    for id_ in ids:
        asyncio.run(store.delete("Item", id_))


def cursor(desc: bool, key: int | None, id_: int) -> tuple[str, str]:
    """The `cursor` parameter of the page that ended on the record (key, id_)."""
    return ("cursor", encode_cursor("Item", [("n", desc)], [key], id_))


def page(store: Store, *params: tuple[str, str], desc: bool = False, limit: int = 100) -> tuple[list[int], int, bool]:
    """(the page's ids, total, whether another page follows) of a list sorted by `n`."""
    sort = [("sort", "-n" if desc else "n"), ("limit", str(limit))]
    records, total, _watermark, more = store.list_page("Item", ITEM.parse_list_query([*params, *sort]))
    return [r["id"] for r in records], total, more


# -- ascending: slices of the index, then the nulls ------------------------------------------


@pytest.mark.parametrize(
    "params, limit, want",
    [
        ([("n__gte", "3")], 3, ([2, 5, 9], 8, True)),  # ends at the end of the run of 3s
        ([("n__gte", "3"), ("offset", "3")], 3, ([1, 3, 7], 8, True)),
        ([("n__gte", "3"), ("offset", "6")], 2, ([6, 10], 8, False)),  # ends at the last record
        ([("n__gte", "3"), ("offset", "6")], 3, ([6, 10], 8, False)),
        ([("n__gte", "3"), ("offset", "8")], 3, ([], 8, False)),
        ([("n__gt", "3"), ("n__lt", "7")], 100, ([1, 3, 7], 3, False)),  # one run, bounds open
        ([("n__gte", "5"), ("n__lte", "5"), ("offset", "1")], 1, ([3], 3, True)),
        ([("n__gt", "7")], 10, ([], 0, False)),  # above every key: an empty window
        ([("n__lt", "3")], 10, ([], 0, False)),  # below every key
        ([("n__null", "true")], 10, ([4, 8], 2, False)),
        ([("n__null", "true"), ("offset", "1")], 10, ([8], 2, False)),
        ([("n__null", "true"), ("offset", "1")], 1, ([8], 2, False)),
        ([("n__null", "true")], 1, ([4], 2, True)),
        ([("n__null", "true"), ("offset", "2")], 10, ([], 2, False)),
        ([("n__null", "false"), ("offset", "7")], 10, ([10], 8, False)),
    ],
)
def test_an_ascending_window_pages_at_its_edges(params, limit, want):
    with store_of(KEYS) as store:
        assert page(store, *params, limit=limit) == want


@pytest.mark.parametrize(
    "key, id_, limit, want",
    [
        (3, 2, 3, [5, 9, 1]),  # after the first record, inside a run
        (3, 5, 2, [9, 1]),  # after a run's middle: its last id, then the next run
        (3, 9, 3, [1, 3, 7]),  # after a run's end: the next run whole
        (5, 3, 5, [7, 6, 10, 4, 8]),  # the rest, through the nulls to the last record
        (5, 3, 4, [7, 6, 10, 4]),
        (7, 10, 5, [4, 8]),  # after the last non-null key: the nulls
        (7, 6, 1, [10]),
        (None, 4, 5, [8]),  # a cursor in the nulls: the nulls after its id
        (None, 8, 5, []),  # after the last record
        (4, 99, 5, [1, 3, 7, 6, 10]),  # a place no record holds: the next key's run
        (5, 2, 5, [3, 7, 6, 10, 4]),  # an id below the run's first: the whole run but 1
    ],
)
def test_an_ascending_cursor_page_starts_right_after_its_place(key, id_, limit, want):
    with store_of(KEYS) as store:
        got, total, more = page(store, cursor(False, key, id_), limit=limit)
        assert (got, total) == (want, 10)
        tail = ASCENDING[ASCENDING.index(want[0]) :] if want else []
        assert more == (len(tail) > limit)


@pytest.mark.parametrize(
    "params, key, id_, want",
    [
        ([("n__gte", "5")], 5, 3, ([7, 6, 10], 5)),  # a range, the cursor inside it
        ([("n__gte", "5")], 3, 9, ([1, 3, 7, 6, 10], 5)),  # the cursor below the range
        ([("n__lte", "5")], 7, 6, ([], 6)),  # the cursor above the range
        ([("n__lt", "7")], 5, 7, ([], 6)),  # the cursor on the range's last record
        ([("n__null", "true")], None, 4, ([8], 2)),
        ([("n__null", "true")], 7, 10, ([4, 8], 2)),  # a non-null cursor: the nulls follow it
        ([("n__null", "false")], 7, 6, ([10], 8)),  # no nulls after the last key
    ],
)
def test_an_ascending_cursor_inside_a_window_keeps_to_the_window(params, key, id_, want):
    with store_of(KEYS) as store:
        got, total, more = page(store, *params, cursor(False, key, id_))
        assert (got, total, more) == (*want, False)


# -- descending: the nulls, the rest of the cursor's run, the runs below ----------------------


@pytest.mark.parametrize(
    "params, limit, want",
    [
        ([("n__lte", "7")], 2, ([6, 10], 8, True)),  # ends at the end of the top run
        ([("n__lte", "7"), ("offset", "2")], 3, ([1, 3, 7], 8, True)),
        ([("n__lte", "7"), ("offset", "5")], 3, ([2, 5, 9], 8, False)),  # ends at the last record
        ([("n__lte", "7"), ("offset", "3")], 2, ([3, 7], 8, True)),  # starts inside a run
        ([("n__lte", "7"), ("offset", "8")], 2, ([], 8, False)),
        ([("n__gt", "3"), ("n__lt", "7")], 100, ([1, 3, 7], 3, False)),
        ([("n__gt", "7")], 10, ([], 0, False)),
        ([("n__null", "true")], 10, ([4, 8], 2, False)),
        ([("n__null", "true"), ("offset", "1")], 1, ([8], 2, False)),
        ([("n__null", "true")], 1, ([4], 2, True)),
        ([("n__null", "false"), ("offset", "6")], 10, ([5, 9], 8, False)),
    ],
)
def test_a_descending_window_pages_at_its_edges(params, limit, want):
    with store_of(KEYS) as store:
        assert page(store, *params, desc=True, limit=limit) == want


@pytest.mark.parametrize(
    "key, id_, limit, want",
    [
        (None, 4, 3, [8, 6, 10]),  # a cursor in the nulls: the nulls after it, then the top run
        (None, 4, 1, [8]),  # the page ends at the last null, and the top run follows
        (None, 8, 2, [6, 10]),  # after the last null: the top run, ending at its end
        (7, 6, 3, [10, 1, 3]),
        (7, 10, 3, [1, 3, 7]),  # after a run's end: the next run down, whole
        (5, 1, 9, [3, 7, 2, 5, 9]),  # after a run's first id
        (5, 1, 2, [3, 7]),  # the page ends where the cursor's run does, and a run follows
        (5, 3, 9, [7, 2, 5, 9]),  # after a run's middle
        (5, 7, 2, [2, 5]),  # after a run's end
        (3, 5, 9, [9]),
        (3, 9, 9, []),  # after the last record
        (6, 1, 9, [1, 3, 7, 2, 5, 9]),  # a place no record holds: the next key down
        (5, 0, 2, [1, 3]),  # an id below the run's first: the whole run is after it
    ],
)
def test_a_descending_cursor_page_starts_right_after_its_place(key, id_, limit, want):
    with store_of(KEYS) as store:
        got, total, more = page(store, cursor(True, key, id_), desc=True, limit=limit)
        assert (got, total) == (want, 10)
        tail = DESCENDING[DESCENDING.index(want[0]) :] if want else []
        assert more == (len(tail) > limit)


@pytest.mark.parametrize(
    "params, key, id_, want",
    [
        ([("n__lte", "5")], 5, 3, ([7, 2, 5, 9], 6)),  # a range, the cursor inside it
        ([("n__lt", "5")], 5, 3, ([2, 5, 9], 3)),  # the cursor's run outside the range
        ([("n__gte", "5")], 5, 7, ([], 5)),  # the cursor on the range's last record
        ([("n__gte", "5")], None, 8, ([6, 10, 1, 3, 7], 5)),  # a null cursor, a range of no nulls
        ([("n__null", "true")], None, 4, ([8], 2)),
        ([("n__null", "true")], 7, 6, ([], 2)),  # below the nulls: nothing of the window
    ],
)
def test_a_descending_cursor_inside_a_window_keeps_to_the_window(params, key, id_, want):
    with store_of(KEYS) as store:
        got, total, more = page(store, *params, cursor(True, key, id_), desc=True)
        assert (got, total, more) == (*want, False)


# -- writes between two pages, and a past watermark -------------------------------------------


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_a_cursor_whose_record_was_deleted_goes_on_from_its_place(desc):
    with store_of(KEYS) as store:
        first, _total, more = page(store, ("n__null", "false"), desc=desc, limit=4)
        assert more and first == ([2, 5, 9, 1] if not desc else [6, 10, 1, 3])
        last = first[-1]
        delete(store, last, 7)  # the cursor's own record, and one after its place
        insert(store, 11, KEYS[last])  # after its place in its run (a higher id)
        insert(store, 0, KEYS[last])  # before its place: not seen by the next page
        got, total, more = page(store, cursor(desc, KEYS[last], last), ("n__null", "false"), desc=desc, limit=4)
        assert (got, total, more) == (([3, 11, 6, 10], 8, False) if not desc else ([11, 2, 5, 9], 8, False))


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_a_page_of_a_run_emptied_by_deletes_is_the_runs_around_it(desc):
    with store_of(KEYS) as store:
        delete(store, 1, 3, 7)  # the whole run of 5s
        assert page(store, ("n__gte", "4"), ("n__lte", "6"), desc=desc) == ([], 0, False)
        got, total, more = page(store, cursor(desc, 5, 3), desc=desc)
        assert (got, total, more) == (([6, 10, 4, 8], 7, False) if not desc else ([2, 5, 9], 7, False))
        delete(store, 4, 8)
        assert page(store, ("n__null", "true"), desc=desc) == ([], 0, False)
        assert page(store, cursor(desc, None, 4), desc=desc) == (
            ([], 5, False) if not desc else ([6, 10, 2, 5, 9], 5, False)
        )


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_a_list_at_a_past_watermark_pages_the_records_then(desc):
    with store_of(KEYS) as store:
        mark = store.watermarks()["Item"]
        delete(store, 5, 6)
        insert(store, 11, 3)
        asyncio.run(store.replace("Item", 1, ITEM.validate_replace({"n": 7, "k": "x"}, 1)))
        then = ASCENDING if not desc else DESCENDING
        window = [i for i in then if KEYS[i] is not None and KEYS[i] >= 5]
        as_of = ("as_of", str(mark))
        assert page(store, ("n__gte", "5"), as_of, desc=desc, limit=3) == (window[:3], 5, True)
        assert page(store, ("n__gte", "5"), as_of, ("offset", "3"), desc=desc, limit=3) == (window[3:], 5, False)
        got, total, more = page(store, cursor(desc, 5, 1), as_of, desc=desc, limit=20)
        assert (got, total, more) == (then[then.index(1) + 1 :], 10, False)
        now = page(store, ("n__gte", "5"), desc=desc)  # and the live list
        assert now == (([3, 7, 1, 10], 4, False) if not desc else ([1, 10, 3, 7], 4, False))


# -- runs across the index's sublists --------------------------------------------------------


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_cursor_pages_through_runs_that_cross_sublists_reach_every_id_once(desc):
    keys = {i: i % 4 if i % 25 else None for i in range(1, 1201)}  # four runs of 288, 48 nulls
    if desc:
        order = sorted(keys, key=lambda i: (keys[i] is not None, -(keys[i] or 0), i))
    else:
        order = sorted(keys, key=lambda i: (keys[i] is None, keys[i] or 0, i))
    values = [i for i in order if keys[i] is not None]
    with store_of(keys) as store:
        for window, want in (([("n__null", "false")], values), ([], order[1:])):
            seen: list[int] = []
            after = [] if window else [cursor(desc, keys[order[0]], order[0])]
            for _ in range(40):
                got, total, more = page(store, *window, *after, desc=desc, limit=97)
                assert total == len(window and values or order)
                seen += got
                if not more:
                    break
                after = [cursor(desc, keys[got[-1]], got[-1])]
            assert seen == want
        assert page(store, ("n__null", "false"), ("offset", "570"), desc=desc, limit=40)[0] == values[570:610]
