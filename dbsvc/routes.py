"""The route table: every path and method the service answers, spelled once.

The application dispatches on it (dbsvc/app.py), the OpenAPI and AsyncAPI builders
document it (dbsvc/compiler/openapi.py, asyncapi.py), and the CORS policy allows its
methods (dbsvc/http/cors.py). Pure data; imports nothing from dbsvc.

    GET|HEAD                  /health /ready /metrics /snapshot    operational, never guarded
    GET|HEAD                  /openapi.json /asyncapi.json         the API documents, never guarded
    GET|HEAD                  /api/                                the index: models, routes, documents
    GET|HEAD                  /                                    302 to the explorer if on, else /api/
    GET|HEAD|POST             /api/<kebab>                         list, create
    GET|HEAD|PUT|PATCH|DELETE /api/<kebab>/<id>                    read, replace, merge, delete
    GET (WebSocket)           /subscribe/<kebab>                   change feed
    GET (WebSocket)           /live-query/<name or kebab>          live query
    GET (WebSocket)           /replicate                           replication stream
    GET (WebSocket)           /replicate/snapshot                  a replica's bootstrap snapshot
    GET|HEAD                  /_/ and /_/<asset>                   the data explorer (dbsvc/explorer):
                                                                   static files, never guarded, not
                                                                   API (no OpenAPI entry), 404 when off
    OPTIONS                   any of the above                     CORS preflight, or Allow
"""

from __future__ import annotations

from dataclasses import dataclass

READ_METHODS = ("GET", "HEAD")
COLLECTION_METHODS = ("GET", "HEAD", "POST")
ITEM_METHODS = ("GET", "HEAD", "PUT", "PATCH", "DELETE")
SOCKET_METHODS = ("GET",)
# Every method some route answers, plus OPTIONS (what a CORS preflight may be allowed).
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

API_PREFIX = "/api/"
SUBSCRIBE = "subscribe"  # /subscribe/<kebab>
LIVE_QUERY = "live-query"  # /live-query/<name or kebab>
REPLICATE_PATH = "/replicate"
REPLICATE_SNAPSHOT_PATH = "/replicate/snapshot"
BATCH_PATH = "/batch"  # POST: several writes, all or nothing (dbsvc/batchops.py); guarded
BATCH_METHODS = ("POST",)
# The explorer's page and assets: an operational page like /health, but a static one the
# OpenAPI document leaves out (it is not API). `/_` redirects to `/_/`.
EXPLORER_PATH = "/_/"


@dataclass(frozen=True, slots=True)
class OperationalRoute:
    """A route that needs no token; `name` is the app's handler and the operationId."""

    path: str
    name: str
    summary: str
    schema: str | None  # the OpenAPI component of its 200 body (None: a document)


OPERATIONAL = (
    OperationalRoute("/health", "health", "Liveness; never touches the database", "Health"),
    OperationalRoute("/ready", "ready", "Readiness; acquires a read lock", "Ready"),
    OperationalRoute("/metrics", "metrics", "Per-model row counts and realtime counters (JSON)", "Metrics"),
    OperationalRoute("/snapshot", "snapshot", "Current per-model watermarks", "Snapshot"),
    OperationalRoute("/openapi.json", "openapi", "This OpenAPI document", None),
    OperationalRoute("/asyncapi.json", "asyncapi", "The AsyncAPI 3.0 document of the WebSocket routes", None),
    OperationalRoute(API_PREFIX, "index", "The index: the models, their routes and the documents", None),
)
ROOT_PATH = "/"  # redirects to the explorer when it is on, else to the index (dbsvc/index.py)


def collection_path(kebab: str) -> str:
    return f"{API_PREFIX}{kebab}"


def item_path(kebab: str, id_segment: str = "{id}") -> str:
    return f"{API_PREFIX}{kebab}/{id_segment}"


def feed_path(kind: str, model_segment: str) -> str:
    """`/subscribe/<kebab>` or `/live-query/<name or kebab>`."""
    return f"/{kind}/{model_segment}"
