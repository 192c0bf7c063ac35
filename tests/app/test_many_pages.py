"""The read path's caches when clients ask many pages of a table larger than they are
(issue 36 item 2 at 1,000,000 posts; bench/README.md, "Pages that miss the caches").

- Every miss evicts, so the caches drop their oldest entry in O(1) (readcache.py's module
  docstring says why a plain dict's `next(iter(d))` did not). What that costs is a figure,
  measured by bench/varied_pages.py (bench/README.md, "Pages that miss the caches at
  1,000,000 posts"), never a timed assert here; these tests hold the behaviour: past its
  capacity a cache keeps exactly the newest entries, in the order they came, and answers
  every evicted record right.
- The pages of one list share one `Link` maker (readcache.py `ParsedQueries.maker`): a
  walk by `offset` or by the `Link`'s cursor asks a new target on every page, and each
  page's `Link` is still the text composed from its prefix and cursor.

Fixture-free, in process."""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.cursors import encode_cursor, link_prefix, next_link
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.parsedlists import ParsedQueries
from dbsvc.readcache import EncodedRecords
from dbsvc.schema import parse_schema

MODULE = compile_schema(
    parse_schema(
        """
model Note {
  id    int   @id
  title str   @filter @sort
  score float @sort
  @projection(card, id)
}
""",
        "pages.dbs",
    )
)
NOTE = MODULE.BY_NAME["Note"]
CAPACITY, EVICTIONS = 64, 1_000  # past a dict's resizes at this size, many times over


def note(id_: int, title: str = "t", score: float = 1.5) -> dict:
    return {"id": id_, "title": title, "score": score}


def request(target: str) -> Request:
    path, pairs = split_target(target)
    return Request("GET", target, path, pairs, [])


def composed(request: Request, sort, record: dict) -> str:  # noqa: ANN001 (the query's sort)
    """The `Link` value as app.py composed it before any maker was kept (commit ea2962a)."""
    keys = [NOTE.keys[f](record[f]) for f, _desc in sort]
    return next_link(link_prefix(request.path, request.query), encode_cursor(NOTE.name, sort, keys, record["id"]))


# -- evictions -----------------------------------------------------------------------------


def test_encoded_records_keep_the_newest_capacity_entries_when_every_miss_evicts():
    cache = EncodedRecords([NOTE], capacity=CAPACITY)
    records = [note(id_) for id_ in range(CAPACITY + EVICTIONS)]
    first = []
    for record in records:  # once full, a record is kept from its second read: each read twice
        cache.encode(NOTE, record)
        first.append(cache.encode(NOTE, record))
    again = [cache.encode(NOTE, record) for record in records[-CAPACITY:]]
    assert all(a is b for a, b in zip(again, first[-CAPACITY:]))  # kept: the same bytes object
    evicted = records[-CAPACITY - 1]  # the newest one dropped, as the loop above ended
    answer = cache.encode(NOTE, evicted)
    assert answer is not first[-CAPACITY - 1]
    assert answer == b'{"id":%d,"title":"t","score":1.5}' % evicted["id"]


def test_projected_records_keep_the_newest_capacity_entries_when_every_miss_evicts():
    cache = EncodedRecords([NOTE], capacity=CAPACITY)
    records = [note(id_) for id_ in range(CAPACITY + EVICTIONS)]
    first = cache.projected(NOTE, "card", records)
    again = cache.projected(NOTE, "card", records[-CAPACITY:])
    assert all(a is b for a, b in zip(again, first[-CAPACITY:]))
    oldest = cache.projected(NOTE, "card", records[:1])
    assert oldest[0] is not first[0] and oldest[0] == b'{"id":0}'


# -- one Link maker for all the pages of a list --------------------------------------------


def test_the_pages_of_a_list_share_one_link_maker_and_say_the_composed_link():
    queries = ParsedQueries()
    base = "/api/note?title=a%20b&sort=-score,title&limit=2"
    cursor = encode_cursor(NOTE.name, (("score", True), ("title", False)), [2.5, "x"], 3)
    pages = [base, base + "&offset=2", base + "&offset=4", f"{base}&cursor={cursor}", f"/api/note?offset=6&{base[10:]}"]
    makers = []
    for i, target in enumerate(pages):
        asked = request(target)
        listing = queries.listing(NOTE, asked)
        record = note(10 + i, "x", 0.5 * i)
        assert listing.link_after(NOTE, asked, record) == composed(asked, listing.query.sort, record)
        makers.append(listing.links)
    assert all(maker is makers[0] for maker in makers)
    other = request("/api/note?title=a%20c&sort=-score,title&limit=2")  # another list: its own
    assert queries.listing(NOTE, other).link_after(NOTE, other, note(1)) == composed(
        other, ((("score", True), ("title", False))), note(1)
    )
    assert queries.listing(NOTE, other).links is not makers[0]


def test_link_makers_are_kept_at_most_capacity_the_oldest_dropped_first():
    queries = ParsedQueries(capacity=2)
    targets = [f"/api/note?title=t{i}&sort=score" for i in range(3)]
    made = [queries.maker(NOTE, queries.listing(NOTE, request(t)).query, request(t)) for t in targets]
    assert len({id(m) for m in made}) == 3
    again = request(targets[2] + "&offset=20")
    assert queries.maker(NOTE, queries.listing(NOTE, again).query, again) is made[2]  # kept
    first = request(targets[0] + "&offset=20")
    assert queries.maker(NOTE, queries.listing(NOTE, first).query, first) is not made[0]  # dropped at 2


def test_a_list_with_no_pairs_shares_its_link_maker_with_its_pages():
    queries = ParsedQueries()
    plain, page = request("/api/note"), request("/api/note?offset=20")
    first = queries.listing(NOTE, plain)
    assert first.link_after(NOTE, plain, note(1)) == composed(plain, (), note(1))
    second = queries.listing(NOTE, page)
    assert second.link_after(NOTE, page, note(2)) == composed(page, (), note(2))
    assert second.links is first.links


def test_a_page_hands_its_link_maker_to_its_list_so_the_next_page_starts_with_it():
    """Pages at many cursors of a list never asked itself (the matrix's random cursor rows):
    the first page's maker is the list's, so the next page finds it without a lookup of
    `ParsedQueries.maker` (its pairs filtered and hashed a page); failed before session 15,
    when each page looked it up."""
    queries = ParsedQueries()
    first = request("/api/note?sort=score&limit=2&cursor=" + encode_cursor(NOTE.name, (("score", False),), [1.5], 3))
    second = request("/api/note?sort=score&limit=2&cursor=" + encode_cursor(NOTE.name, (("score", False),), [2.5], 9))
    page = queries.listing(NOTE, first)
    assert page.links is None
    assert page.link_after(NOTE, first, note(4)) == composed(first, (("score", False),), note(4))
    later = queries.listing(NOTE, second)
    assert later.links is page.links is not None
    assert later.link_after(NOTE, second, note(12, score=3.0)) == composed(
        second, (("score", False),), note(12, score=3.0)
    )
    plain = request("/api/note?sort=score&limit=2")
    assert queries.listing(NOTE, plain).links is page.links


def test_a_list_over_longest_characters_makes_its_own_link_maker():
    """A target over `longest` is parsed and not kept: its ParsedList has no `makers`, and
    its `Link` comes from a maker of its own (`ParsedQueries.links_of`)."""
    queries = ParsedQueries(longest=40)
    target = request("/api/note?title=" + "x" * 40 + "&sort=score")
    listing = queries.listing(NOTE, target)
    assert listing.link_after(NOTE, target, note(3)) == composed(target, (("score", False),), note(3))
