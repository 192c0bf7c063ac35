"""The index at `/api/` and where `/` goes (docs/guide/rest.md, "The index").

`GET /api/` answers, like PostgREST's root or PocketBase's collection list, what a newcomer
needs to make the next request: every model (declared name, its collection and item routes
with their methods, its id field, its fields in declaration order, the filterable and
sortable ones, its projections, its feeds), the service's documents (OpenAPI, AsyncAPI,
the explorer when it is on) and the operational routes. Nothing in it is data: it is built
once at start-up from the generated module and served as fixed bytes, so it needs no token
(as `/openapi.json`, which says the same for machines).

`GET /` redirects (302, the target depends on the explorer's setting) to the explorer's
`/_/` when it is on, else to this index. Both routes answer GET and HEAD only.

Imports routes, runtime (CompiledModel, the JSON writer) and http's types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dbsvc.http.types import Response
from dbsvc.routes import (
    API_PREFIX,
    BATCH_PATH,
    COLLECTION_METHODS,
    EXPLORER_PATH,
    ITEM_METHODS,
    LIVE_QUERY,
    OPERATIONAL,
    REPLICATE_PATH,
    SUBSCRIBE,
    collection_path,
    feed_path,
    item_path,
)
from dbsvc.runtime import CompiledModel, json_bytes

DOCUMENTS = ("/openapi.json", "/asyncapi.json")


def describe_model(model: CompiledModel) -> dict[str, Any]:
    """One model's entry of the index."""
    return {
        "name": model.name,
        "collection": {"path": collection_path(model.kebab), "methods": list(COLLECTION_METHODS)},
        "item": {"path": item_path(model.kebab), "methods": list(ITEM_METHODS)},
        "id": {"field": model.id_field, "type": model.id_type},
        "fields": list(model.fields),
        "filters": list(model.filter_fields),
        "sorts": list(model.sort_fields),
        "projections": list(model.projections),
        "subscribe": feed_path(SUBSCRIBE, model.kebab),
        "live_query": feed_path(LIVE_QUERY, model.kebab),
    }


def build_index(
    models: Iterable[CompiledModel], *, version: str, fingerprint: str, explorer: bool, replication: bool
) -> bytes:
    """The JSON body of `GET /api/` (module docstring)."""
    body = {
        "service": "dbsvc",
        "version": version,
        "schema": fingerprint,
        "models": [describe_model(model) for model in models],
        "documents": {
            "openapi": DOCUMENTS[0],
            "asyncapi": DOCUMENTS[1],
            "explorer": EXPLORER_PATH if explorer else None,
        },
        "operations": [route.path for route in OPERATIONAL if route.path not in DOCUMENTS and route.path != API_PREFIX],
        "replicate": REPLICATE_PATH if replication else None,
        "batch": BATCH_PATH,  # POST: several writes, all or nothing (docs/guide/rest.md#batches-post-batch)
    }
    return json_bytes(body)


def root_redirect(explorer: bool) -> Response:
    """`GET /`: 302 to the explorer when it is on, else to the index."""
    return Response(302, headers=[("Location", EXPLORER_PATH if explorer else API_PREFIX)], content_type=None)
