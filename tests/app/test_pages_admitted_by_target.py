"""Pages at a cursor or an offset are admitted by their raw target (readcache.py
`PresentPages.admits_page`, parsedlists.py `ParsedQueries.listing`; docs/decisions.md,
"Cursor texts kept decoded per list"): a page asked twice under the same target is kept
from its second ask, and two spellings of one query (`author_id=7` and `author_id=%37`,
the same decoded pairs) are two targets, each counted apart, where the window was keyed by
the decoded pairs and the second spelling was admitted at its first ask. What is kept is still found by the decoded
pairs: once kept, either spelling is answered from it.

In process: the units over the blog schema's parser, and the application over a real store.
"""

from __future__ import annotations

import json

from dbsvc.cursors import encode_cursor
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedQueries
from dbsvc.readcache import PresentPages
from support.app_calls import answer, fresh
from support.blog import BLOG
from support.storage import post, run, user

POST = BLOG.BY_NAME["BlogPost"]
CURSOR = encode_cursor("BlogPost", (), [], 3)
PLAIN = f"/api/blog-post?author_id=7&limit=2&cursor={CURSOR}"
SPELLED = f"/api/blog-post?author_id=%37&limit=2&cursor={CURSOR}"  # the same decoded pairs


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def test_present_pages_admit_a_target_on_its_second_ask_and_a_second_spelling_apart():
    assert request(PLAIN).query == request(SPELLED).query and PLAIN != SPELLED
    pages = PresentPages()
    assert pages.admits_page(request(PLAIN)) is False  # first ask
    assert pages.admits_page(request(SPELLED)) is False  # another target: its own first ask
    assert pages.admits_page(request(SPELLED)) is True
    assert pages.admits_page(request(PLAIN)) is True  # the same target's second ask
    offset = "/api/blog-post?limit=2&offset=4"
    assert [pages.admits_page(request(t)) for t in (offset, offset.replace("=4", "=%34"), offset)] == [
        False,
        False,
        True,
    ]


def test_parsed_pages_apart_are_kept_from_their_own_targets_second_ask():
    queries = ParsedQueries(capacity=8)
    once = queries.listing(POST, request(PLAIN))
    spelled = queries.listing(POST, request(SPELLED))  # its first ask: made, not kept apart
    again = queries.listing(POST, request(SPELLED))  # its second: kept apart
    assert spelled is not again and queries.listing(POST, request(SPELLED)) is again
    assert queries.listing(POST, request(PLAIN)) is again  # found by the decoded pairs once kept
    assert once.query == spelled.query == again.query == POST.parse_list_query(request(PLAIN).query)
    assert again.query.cursor == ((), 3)


def test_a_served_page_at_a_cursor_is_kept_from_its_targets_second_ask_each_spelling_apart(tmp_path, stores):
    store = stores(str(tmp_path), sync="off")
    app = fresh(store)

    async def go() -> None:
        await store.insert("User", user(7))
        for i in range(1, 9):
            await store.insert("BlogPost", post(i, author=7))

    run(go())
    made = answer(app, PLAIN)
    assert made[0] == 200 and [r["id"] for r in json.loads(made[1])["data"]] == [4, 5]
    assert len(app.present) == 0  # a page at a cursor asked once: not kept
    assert answer(app, SPELLED) == made and len(app.present) == 0  # another target's first ask
    assert answer(app, SPELLED) == made and len(app.present) == 1  # its second: kept
    assert answer(app, PLAIN) == made and len(app.present) == 1  # found kept under either spelling
    assert made == answer(fresh(store), PLAIN)
