"""The OpenAPI 3.1 document of the service generated for one schema.

`build_openapi(schema) -> dict` describes every route of docs/guide/rest.md for
exactly that schema: per model the CRUD routes under `/api/<kebab>`, the operational routes
(`/health`, `/ready`, `/metrics`, `/snapshot`) and the WebSocket routes (`/subscribe/<kebab>`,
`/live-query/<kebab>`, `/replicate`), each WebSocket route as a GET answering 101.

Invariants:

- Pure: reads only the IR (`dbsvc.schema.ir`), the error tree (`dbsvc.errors`) and the
  stdlib; no I/O. The result is plain JSON data.
- Deterministic: every mapping is built in declaration order (models, fields, projections)
  or in a fixed order written here, so the same schema gives the same JSON, byte for byte.
- Honest about run-time behaviour it cannot see: the bearer guard is declared on the CRUD and
  WebSocket routes but is enforced only when `SERVICE_JWT_PUBKEY` or `SERVICE_JWKS_URL` is set;
  `limit` has no `maximum`, because larger values are accepted and clamped to 1000.

Component names: `<Model>` (stored record), `<Model>.Create`, `<Model>.Replace`,
`<Model>.Patch` (request bodies), `<Model>.Page` (list response), `<Model>.Created`
(create response), `<Model>.projection.<name>` (projections). A dot never occurs in a model
name, so these never collide.
"""

from __future__ import annotations

import os
import re
from typing import Any

from dbsvc import __version__
from dbsvc.compiler.openapi_schemas import (MAX_LIMIT, add_model_schemas, nullable,
                                            object_schema, problem_schemas, record_or_projection, ref,
                                            scalar_schema)
from dbsvc.schema.ir import Model, Schema
from dbsvc.routes import (
    LIVE_QUERY,
    OPERATIONAL,
    REPLICATE_PATH,
    REPLICATE_SNAPSHOT_PATH,
    SUBSCRIBE,
    collection_path,
    feed_path,
    item_path,
)

OPENAPI_VERSION = "3.1.0"
PROBLEM_JSON = "application/problem+json"
JSON = "application/json"
DEFAULT_LIMIT = 100  # mirrors dbsvc.runtime; the compiler layer must not import runtime
MAX_HEAD = 16 * 1024  # mirrors dbsvc.http.connection.MAX_HEAD; the compiler must not import http
BEARER = "bearerAuth"


# status -> (component name, description); every error response shares the Problem schema.
_ERROR_RESPONSES: dict[int, tuple[str, str]] = {
    400: ("BadRequest", "`bad_query`: unknown parameter, filter or sort on a field not allowed, "
          "unparsable value, unknown projection, bad `as_of`; `bad_request`: body not a JSON "
          "object, a path id that does not parse as the primary key, or (any route) a request "
          "target that is not valid percent-encoded UTF-8, or both Content-Length and "
          "Transfer-Encoding; `offset_out_of_range`: a WebSocket `after` ahead of the head."),
    401: ("Unauthorized", "`unauthorized`: missing, malformed, badly signed, expired or not yet "
          "valid bearer token (only when the guard is configured)."),
    403: ("Forbidden", "`forbidden`: the token's tenant claim is missing or differs from "
          "SERVICE_TENANT (only when the guard is configured)."),
    404: ("NotFound", "`not_found`: no record with this id."),
    405: ("MethodNotAllowed", "`method_not_allowed`: the path exists but not for this method; "
          "the `Allow` header lists the methods it has."),
    409: ("Conflict", "`unique_violation` or `foreign_key_violation` on a write; `referenced` "
          "when deleting a record that child records still reference."),
    410: ("Gone", "`offset_gone`: `after` is older than the retained events."),
    413: ("PayloadTooLarge", "`payload_too_large`: body over SERVICE_MAX_BODY bytes (any route: "
          "checked before routing)."),
    414: ("UriTooLong", "`bad_request`: the request line alone is over the server's limit of "
          f"{MAX_HEAD // 1024} KiB for a request head (any route): a target too long."),
    415: ("UnsupportedMediaType", "`unsupported_media_type`: a Content-Type that is not JSON."),
    422: ("UnprocessableContent", "`constraint_violation`: `errors` lists every invalid field."),
    426: ("UpgradeRequired", "`bad_request`: a WebSocket route asked without a WebSocket "
          "opening handshake (or a version other than 13); `Upgrade: websocket` and "
          "`Sec-WebSocket-Version: 13` say what is expected."),
    431: ("HeadersTooLarge", "`bad_request`: the request head (line and headers) is over the "
          f"server's limit of {MAX_HEAD // 1024} KiB (any route)."),
    503: ("Unavailable", "`unavailable`: connection limit reached, or the store turned "
          "read-only after an I/O error (writes)."),
}


def build_openapi(schema: Schema) -> dict[str, Any]:
    """The whole OpenAPI 3.1.0 document for `schema`, as JSON-ready data."""
    stem = _schema_stem(schema.path)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    _add_operational(paths, schemas, schema)
    for model in schema.models:
        add_model_schemas(schemas, model)
        _add_crud_paths(paths, model)
    for model in schema.models:
        _add_feed_paths(paths, model)
    paths[REPLICATE_PATH] = {"get": _replicate_operation(schema)}
    paths[REPLICATE_SNAPSHOT_PATH] = {"get": _replicate_snapshot_operation()}
    schemas.update(problem_schemas())
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": stem, "version": __version__,
                 "description": _info_description(schema, stem)},
        "servers": [{"url": "http://127.0.0.1:3000",
                     "description": "the defaults of SERVICE_HOST and SERVICE_PORT"}],
        "tags": _tags(schema),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": _shared_parameters(),
            "headers": _headers(),
            "responses": _error_responses(),
            "securitySchemes": {BEARER: {
                "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "A JWT from the external identity provider, verified only: "
                "enforced only when SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL is set (otherwise "
                "every request passes). WebSocket clients that cannot set Authorization may "
                "offer the subprotocols `bearer` and `bearer.<JWT>`.",
            }},
        },
        "security": [{BEARER: []}],
    }


def _schema_stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path or ""))[0] or "dbsvc"


def _info_description(schema: Schema, stem: str) -> str:
    models = ", ".join(f"`{m.name}` (`/api/{m.kebab}`)" for m in schema.models)
    return (
        f"Database service generated by dbsvc from `{os.path.basename(schema.path) or stem}`. "
        f"Models: {models or 'none'}. Errors are RFC 9457 problem details "
        f"(`{PROBLEM_JSON}`); every response carries `X-Request-Id`. A method a path does not "
        "have answers 405 with `Allow`; an unknown path answers 404."
    )


def _tags(schema: Schema) -> list[dict[str, str]]:
    tags = [{"name": "operations", "description": "Health, readiness, metrics and watermarks; no token."}]
    tags += [{"name": m.name, "description": f"Records of `{m.name}`."} for m in schema.models]
    tags.append({"name": "realtime", "description": "WebSocket routes (RFC 6455): GET upgrades answering 101."})
    return tags


def _op_id(model: Model) -> str:
    return model.kebab.replace("-", "_")


def _param(name: str, where: str, description: str, schema: dict[str, Any],
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": description,
            "schema": schema}


def _shared_parameters() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    return {
        "limit": _param(
            "limit", "query", f"Page size, default {DEFAULT_LIMIT}. Values above {MAX_LIMIT} are "
            f"accepted and clamped to {MAX_LIMIT}; the applied value is the page's `limit`.",
            {**count, "default": DEFAULT_LIMIT}),
        "offset": _param("offset", "query", "Number of matches skipped.", {**count, "default": 0}),
        "as_of": _param(
            "as_of", "query", "Point-in-time read at a watermark (a row count of the model, from "
            "`Dbsvc-Watermark` or /snapshot), valid within one compaction epoch. Ahead of the "
            "current watermark is 400 `bad_query`.", count),
        "after": _param(
            "after", "query", "Replay the matching events after this global offset (from "
            "`Dbsvc-Offset` or a `lagged after <offset>` close reason) before following live. "
            "No longer retained: 410 `offset_gone`; ahead of the head: 400 "
            "`offset_out_of_range`.", count),
        "Upgrade": _param(
            "Upgrade", "header", "WebSocket opening handshake (RFC 6455 §4.1), with "
            "`Connection: Upgrade`, `Sec-WebSocket-Key` and `Sec-WebSocket-Version: 13`.",
            {"type": "string", "enum": ["websocket"]}, required=True),
        "Sec-WebSocket-Protocol": _param(
            "Sec-WebSocket-Protocol", "header", "For browsers, which cannot set Authorization: "
            "offer `bearer, bearer.<JWT>`; the server answers `bearer`.", {"type": "string"}),
    }


def _filter_parameters(model: Model) -> list[dict[str, Any]]:
    params = []
    for f in model.fields:
        if not f.filterable:
            continue
        items = scalar_schema(f)
        note = ""
        if f.nullable:
            items = nullable(items)
            note = " The literal `null` matches records where the field is null."
        params.append({**_param(
            f.name, "query", f"Exact-match filter on `{f.name}`, compared by type. Repeat the "
            "parameter to match any of several values; different fields are ANDed." + note,
            {"type": "array", "items": items}), "style": "form", "explode": True})
    return params


def _sort_parameter(model: Model) -> dict[str, Any] | None:
    keys = [f.name for f in model.fields if f.sortable]
    if not keys:
        return None
    key = "-?(?:" + "|".join(re.escape(k) for k in keys) + ")"
    return _param(
        "sort", "query", "Comma-separated sort keys, each a sortable field, ascending, or "
        "descending with a leading `-`; ties break on the primary key ascending. Without "
        f"`sort`, primary-key order. Sortable: {', '.join(f'`{k}`' for k in keys)}.",
        {"type": "string", "pattern": f"^{key}(?:,{key})*$", "examples": [keys[0], f"-{keys[0]}"]})


def _projection_parameter(model: Model) -> dict[str, Any] | None:
    if not model.projections:
        return None
    return _param("projection", "query", "Return only the columns of this declared projection.",
                  {"type": "string", "enum": [p.name for p in model.projections]})


def _id_parameter(model: Model) -> dict[str, Any]:
    f = model.id_field
    return _param("id", "path", f"The `{f.name}` of the `{model.name}` record.",
                  scalar_schema(f), required=True)


# ---------------------------------------------------------------- responses

def _headers() -> dict[str, Any]:
    def header(description: str, schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
        return {"description": description, "required": required, "schema": schema}

    return {
        "X-Request-Id": header("Identifier of this request, also in the log line and any "
                               "problem body's `request_id`.", {"type": "string"}),
        "Dbsvc-Watermark": header("The model's watermark (row count) this read was made at; "
                                  "usable as `as_of`.", {"type": "integer", "minimum": 0}),
        "Dbsvc-Offset": header("On a read, the global event offset when it was made (0 before "
                               "any event; absent on `as_of` reads): subscribe with `after=` it to "
                               "miss nothing. On a write, the offset of the row it wrote: a read "
                               "replica whose `/snapshot` offset reached it holds the write.",
                               {"type": "integer", "minimum": 0}, False),
        "Location": header("Path of the created record.", {"type": "string"}),
        "WWW-Authenticate": header('`Bearer realm="dbsvc"`, plus `error="invalid_token"` when a '
                                   "token was sent.", {"type": "string"}),
        "Allow": header("Methods the path has.", {"type": "string"}),
    }


def _error_responses() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status, (name, description) in _ERROR_RESPONSES.items():
        headers: dict[str, Any] = {"X-Request-Id": ref("X-Request-Id", "headers")}
        if status == 401:
            headers["WWW-Authenticate"] = ref("WWW-Authenticate", "headers")
        if status == 405:
            headers["Allow"] = ref("Allow", "headers")
        out[name] = {"description": description, "headers": headers,
                     "content": {PROBLEM_JSON: {"schema": ref("Problem")}}}
    out["ReplicationDisabled"] = {
        **out["NotFound"],
        "description": "`replication_disabled`: `[runtime].replication` is off."}
    return out


# The protocol layer answers these on any route, before the application sees the request:
# a malformed request, a body over SERVICE_MAX_BODY, a request line or head too large, the
# connection limit.
_PROTOCOL_STATUSES = (400, 413, 414, 431, 503)


def _errors_for(*statuses: int) -> dict[str, Any]:
    """The error responses of one operation: its own plus those of the protocol layer."""
    every = sorted({*statuses, *_PROTOCOL_STATUSES})
    return {str(s): ref(_ERROR_RESPONSES[s][0], "responses") for s in every}


def _json_response(description: str, schema: dict[str, Any], *headers: str) -> dict[str, Any]:
    h: dict[str, Any] = {"X-Request-Id": ref("X-Request-Id", "headers")}
    for name in headers:
        h[name] = ref(name, "headers")
    return {"description": description, "headers": h, "content": {JSON: {"schema": schema}}}


def _params(*items: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [p for p in items if p is not None]


def _body(name: str, description: str) -> dict[str, Any]:
    return {"required": True, "description": description,
            "content": {JSON: {"schema": ref(name)}}}


def _add_crud_paths(paths: dict[str, Any], model: Model) -> None:
    name, kebab, oid = model.name, model.kebab, _op_id(model)
    read_headers = ("Dbsvc-Watermark", "Dbsvc-Offset")
    projection = _projection_parameter(model)
    paths[collection_path(kebab)] = {
        "get": {
            "tags": [name], "operationId": f"list_{oid}",
            "summary": f"List {name} records with filters, sort and pagination",
            "parameters": _params(*_filter_parameters(model), _sort_parameter(model),
                                  ref("limit", "parameters"), ref("offset", "parameters"),
                                  projection, ref("as_of", "parameters")),
            "responses": {
                "200": _json_response("One page of matches.", ref(f"{name}.Page"), *read_headers),
                **_errors_for(400, 401, 403, 503),
            },
        },
        "post": {
            "tags": [name], "operationId": f"create_{oid}", "summary": f"Create a {name}",
            "requestBody": _body(f"{name}.Create", f"The new `{name}`."),
            "responses": {
                "201": {"description": "Created.",
                        "headers": {"X-Request-Id": ref("X-Request-Id", "headers"),
                                    "Location": ref("Location", "headers"),
                                    "Dbsvc-Offset": ref("Dbsvc-Offset", "headers")},
                        "content": {JSON: {"schema": ref(f"{name}.Created")}}},
                **_errors_for(400, 401, 403, 409, 413, 415, 422, 503),
            },
        },
    }
    write_errors = _errors_for(400, 401, 403, 404, 409, 413, 415, 422, 503)
    paths[item_path(kebab)] = {
        "parameters": [_id_parameter(model)],
        "get": {
            "tags": [name], "operationId": f"get_{oid}", "summary": f"Fetch one {name}",
            "parameters": _params(projection, ref("as_of", "parameters")),
            "responses": {
                "200": _json_response("The record (projected when `projection` is given).",
                                      record_or_projection(model), *read_headers),
                **_errors_for(400, 401, 403, 404, 503),
            },
        },
        "put": {
            "tags": [name], "operationId": f"replace_{oid}", "summary": f"Replace a whole {name}",
            "requestBody": _body(f"{name}.Replace", "The whole record."),
            "responses": {"200": _json_response("The stored record.", ref(name), "Dbsvc-Offset"),
                          **write_errors},
        },
        "patch": {
            "tags": [name], "operationId": f"patch_{oid}",
            "summary": f"Change some fields of a {name}",
            "requestBody": _body(f"{name}.Patch", "The fields to change."),
            "responses": {"200": _json_response("The stored record.", ref(name), "Dbsvc-Offset"),
                          **write_errors},
        },
        "delete": {
            "tags": [name], "operationId": f"delete_{oid}", "summary": f"Delete a {name}",
            "responses": {
                "204": {"description": "Deleted.",
                        "headers": {"X-Request-Id": ref("X-Request-Id", "headers"),
                                    "Dbsvc-Offset": ref("Dbsvc-Offset", "headers")}},
                **_errors_for(400, 401, 403, 404, 409, 503),
            },
        },
    }


def _switching(description: str) -> dict[str, Any]:
    return {"description": description, "headers": {
        "Upgrade": {"description": "`websocket`.", "schema": {"type": "string"}},
        "Sec-WebSocket-Accept": {"description": "RFC 6455 §4.2.2.", "schema": {"type": "string"}},
    }}


def _ws_parameters() -> list[dict[str, Any]]:
    return [ref("Upgrade", "parameters"), ref("Sec-WebSocket-Protocol", "parameters")]


def _add_feed_paths(paths: dict[str, Any], model: Model) -> None:
    name, kebab, oid = model.name, model.kebab, _op_id(model)
    query = _params(*_filter_parameters(model), _projection_parameter(model),
                    ref("after", "parameters"), *_ws_parameters())
    errors = _errors_for(400, 401, 403, 410, 426, 503)
    paths[feed_path(SUBSCRIBE, kebab)] = {"get": {
        "tags": ["realtime", name], "operationId": f"subscribe_{oid}",
        "summary": f"Change feed of {name} (WebSocket)",
        "description": f"Text frames, one JSON event each: `insert`, `update` (with `previous`), "
        f"`delete` (the last `record`) of matching `{name}` records, and `link` events when a "
        "child record starts or stops referencing one, e.g. "
        f'`{{"kind": "insert", "model": "{name}", "offset": 41, "watermark": 12, "id": 7, '
        '"record": {...}}`. A subscriber whose buffer fills is closed with 1013 '
        "`lagged after <offset>`; resubscribe with `after=` that offset.",
        "parameters": query,
        "responses": {"101": _switching("Upgraded; events follow."), **errors},
    }}
    paths[feed_path(LIVE_QUERY, kebab)] = {"get": {
        "tags": ["realtime", name], "operationId": f"live_query_{oid}",
        "summary": f"Live result set of {name} (WebSocket)",
        "description": f"`{name}LiveDelta` text frames: first `Init` (`records`, `watermark`), "
        "then `Added` / `Updated` (`record`) and `Removed` (`id`) as records enter, change "
        f"inside or leave the result set. The route also answers at /live-query/{name}. "
        "Resumed with `after`, no `Init` is sent.",
        "parameters": query,
        "responses": {"101": _switching("Upgraded; deltas follow."), **errors},
    }}


def _replicate_operation(schema: Schema) -> dict[str, Any]:
    state = "on" if schema.runtime.replication else "off"
    errors = _errors_for(400, 401, 403, 410, 426, 503)
    errors["404"] = ref("ReplicationDisabled", "responses")
    errors = dict(sorted(errors.items()))
    return {
        "tags": ["realtime"], "operationId": "replicate",
        "summary": "Durable, resumable replication (WebSocket)",
        "description": "Binary frames, one `PersistedEvent` each: `u64 offset | u32 "
        "crc32(payload) | u32 length | payload` (big-endian), the payload the JSON of an "
        "insert/update/delete event. Offsets are global, gap-free and survive restarts and "
        f"compaction. Replication is {state} in this schema (`[runtime].replication`); when "
        "off the route answers 404 `replication_disabled`.",
        "parameters": [_param(
            "after", "query", "Start after this global offset. Older than the retained log: 410 "
            "`offset_gone`; ahead of the head: 400 `offset_out_of_range`.",
            {"type": "integer", "minimum": 0, "default": 0}), *_ws_parameters()],
        "responses": {"101": _switching("Upgraded; frames follow."), **errors},
    }


def _replicate_snapshot_operation() -> dict[str, Any]:
    errors = _errors_for(400, 401, 403, 426, 503)
    errors["404"] = ref("ReplicationDisabled", "responses")
    return {
        "tags": ["realtime"], "operationId": "replicate_snapshot",
        "summary": "The epoch's snapshot, to bootstrap a read replica (WebSocket)",
        "description": "A text header `{\"type\": \"snapshot\", \"format\": 1, \"epoch\", \"offset\", "
        "\"fingerprint\"}`, the snapshot file as binary messages (each line `CRC JSON`), then "
        "`{\"type\": \"end\", \"bytes\", \"crc32\"}` and a normal close. A replica installs it and "
        "follows `/replicate?after=<offset>` (`dbsvc serve SCHEMA --follow URL`). A read replica "
        "answers writes with 405 `read_only_replica`, `Allow: GET, HEAD, OPTIONS` and the "
        "primary's URL in `Dbsvc-Primary`.",
        "parameters": _ws_parameters(),
        "responses": {"101": _switching("Upgraded; the snapshot follows."), **dict(sorted(errors.items()))},
    }


def _add_operational(paths: dict[str, Any], schemas: dict[str, Any], schema: Schema) -> None:
    counts = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
              "propertyNames": {"enum": [m.name for m in schema.models]}}
    schemas["Health"] = object_schema({
        "status": {"type": "string", "const": "ok"},
        "version": {"type": "string", "description": "The dbsvc version serving."},
        "schema": {"type": "string", "description": "The schema's fingerprint (16 hex digits)."},
        "storage": {"type": "string", "description": "Only while the store refuses writes: why."},
        "detail": {"type": "string", "description": "Only while the store refuses writes: what to do."},
    }, ["status", "version", "schema"], "Liveness: the process answers, and which build it is.")
    schemas["Ready"] = object_schema({"status": {"type": "string", "const": "ready"}}, ["status"],
                               "Readiness: the store answers a read.")
    schemas["Metrics"] = object_schema({
        "model_count": {"type": "integer", "minimum": 0},
        "rows_per_model": {**counts, "description": "Live records per declared model name."},
        "total_rows": {"type": "integer", "minimum": 0},
        "realtime": object_schema({
            "subscriptions": {"type": "integer", "minimum": 0, "description": "Open /subscribe sockets."},
            "live_queries": {"type": "integer", "minimum": 0, "description": "Open /live-query sockets."},
            "replication_streams": {"type": "integer", "minimum": 0, "description": "Open /replicate sockets."},
            "events_sent": {"type": "integer", "minimum": 0,
                            "description": "Feed messages sent since start (Init included)."},
            "lagged_closes": {"type": "integer", "minimum": 0,
                              "description": "Sockets closed with 1013 because their buffer filled."},
        }, ["subscriptions", "live_queries", "replication_streams", "events_sent", "lagged_closes"],
            "WebSocket feed counters."),
    }, ["model_count", "rows_per_model", "total_rows", "realtime"], "Per-model row counts, and the "
       "realtime feeds' counters.")
    schemas["Snapshot"] = {
        "type": "object", "description": "Current watermarks for `as_of` reads.",
        "properties": {
            "watermarks": {**counts, "description": "Watermark per declared model name."},
            "epoch": {"type": "string", "description": "Opaque compaction epoch; watermarks of "
                      "another epoch are meaningless."},
            "replication": {"type": "boolean", "description": "Whether /replicate works."},
            "offset": {"type": "integer", "minimum": 0, "description": "The global offset of the last "
                       "acknowledged row (0 before any): `after=` this misses nothing that follows."},
            "fingerprint": {"type": "string", "description": "The schema's fingerprint (16 hex "
                            "digits); a read replica must have the same."},
        },
        "required": ["watermarks", "epoch", "replication", "offset", "fingerprint"],
    }
    for route in OPERATIONAL:
        body = ref(route.schema) if route.schema is not None else {
            "type": "object", "description": "A JSON document generated with the handlers."}
        paths[route.path] = {"get": {
            "tags": ["operations"], "operationId": route.name, "summary": route.summary,
            "security": [],
            "responses": {"200": _json_response("OK.", body), **_errors_for(503)},
        }}
