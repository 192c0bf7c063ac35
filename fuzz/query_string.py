"""A request target -> the http layer's split (`read_head`) -> a generated query or id parser.

The first byte picks the model, the second the parser (list, get, feed query, or the id
of an item path); the rest follows `/api/m?` (or `/api/m/`), or, when the second byte's high bit is set, is
the whole target (absolute form, `*`, odd paths). Targets h11 itself
would refuse never reach `read_head`, so they are skipped the way h11 skips them.

Invariants: a refusal is a `RequestError` that renders; a parsed query only names the
model's filter and sort fields and projections, its limit is within [0, MAX_LIMIT], its
offset not negative, and the matcher runs on a valid record with its filters.
"""

from __future__ import annotations

import h11

from dbsvc.errors import RequestError
from dbsvc.http.message import RequestIds, read_head
from dbsvc.runtime import MAX_LIMIT, CompiledModel, Query
from fuzz.common import all_models, current_record, generated_modules, render

GENERATED = generated_modules()
MODELS = all_models()
PARSERS = ("list", "get", "feed", "id")
IDS = RequestIds()


def _target(data: bytes, parser: str, raw: bool) -> bytes:
    if raw:
        return data
    return (b"/api/m/" if parser == "id" else b"/api/m?") + data


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    model = MODELS[data[0] % len(MODELS)]
    parser = PARSERS[data[1] % len(PARSERS)]
    target = _target(data[2:], parser, raw=data[1] >= 0x80)
    try:
        event = h11.Request(method="GET", target=target, headers=[("Host", "fuzz")])
    except h11.LocalProtocolError:
        return
    try:
        request = read_head(event, IDS, None).request
        if parser == "id":
            model.parse_id(request.path.rpartition("/")[2])
            return
        if parser == "list":
            query = model.parse_list_query(request.query)
        elif parser == "get":
            query = model.parse_get_query(request.query)
        else:
            query = model.parse_feed_query(request.query)
    except RequestError as exc:
        render(exc)
        return
    _check(model, query)


def _check(model: CompiledModel, query: Query) -> None:
    assert set(query.filters) <= set(model.filter_fields), query.filters
    assert all(name in model.sort_fields for name, _descending in query.sort), query.sort
    assert query.projection is None or query.projection in model.projections, query.projection
    assert 0 <= query.limit <= MAX_LIMIT and query.offset >= 0, query
    assert query.as_of is None or query.as_of >= 0, query
    assert query.after is None or query.after >= 0, query
    for keys in query.filters.values():
        hash(keys)
    model.match(current_record(model.name), query.filters)
