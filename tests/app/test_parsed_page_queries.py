"""A page's `Query` copied by plain stores into a draft of the same slots, then made a
`Query` by its class (parsedlists.py `with_cursor`, `with_offset`): the copy is a real,
frozen `Query`, equal to `dataclasses.replace`'s, and the list's own query is untouched.
(Every field's value is held by tests/app/test_cursor_pages.py's replace tests.)"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields, replace

import pytest

from dbsvc.parsedlists import with_cursor, with_offset
from dbsvc.runtime import Query

EVERY = Query(
    filters={"author_id": frozenset({7})},
    sort=(("score", True),),
    limit=20,
    offset=3,
    projection="summary",
    as_of=11,
    after=5,
    where_row=len,
    ranges=(("score", 1.0, True, 9.0, False),),
    nulls=(("tags", False),),
    cursor=((4.5,), 8),
    expand=(("author_id", "card"),),
    search=("ab", "cd"),
)
COPIES = [
    ("cursor", lambda q: with_cursor(q, ((2.5,), 9)), {"cursor": ((2.5,), 9)}),
    ("offset", lambda q: with_offset(q, 40), {"offset": 40}),
]


@pytest.mark.parametrize(("name", "copy", "changed"), COPIES, ids=[c[0] for c in COPIES])
def test_a_page_query_is_a_frozen_query_equal_to_replace(name, copy, changed):  # noqa: ANN001
    before = [getattr(EVERY, f.name) for f in fields(Query)]
    made = copy(EVERY)
    assert type(made) is Query and made == replace(EVERY, **changed) and made is not EVERY
    assert getattr(made, name) == changed[name]
    with pytest.raises(FrozenInstanceError):
        made.limit = 1  # type: ignore[misc]
    assert [getattr(EVERY, f.name) for f in fields(Query)] == before  # the list's query unchanged


@pytest.mark.parametrize(("name", "copy", "changed"), COPIES, ids=[c[0] for c in COPIES])
def test_a_page_query_shares_the_list_query_values(name, copy, changed):  # noqa: ANN001
    """A copy, not a deep one: the list's filters and sort are the very objects (what the
    plan and the kept pages compare by identity stay the same)."""
    made = copy(EVERY)
    for f in fields(Query):
        if f.name != name:
            assert getattr(made, f.name) is getattr(EVERY, f.name), f.name
