"""The OpenAPI 3.1 document of the service generated for one schema.

`build_openapi(schema) -> dict` describes every route of docs/guide/rest.md for
exactly that schema: per model the CRUD routes under `/api/<kebab>` and the operational routes
(`/health`, `/ready`, `/metrics`, `/snapshot`) under `paths`; the WebSocket routes
(`/subscribe/<kebab>`, `/live-query/<kebab>`, `/replicate`, `/replicate/snapshot`), each as a
GET answering 101, under the extension `x-websocket-routes`, not `paths`: a request/response
client following them gets 426 without the handshake, and with it a 101 and a socket it cannot
read (an HTTP client then reads WebSocket frames as its next response), so they are no HTTP
operations; `/asyncapi.json` describes them, and OpenAPI tools pass over the extension. This module
assembles the paths; the parts many operations share (parameters, headers, error responses)
come from `openapi_parts.py`, the JSON Schemas of records and bodies from `openapi_schemas.py`.

Invariants:

- Pure: reads only the IR (`dbsvc.schema.ir`), the error tree (`dbsvc.errors`) and the
  stdlib; no I/O. The result is plain JSON data.
- Deterministic: every mapping is built in declaration order (models, fields, projections)
  or in a fixed order written here, so the same schema gives the same JSON, byte for byte.
- Generated per schema, served per configuration: the document declares the bearer scheme
  and requires it nowhere (the operational routes say `security: []`); the server that runs
  with the guard adds the top-level requirement when it serves the document (app.py), so a
  served document never asks for a token the server ignores, nor leaves one out it demands.
- `limit` has no `maximum`, because larger values are accepted and clamped to 1000.

Component names: `<Model>` (stored record), `<Model>.Create`, `<Model>.Replace`,
`<Model>.Patch` (request bodies), `<Model>.Page` (list response), `<Model>.Created`
(create response), `<Model>.projection.<name>` (projections). A dot never occurs in a model
name, so these never collide.
"""

from __future__ import annotations

import os
from typing import Any

from dbsvc import __version__
from dbsvc.compiler.expand import expand_params
from dbsvc.compiler.openapi_batch import batch_path
from dbsvc.compiler.openapi_parts import (
    JSON,
    PROBLEM_JSON,
    error_response_components,
    errors_for,
    expand_parameter,
    filter_parameters,
    header_components,
    id_parameter,
    json_response,
    operator_parameters,
    parameter,
    parameter_list,
    projection_parameter,
    request_body,
    search_parameter,
    shared_parameters,
    sort_parameter,
)
from dbsvc.compiler.openapi_rules import describe_rules
from dbsvc.compiler.openapi_schemas import (
    add_expand_schemas,
    add_model_schemas,
    object_schema,
    problem_schemas,
    record_or_projection,
    ref,
)
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
from dbsvc.schema.ir import Model, Schema

OPENAPI_VERSION = "3.1.0"
BEARER = "bearerAuth"
# The WebSocket routes, out of `paths` (see the module docstring): a specification extension,
# which OpenAPI tools (schemathesis, client generators) pass over.
WEBSOCKET_ROUTES = "x-websocket-routes"


def build_openapi(schema: Schema) -> dict[str, Any]:
    """The whole OpenAPI 3.1.0 document for `schema`, as JSON-ready data."""
    stem = _schema_stem(schema.path)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    _add_operational(paths, schemas, schema)
    for model in schema.models:
        add_model_schemas(schemas, model)
        add_expand_schemas(schemas, schema.models, model)
        _add_crud_paths(paths, model, expand_parameter(expand_params(schema, model)))
    batch_item, batch_schemas = batch_path(schema)
    paths.update(batch_item)
    schemas.update(batch_schemas)
    http_paths = list(paths)
    for model in schema.models:
        _add_feed_paths(paths, model)
    paths[REPLICATE_PATH] = {"get": _replicate_operation(schema)}
    paths[REPLICATE_SNAPSHOT_PATH] = {"get": _replicate_snapshot_operation()}
    describe_rules(paths, schema)
    websocket = {path: item for path, item in paths.items() if path not in http_paths}
    paths = {path: paths[path] for path in http_paths}
    schemas.update(problem_schemas())
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": stem, "version": __version__, "description": _info_description(schema, stem)},
        "servers": [{"url": "http://127.0.0.1:3000", "description": "the defaults of SERVICE_HOST and SERVICE_PORT"}],
        "tags": _tags(schema),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": shared_parameters(),
            "headers": header_components(),
            "responses": error_response_components(),
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A JWT from the external identity provider, verified only. "
                    "Required on the CRUD and WebSocket routes only when the server runs with the "
                    "guard (SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL set): the served document then "
                    "says so with a top-level `security`; without the guard it has none and every "
                    "request passes. WebSocket clients that cannot set Authorization may offer the "
                    "subprotocols `bearer` and `bearer.<JWT>`.",
                }
            },
        },
        WEBSOCKET_ROUTES: websocket,
    }


def _schema_stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path or ""))[0] or "dbsvc"


def _info_description(schema: Schema, stem: str) -> str:
    models = ", ".join(f"`{m.name}` (`/api/{m.kebab}`)" for m in schema.models)
    return (
        f"Database service generated by dbsvc from `{os.path.basename(schema.path) or stem}`. "
        f"Models: {models or 'none'}. Errors are RFC 9457 problem details "
        f"(`{PROBLEM_JSON}`); every response carries `X-Request-Id`. A method a path does not "
        "have answers 405 with `Allow`; an unknown path answers 404. The WebSocket routes "
        "(`/subscribe/<model>`, `/live-query/<model>`, `/replicate`, `/replicate/snapshot`) are "
        f"not HTTP operations: they are listed under `{WEBSOCKET_ROUTES}` (their handshake, "
        "parameters and refusals) and described, with what flows after the upgrade, by the "
        "AsyncAPI document at `/asyncapi.json`."
    )


def _tags(schema: Schema) -> list[dict[str, str]]:
    tags = [{"name": "operations", "description": "Health, readiness, metrics and watermarks; no token."}]
    tags += [{"name": m.name, "description": f"Records of `{m.name}`."} for m in schema.models]
    tags.append({"name": "batch", "description": "`POST /batch`: several writes, all or nothing."})
    tags.append(
        {
            "name": "realtime",
            "description": "WebSocket routes (RFC 6455): GET upgrades answering 101, under `x-websocket-routes`.",
        }
    )
    return tags


def _op_id(model: Model) -> str:
    return model.kebab.replace("-", "_")


# ---------------------------------------------------------------- responses


def _add_crud_paths(paths: dict[str, Any], model: Model, expand: dict[str, Any] | None = None) -> None:
    name, kebab, oid = model.name, model.kebab, _op_id(model)
    read_headers = ("Dbsvc-Watermark", "Dbsvc-Offset")
    projection = projection_parameter(model)
    paths[collection_path(kebab)] = {
        "get": {
            "tags": [name],
            "operationId": f"list_{oid}",
            "summary": f"List {name} records with filters, sort and pagination",
            "parameters": parameter_list(
                *filter_parameters(model),
                *operator_parameters(model),
                search_parameter(model),
                sort_parameter(model),
                ref("limit", "parameters"),
                ref("offset", "parameters"),
                ref("cursor", "parameters"),
                projection,
                ref("as_of", "parameters"),
                expand,
            ),
            "responses": {
                "200": json_response("One page of matches.", ref(f"{name}.Page"), *read_headers, "Link"),
                **errors_for(400, 401, 403, 503),
            },
        },
        "post": {
            "tags": [name],
            "operationId": f"create_{oid}",
            "summary": f"Create a {name}",
            "requestBody": request_body(f"{name}.Create", f"The new `{name}`."),
            "responses": {
                "201": {
                    "description": "Created.",
                    "headers": {
                        "X-Request-Id": ref("X-Request-Id", "headers"),
                        "Location": ref("Location", "headers"),
                        "Dbsvc-Offset": ref("Dbsvc-Offset", "headers"),
                        "ETag": ref("ETag", "headers"),
                    },
                    "content": {JSON: {"schema": ref(f"{name}.Created")}},
                },
                **errors_for(400, 401, 403, 409, 413, 415, 422, 503),
            },
        },
    }
    write_errors = errors_for(400, 401, 403, 404, 409, 412, 413, 415, 422, 503)
    conditions = (ref("If-Match", "parameters"), ref("If-None-Match", "parameters"))
    stored = json_response("The stored record.", ref(name), "Dbsvc-Offset", "ETag")
    paths[item_path(kebab)] = {
        "parameters": [id_parameter(model)],
        "get": {
            "tags": [name],
            "operationId": f"get_{oid}",
            "summary": f"Fetch one {name}",
            "parameters": parameter_list(
                projection, ref("as_of", "parameters"), expand, ref("If-None-Match", "parameters")
            ),
            "responses": {
                "200": json_response(
                    "The record (projected when `projection` is given; with `_expand` when `expand` is).",
                    record_or_projection(model, expanded=True),
                    *read_headers,
                    "ETag",
                ),
                "304": {
                    "description": "Not Modified: the record's `ETag` matches `If-None-Match`; no body.",
                    "headers": {h: ref(h, "headers") for h in ("X-Request-Id", *read_headers, "ETag")},
                },
                **errors_for(400, 401, 403, 404, 503),
            },
        },
        "put": {
            "tags": [name],
            "operationId": f"replace_{oid}",
            "summary": f"Replace a whole {name}",
            "parameters": list(conditions),
            "requestBody": request_body(f"{name}.Replace", "The whole record."),
            "responses": {"200": stored, **write_errors},
        },
        "patch": {
            "tags": [name],
            "operationId": f"patch_{oid}",
            "summary": f"Change some fields of a {name}",
            "parameters": list(conditions),
            "requestBody": request_body(f"{name}.Patch", "The fields to change."),
            "responses": {"200": stored, **write_errors},
        },
        "delete": {
            "tags": [name],
            "operationId": f"delete_{oid}",
            "summary": f"Delete a {name}",
            "parameters": list(conditions),
            "responses": {
                "204": {
                    "description": "Deleted.",
                    "headers": {
                        "X-Request-Id": ref("X-Request-Id", "headers"),
                        "Dbsvc-Offset": ref("Dbsvc-Offset", "headers"),
                    },
                },
                **errors_for(400, 401, 403, 404, 409, 412, 503),
            },
        },
    }


def _switching(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {
            "Upgrade": {"description": "`websocket`.", "schema": {"type": "string"}},
            "Sec-WebSocket-Accept": {"description": "RFC 6455 §4.2.2.", "schema": {"type": "string"}},
        },
    }


def _ws_parameters() -> list[dict[str, Any]]:
    names = ("Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol")
    return [ref(name, "parameters") for name in names]


def _add_feed_paths(paths: dict[str, Any], model: Model) -> None:
    name, kebab, oid = model.name, model.kebab, _op_id(model)
    query = parameter_list(
        *filter_parameters(model),
        *operator_parameters(model),
        search_parameter(model),
        projection_parameter(model),
        ref("after", "parameters"),
        *_ws_parameters(),
    )
    errors = errors_for(400, 401, 403, 410, 426, 503)
    paths[feed_path(SUBSCRIBE, kebab)] = {
        "get": {
            "tags": ["realtime", name],
            "operationId": f"subscribe_{oid}",
            "summary": f"Change feed of {name} (WebSocket)",
            "description": f"Text frames, one JSON event each: `insert`, `update` (with `previous`), "
            f"`delete` (the last `record`) of matching `{name}` records, and `link` events when a "
            "child record starts or stops referencing one, e.g. "
            f'`{{"kind": "insert", "model": "{name}", "offset": 41, "watermark": 12, "id": 7, '
            '"record": {...}}`. A subscriber whose buffer fills is closed with 1013 '
            "`lagged after <offset>`; resubscribe with `after=` that offset.",
            "parameters": query,
            "responses": {"101": _switching("Upgraded; events follow."), **errors},
        }
    }
    paths[feed_path(LIVE_QUERY, kebab)] = {
        "get": {
            "tags": ["realtime", name],
            "operationId": f"live_query_{oid}",
            "summary": f"Live result set of {name} (WebSocket)",
            "description": f"`{name}LiveDelta` text frames: first `Init` (`records`, `watermark`), "
            "then `Added` / `Updated` (`record`) and `Removed` (`id`) as records enter, change "
            f"inside or leave the result set. The route also answers at /live-query/{name}. "
            "Resumed with `after`, no `Init` is sent.",
            "parameters": query,
            "responses": {"101": _switching("Upgraded; deltas follow."), **errors},
        }
    }


def _replicate_operation(schema: Schema) -> dict[str, Any]:
    state = "on" if schema.runtime.replication else "off"
    errors = errors_for(400, 401, 403, 410, 426, 503)
    errors["404"] = ref("ReplicationDisabled", "responses")
    errors = dict(sorted(errors.items()))
    return {
        "tags": ["realtime"],
        "operationId": "replicate",
        "summary": "Durable, resumable replication (WebSocket)",
        "description": "Binary frames, one `PersistedEvent` each: `u64 offset | u32 "
        "crc32(payload) | u32 length | payload` (big-endian), the payload the JSON of an "
        "insert/update/delete event. Offsets are global, gap-free and survive restarts and "
        f"compaction. Replication is {state} in this schema (`[runtime].replication`); when "
        "off the route answers 404 `replication_disabled`.",
        "parameters": [
            parameter(
                "after",
                "query",
                "Start after this global offset. Older than the retained log: 410 "
                "`offset_gone`; ahead of the head: 400 `offset_out_of_range`.",
                {"type": "integer", "minimum": 0, "default": 0},
            ),
            *_ws_parameters(),
        ],
        "responses": {"101": _switching("Upgraded; frames follow."), **errors},
    }


def _replicate_snapshot_operation() -> dict[str, Any]:
    errors = errors_for(400, 401, 403, 426, 503)
    errors["404"] = ref("ReplicationDisabled", "responses")
    return {
        "tags": ["realtime"],
        "operationId": "replicate_snapshot",
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


# /snapshot's `history` (docs/replication.md, "Histories") and, on a read replica only, its
# `replica` report (dbsvc/replica/status.py): described field by field, as served.
_HISTORY: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "This tenant's history: its id and the histories it forked from, oldest first "
    "(docs/replication.md#histories); null for a tenant written before histories existed.",
    "properties": {
        "id": {"type": "string"},
        "forks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "at": {"type": "integer", "minimum": 0}},
                "required": ["id", "at"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["id", "forks"],
    "additionalProperties": False,
}
_REPLICA_REPORT: dict[str, Any] = {
    "type": "object",
    "description": "Present on a read replica only (`dbsvc serve --follow`): how it follows its primary.",
    "properties": {
        "primary": {"type": "string", "description": "The primary's URL."},
        "state": {
            "type": "string",
            "description": "starting, connecting, bootstrapping, streaming, following, reconnecting, diverged or stopped.",
        },
        "primary_offset": {"type": "integer", "minimum": 0},
        "lag_offsets": {"type": "integer", "minimum": 0},
        "lag_seconds": {"type": "number", "minimum": 0},
        "bootstraps": {"type": "integer", "minimum": 0},
        "compactions": {"type": "integer", "minimum": 0},
        "reconnects": {"type": "integer", "minimum": 0},
        "error": {"type": ["string", "null"]},
    },
    "required": [
        "primary",
        "state",
        "primary_offset",
        "lag_offsets",
        "lag_seconds",
        "bootstraps",
        "compactions",
        "reconnects",
        "error",
    ],
    "additionalProperties": False,
}


def _add_operational(paths: dict[str, Any], schemas: dict[str, Any], schema: Schema) -> None:
    counts = {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "propertyNames": {"enum": [m.name for m in schema.models]},
    }
    schemas["Health"] = object_schema(
        {
            "status": {"type": "string", "const": "ok"},
            "version": {"type": "string", "description": "The dbsvc version serving."},
            "schema": {"type": "string", "description": "The schema's fingerprint (16 hex digits)."},
            "storage": {"type": "string", "description": "Only while the store refuses writes: why."},
            "detail": {"type": "string", "description": "Only while the store refuses writes: what to do."},
        },
        ["status", "version", "schema"],
        "Liveness: the process answers, and which build it is.",
    )
    schemas["Ready"] = object_schema(
        {"status": {"type": "string", "const": "ready"}}, ["status"], "Readiness: the store answers a read."
    )
    schemas["Metrics"] = object_schema(
        {
            "model_count": {"type": "integer", "minimum": 0},
            "rows_per_model": {**counts, "description": "Live records per declared model name."},
            "total_rows": {"type": "integer", "minimum": 0},
            "realtime": object_schema(
                {
                    "subscriptions": {"type": "integer", "minimum": 0, "description": "Open /subscribe sockets."},
                    "live_queries": {"type": "integer", "minimum": 0, "description": "Open /live-query sockets."},
                    "replication_streams": {"type": "integer", "minimum": 0, "description": "Open /replicate sockets."},
                    "events_sent": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Feed messages sent since start (Init included).",
                    },
                    "lagged_closes": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Sockets closed with 1013 because their buffer filled.",
                    },
                },
                ["subscriptions", "live_queries", "replication_streams", "events_sent", "lagged_closes"],
                "WebSocket feed counters.",
            ),
        },
        ["model_count", "rows_per_model", "total_rows", "realtime"],
        "Per-model row counts, and the realtime feeds' counters.",
    )
    schemas["Snapshot"] = {
        "type": "object",
        "description": "Current watermarks for `as_of` reads.",
        "properties": {
            "watermarks": {**counts, "description": "Watermark per declared model name."},
            "epoch": {
                "type": "string",
                "description": "Opaque compaction epoch; watermarks of another epoch are meaningless.",
            },
            "replication": {"type": "boolean", "description": "Whether /replicate works."},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "The global offset of the last "
                "acknowledged row (0 before any): `after=` this misses nothing that follows.",
            },
            "fingerprint": {
                "type": "string",
                "description": "The schema's fingerprint (16 hex digits); a read replica must have the same.",
            },
            "history": _HISTORY,
            "replica": _REPLICA_REPORT,
        },
        "required": ["watermarks", "epoch", "replication", "offset", "fingerprint", "history"],
    }
    for route in OPERATIONAL:
        body = (
            ref(route.schema)
            if route.schema is not None
            else {"type": "object", "description": "A JSON document generated with the handlers."}
        )
        paths[route.path] = {
            "get": {
                "tags": ["operations"],
                "operationId": route.name,
                "summary": route.summary,
                "security": [],
                "responses": {"200": json_response("OK.", body), **errors_for(503)},
            }
        }
