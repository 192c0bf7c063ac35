"""List queries parsed once per distinct list (`ParsedQueries`, `ParsedList`), and the
`Query` of one of their pages: the list's own at a cursor decoded or an offset read alone
(`with_cursor`, `with_offset`). The application keeps one `ParsedQueries` (dbsvc/app.py).
Split from readcache.py (597 lines) by job: that module keeps the records' and the
answers' caches, this one the parsed queries.

A page at a cursor or an offset is a new `Query` on every request (a client walking a list
by its `Link`s, pages asked at many targets), the list's own copied with one field
replaced. `Query` is a frozen slotted dataclass, so every way of writing its slots from
outside its class (`dataclasses.replace`, its `__init__`, `object.__setattr__`, the slots'
`__set__` mapped in C) calls a slot wrapper a field, ~0.3-0.6 us each on this host under
load: 4.5-12 us a copy of 13 fields. `_Draft` has the very same slots and no frozen
`__setattr__`: its fields are written by plain stores (one bytecode each) and the copy then
becomes a `Query` by a `__class__` assignment, which CPython allows between two classes of
the same slots over the same base (bench/README.md and docs/decisions.md, wt-filt3:
~5-7x cheaper in a micro; ~4% of a filtered page at a cursor at random at 1,000,000 posts).
Every field is listed once in `_copied`; a field added to `Query` and not there fails at
import (`_FIELDS`), and tests/app/test_parsed_page_queries.py holds each copy equal to
`dataclasses.replace` with every field set.

Imports errors, runtime, http's Request type, cursors and admission.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from dbsvc.admission import SecondAsk
from dbsvc.cursors import NextLinks, link_prefix
from dbsvc.errors import BadQuery
from dbsvc.http.types import Request
from dbsvc.runtime import CompiledModel, Query, Record, parse_count

_PAGE_PARAMS = ("offset", "cursor")  # the pairs a list's pages differ by (cursors.py `link_prefix`)
_FIELDS = (
    "filters",
    "sort",
    "limit",
    "offset",
    "projection",
    "as_of",
    "after",
    "where_row",
    "ranges",
    "nulls",
    "cursor",
    "expand",
    "search",
)  # every field `_copied` writes, in `Query`'s order
if tuple(f.name for f in fields(Query)) != _FIELDS or Query.__slots__ != _FIELDS:  # pragma: no cover
    raise AssertionError("Query's fields changed: write each of them in parsedlists.py `_copied`")


class _Draft:
    """A `Query` being copied: the same slots, in the same order, over the same base, and
    writable (module docstring); it is a `Query` once its `__class__` is assigned."""

    __slots__ = _FIELDS
    # the fields' types are Query's; a draft only carries them over (`_copied`)
    filters: Any
    sort: Any
    limit: Any
    offset: Any
    projection: Any
    as_of: Any
    after: Any
    where_row: Any
    ranges: Any
    nulls: Any
    cursor: Any
    expand: Any
    search: Any


def _copied(query: Query) -> _Draft:
    """A writable copy of every field of `query` (`with_cursor`, `with_offset`)."""
    made = _Draft()
    made.filters = query.filters
    made.sort = query.sort
    made.limit = query.limit
    made.offset = query.offset
    made.projection = query.projection
    made.as_of = query.as_of
    made.after = query.after
    made.where_row = query.where_row
    made.ranges = query.ranges
    made.nulls = query.nulls
    made.cursor = query.cursor
    made.expand = query.expand
    made.search = query.search
    return made


def with_cursor(query: Query, cursor: tuple[tuple[Any, ...], Any]) -> Query:
    """`dataclasses.replace(query, cursor=cursor)`, by plain stores (module docstring)."""
    made = _copied(query)
    made.cursor = cursor
    made.__class__ = Query  # type: ignore[assignment]
    return made  # type: ignore[return-value]


def with_offset(query: Query, offset: int) -> Query:
    """`dataclasses.replace(query, offset=offset)`, by plain stores (module docstring)."""
    made = _copied(query)
    made.offset = offset
    made.__class__ = Query  # type: ignore[assignment]
    return made  # type: ignore[return-value]


class ParsedList:
    """One distinct list of one model: its parsed `Query`, and the maker of its next pages'
    `Link` values (cursors.py `NextLinks`), found on its first page that has a next one.

    Found by one lookup per list request (`ParsedQueries.listing`), where the query and the
    `Link` maker were two lookups, each keyed by a tuple of the pairs made and hashed
    afresh. A list's path is `/api/<kebab>` of its model, so the model and the pairs fix
    the text before the cursor too (the maker keeps the path it was made for, and a
    request with another path gets a maker of its own). `makers`: the `ParsedQueries` that
    keeps one maker for all the pages of a list (`ParsedQueries.maker`); without it, a
    maker of its own."""

    __slots__ = ("_links", "_makers", "_path", "base", "query")

    def __init__(self, query: Query, makers: ParsedQueries | None = None) -> None:
        self.query = query
        self._makers = makers
        self._links: NextLinks | None = None
        self._path = ""
        self.base: ParsedList | None = None  # the list this is a page of (`at`), or None

    def at(self, query: Query) -> ParsedList:
        """This list at another page (`query`: a cursor's or an offset's, ParsedQueries
        `at_page`), with the `Link` maker found so far: one maker for all the pages of a
        list, and the first page's maker found is handed back to the list (`link_after`)."""
        page = ParsedList(query, self._makers)
        page._links, page._path, page.base = self._links, self._path, self
        return page

    @property
    def links(self) -> NextLinks | None:
        """The `Link` maker made for the last path asked (`link_after`), or None before the
        first `Link`."""
        return self._links

    def link_after(
        self, model: CompiledModel, request: Request, record: Record, sort_keys: Sequence[Any] | None = None
    ) -> str:
        """The `Link` value of the page after `record`, the last of a page of `model` listed
        by `request` (`sort_keys`: its sort keys, read by the store: `NextLinks.after`)."""
        links = self._links
        if links is None or self._path != request.path:
            makers = self._makers
            if makers is None:
                links = ParsedQueries.links_of(model, self.query, request)
            else:
                links = makers.maker(model, self.query, request)
            self._links = links
            self._path = request.path
            base = self.base
            if base is not None:  # the list's later pages start with this maker
                base._links, base._path = links, request.path
        return links.after(record, sort_keys)


class ParsedQueries:
    """List queries parsed once per distinct query, with their next-page `Link` maker: a
    list URL a client polls is parsed on its first request, then found by its decoded pairs
    (parsing and making a Query, a noticeable share of a list request, become one dict
    lookup; bench/README.md).

    The key is the model and the tuple of the request's decoded query pairs, from which
    the generated parser's answer follows and nothing else does; a query that fails to
    parse is never kept, so its error is raised afresh each time. At most `capacity`
    queries are kept, the oldest dropped first, and a target over `longest` characters is
    parsed without being kept, so a client sending distinct queries costs a bounded memory.
    A list with no pairs is kept apart, one per model (the schema declares finitely many),
    evicting nothing.

    The `Link` makers are kept apart from the queries (`maker`), one per list whatever its
    page: keyed by the path and the pairs but `offset` and `cursor`, which the text before
    the cursor leaves out (cursors.py `link_prefix`) and the sort does not depend on. A
    client walking a list by its `Link`s asks a new target (a new cursor) on every page:
    the list is kept once without its cursor, each page decodes only its cursor
    (`at_page`; an `offset` page reads its offset alone) and finds the list's maker. At most `capacity` makers, the oldest
    dropped first.
    """

    __slots__ = ("_asked", "_cursors", "_makers", "_parsed", "_plain", "capacity", "longest")

    def __init__(self, capacity: int = 1024, longest: int = 512) -> None:
        self.capacity = capacity
        self.longest = longest
        self._parsed: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], ParsedList] = OrderedDict()
        self._plain: dict[str, ParsedList] = {}  # model -> its list with no pairs
        # (model, pairs) -> the last capacity // 4 pages at a cursor or an offset (`at_page`),
        # apart: a walk over many cursors or offsets never drops a list
        self._cursors: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], ParsedList] = OrderedDict()
        # the targets of such pages asked once and not kept apart: keyed by the raw target,
        # which is at hand, where a tuple of the pairs is hashed afresh on every ask; two
        # spellings of one query (`%20` and `+`, `%2C` and `,`) count apart
        self._asked = SecondAsk(capacity // 4)
        # (model, path, pairs but offset and cursor) -> the Link maker of that list's pages
        self._makers: OrderedDict[tuple[str, str, tuple[tuple[str, str], ...]], NextLinks] = OrderedDict()

    def __len__(self) -> int:
        """Lists with pairs kept (at most `capacity`; the lists with no pairs are apart)."""
        return len(self._parsed)

    def listing(self, model: CompiledModel, request: Request) -> ParsedList:
        """The list `request` asks of `model`: kept (`ParsedList`), or parsed now (raising
        BadQuery) and kept unless its target is over `longest` characters. A page at a
        cursor or an offset is its list without it, kept, at the cursor decoded or the offset
        read now (`at_page`), and kept apart among the last `capacity // 4` such pages from
        its second ask (a polled one is found; one asked once costs no eviction). The ask is
        counted by the request's raw target (its path fixes the model): a query spelled two
        ways is two targets, each kept from its own second ask, and the page kept is found by
        its model and pairs as before."""
        pairs = request.query
        if len(request.target) > self.longest:
            return ParsedList(model.parse_list_query(pairs))
        if pairs:
            key = (model.name, tuple(pairs))
            entry = self._parsed.get(key)
            if entry is not None:
                return entry
            cursors = self._cursors
            entry = cursors.get(key)
            if entry is not None:
                return entry
            entry = self.at_page(model, pairs)
            if entry is not None:
                kept = self.capacity // 4  # 0 under a capacity of 3 or less: none kept
                if kept and self._asked.admits(request.target):  # from its second ask (admission.py)
                    if len(cursors) >= kept:
                        cursors.popitem(last=False)
                    cursors[key] = entry
                return entry
        return self._kept(model, pairs)

    def at_page(self, model: CompiledModel, pairs: list[tuple[str, str]]) -> ParsedList | None:
        """A page at a cursor or at an offset of a list kept (or kept now): the list's
        `Query` with the cursor decoded alone (`CompiledModel.decode_cursor`) or the offset
        read alone (`runtime.parse_count`, as the parser reads it), not kept; None for pairs
        with neither, or with two of them (two cursors, two offsets, or both), which the
        generated parser takes whole.

        A client walking lists by their `Link`s, or asking pages at many cursors or offsets,
        asks a new target on every page: each kept as a list of its own, they evicted one
        another and the parser ran on every page (bench/README.md, "Random cursor pages").
        The answer and every refusal are the parser's: the pairs without the cursor or the
        offset parse as they do beside it (a single `cursor` or `offset` pair is read by no
        other pair, and a single `cursor` never raises in the parser's loop), and a refusal
        of either part is raised by the parser of the whole pairs, so a bad cursor or offset
        beside another bad pair is refused as before."""
        name = text = None
        rest = []
        for pair in pairs:
            if pair[0] in _PAGE_PARAMS:
                if name is not None:
                    return None
                name, text = pair
            else:
                rest.append(pair)
        if text is None:
            return None
        decode = model.decode_cursor
        if name == "cursor" and decode is None:
            return None
        try:
            listing = self._kept(model, rest)
            query = listing.query
            if decode is not None and name == "cursor":
                return listing.at(with_cursor(query, decode(text, query.sort)))
            offset = parse_count(text)
            if offset is None:
                raise BadQuery(text)  # the parser's own message, below
            return listing.at(with_offset(query, offset))
        except BadQuery:  # refused as the parser refuses the whole pairs
            return ParsedList(model.parse_list_query(pairs), self)

    def _kept(self, model: CompiledModel, pairs: list[tuple[str, str]]) -> ParsedList:
        """The list of these pairs: kept, or parsed now and kept (at most `capacity` lists
        with pairs, the oldest dropped first)."""
        if not pairs:
            entry = self._plain.get(model.name)
            if entry is None:
                entry = self._plain[model.name] = ParsedList(model.parse_list_query(pairs), self)
            return entry
        key = (model.name, tuple(pairs))
        entries = self._parsed
        entry = entries.get(key)
        if entry is None:
            entry = ParsedList(model.parse_list_query(pairs), self)
            if len(entries) >= self.capacity:
                entries.popitem(last=False)
            entries[key] = entry
        return entry

    def list_query(self, model: CompiledModel, request: Request) -> Query:
        """`listing(model, request).query`."""
        return self.listing(model, request).query

    def link_after(self, model: CompiledModel, query: Query, request: Request, record: Record) -> str:
        """The `Link` value of the page after `record`, the last of a page of `model` listed
        by `request` (parsed as `query`): the kept list's maker (`ParsedList.link_after`),
        or a maker of its own for a list that is not kept."""
        if len(request.target) > self.longest:
            return self.links_of(model, query, request).after(record)
        return self.listing(model, request).link_after(model, request, record)

    def maker(self, model: CompiledModel, query: Query, request: Request) -> NextLinks:
        """The `Link` maker of the pages of the list `request` asks of `model` (parsed as
        `query`): kept per list whatever the page's `offset` or `cursor`, or made now."""
        path = request.path
        key = (model.name, path, tuple([pair for pair in request.query if pair[0] not in _PAGE_PARAMS]))
        makers = self._makers
        links = makers.get(key)
        if links is None:
            links = NextLinks(link_prefix(path, key[2]), model.name, query.sort, model.keys, model.id_field)
            if len(makers) >= self.capacity:
                makers.popitem(last=False)
            makers[key] = links
        return links

    @staticmethod
    def links_of(model: CompiledModel, query: Query, request: Request) -> NextLinks:
        """The `Link` maker of a list of `model` by `request`, sorted as `query` says."""
        prefix = link_prefix(request.path, request.query)
        return NextLinks(prefix, model.name, query.sort, model.keys, model.id_field)
