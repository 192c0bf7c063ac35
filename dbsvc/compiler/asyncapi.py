"""The AsyncAPI 3.0 document of the service's realtime (WebSocket) routes for one schema.

`build_asyncapi(schema) -> dict` describes the wire formats of docs/guide/realtime.md for exactly
that schema: per model the change feed `/subscribe/<kebab>` and the live query
`/live-query/<kebab>`, and the replication stream `/replicate`. The OpenAPI document
(`openapi.py`) lists the same routes under `x-websocket-routes` as GETs answering 101; this one says what flows
after the upgrade. The document describes the server, so every operation is a `send`.
This module assembles the document, its channels and operations; the component schemas and
messages of what flows on them are built by `asyncapi_messages.py`.

Invariants:

- Pure: reads only the IR (`dbsvc.schema.ir`), the JSON-Schema builders of
  `openapi_schemas.py` and the stdlib; no I/O, and never h11, wsproto, runtime or storage
  (the numbers those layers own are mirrored below, each saying where it comes from).
- Deterministic: every mapping is built in declaration order (models, fields, projections)
  or in a fixed order written here, so the same schema gives the same JSON, byte for byte.
- Closed: every `$ref` points inside the document, and every operation's messages are
  messages of its channel (`#/channels/<channel>/messages/<key>`).

Names. Channels: `subscribe.<kebab>`, `live-query.<kebab>`, `replicate`; operations reuse the
OpenAPI operationIds (`subscribe_<m>`, `live_query_<m>`, `replicate`). Component schemas:
`<Model>` and `<Model>.projection.<name>` (from `openapi_schemas.add_model_schemas`), the
events `<Model>.Insert`, `.Update`, `.Delete`, `.Link`, the live deltas `<Model>.LiveInit`,
`.LiveAdded`, `.LiveUpdated`, `.LiveRemoved` and their union `<Model>.LiveDelta`, and
`PersistedEvent.Frame` / `PersistedEvent.Payload`. Component messages use the same dotted
keys (`<Model>.Insert`, `<Model>.LiveDelta`, `PersistedEvent`); their `name`s are the type
names a client generator would use (`BlogPostInsert`, `BlogPostLiveDelta`). A model name
never holds a dot and no fixed suffix is a proper suffix of another, so none of these collide.
"""

from __future__ import annotations

import os
from typing import Any

from dbsvc import __version__
from dbsvc.compiler.asyncapi_messages import (
    JSON,
    add_event_components,
    add_live_components,
    add_record_schemas,
    link_sources,
    message,
    put,
)
from dbsvc.compiler.openapi_parts import operator_parameters
from dbsvc.compiler.openapi_rules import replicate_sentence, rule_sentence
from dbsvc.compiler.openapi_schemas import nullable, object_schema, ref, scalar_schema
from dbsvc.routes import LIVE_QUERY, REPLICATE_PATH, REPLICATE_SNAPSHOT_PATH, SUBSCRIBE, feed_path
from dbsvc.schema.ir import Model, Schema

ASYNCAPI_VERSION = "3.0.0"
WS_BINDING_VERSION = "0.1.0"
BINARY = "application/octet-stream"
SERVER = "local"
BEARER_HEADER = "bearerHeader"
BEARER_SUBPROTOCOL = "bearerSubprotocol"
MAX_MESSAGE = 64 * 1024  # docs/realtime.md: a larger client message closes with 1009
PING_INTERVAL = 30  # seconds; docs/realtime.md

# RFC 6455 §7.4 status codes the server closes with (4401 is in the private 4000-4999 range).
CLOSE_CODES: dict[int, str] = {
    1000: "normal closure",
    1001: "the server is shutting down",
    1009: f"a client message over {MAX_MESSAGE // 1024} KiB",
    1011: "internal error",
    1013: "reason `lagged after <offset>`: a slow consumer whose buffer filled; resubscribe "
    "with `after=<offset>` to miss nothing (`<offset>` is the last offset it was sent, "
    "or where its stream started if it was sent nothing); reason `lagged during init`: "
    "a live query whose buffer filled before its last `Init` slice, opened again "
    "without `after`",
    4401: "the token that authenticated the socket expired (plus the configured leeway)",
}
# /replicate reads the log at the socket's pace, so it never closes a peer for lagging.
_REPLICATE_CLOSE_CODES = tuple(code for code in CLOSE_CODES if code != 1013)

_AFTER = {
    "type": "integer",
    "minimum": 0,
    "description": "Replay the matching events after this global offset (from "
    "`Dbsvc-Offset` or a `lagged after <offset>` close reason) before following live. "
    "No longer retained: 410 `offset_gone`; ahead of the head: 400 `offset_out_of_range`.",
}


def build_asyncapi(schema: Schema) -> dict[str, Any]:
    """The whole AsyncAPI 3.0.0 document of `schema`'s WebSocket routes, as JSON-ready data."""
    stem = os.path.splitext(os.path.basename(schema.path or ""))[0] or "dbsvc"
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for model in schema.models:
        add_record_schemas(schemas, model)
    for model in schema.models:
        add_event_components(schemas, messages, schema, model)
        add_live_components(schemas, messages, model)
        _add_feed_channels(channels, operations, schema, model)
    _add_replication(schemas, messages, channels, operations, schema)
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": f"{stem} realtime", "version": __version__, "description": _info_description(schema)},
        "defaultContentType": JSON,
        "servers": {
            SERVER: {
                "host": "127.0.0.1:3000",
                "protocol": "ws",
                "protocolVersion": "13",
                "description": "The defaults of SERVICE_HOST and SERVICE_PORT (RFC 6455 over "
                "plain HTTP/1.1; put a TLS proxy in front for `wss`).",
                "security": [ref(BEARER_HEADER, "securitySchemes"), ref(BEARER_SUBPROTOCOL, "securitySchemes")],
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas,
            "messages": messages,
            "securitySchemes": _security_schemes(),
            "x-websocket-close-codes": {str(code): text for code, text in CLOSE_CODES.items()},
        },
    }


def _info_description(schema: Schema) -> str:
    models = ", ".join(f"`{m.name}`" for m in schema.models) or "none"
    base = os.path.basename(schema.path) or "the schema"
    return (
        f"Realtime routes of the database service generated by dbsvc from `{base}` "
        f"(models: {models}); the REST routes are in `/openapi.json`. Every route is a "
        "WebSocket (RFC 6455) opened by a GET. A request refused before the upgrade gets a "
        "plain HTTP `application/problem+json` error, never a socket: an unknown model is "
        "404 `not_found`, a request that is not a WebSocket handshake is 426. " + _socket_rules(tuple(CLOSE_CODES))
    )


def _socket_rules(codes: tuple[int, ...]) -> str:
    lines = "\n".join(f"- `{code}`: {CLOSE_CODES[code]}" for code in codes)
    return (
        "Client data messages are ignored. The server pings every "
        f"{PING_INTERVAL} s and drops peers that do not answer. Close codes:\n\n{lines}\n"
    )


def _security_schemes() -> dict[str, Any]:
    guard = (
        "Enforced only when SERVICE_JWT_PUBKEY or SERVICE_JWKS_URL is set (otherwise every "
        "socket opens); a socket authenticated by a token is closed with 4401 when the "
        "token expires."
    )
    return {
        BEARER_HEADER: {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "`Authorization: Bearer <JWT>` on the upgrade request. " + guard,
        },
        BEARER_SUBPROTOCOL: {
            "type": "httpApiKey",
            "in": "header",
            "name": "Sec-WebSocket-Protocol",
            "description": "For browsers, which cannot set Authorization: offer the subprotocols "
            "`bearer` and `bearer.<JWT>`; the server answers `Sec-WebSocket-Protocol: bearer`. " + guard,
        },
    }


# ---------------------------------------------------------------- channels and operations


def _filter_properties(model: Model) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for f in model.fields:
        if not f.filterable:
            continue
        s = scalar_schema(f)
        note = ""
        if f.nullable:
            s = nullable(s)
            note = " The literal `null` matches records where the field is null."
        s["description"] = (
            f"Exact-match filter on `{f.name}`, compared by type. Repeat it to "
            "match any of several values; different fields are ANDed." + note
        )
        props[f.name] = s
    return props


def _ws_binding(query: dict[str, Any]) -> dict[str, Any]:
    return {
        "ws": {
            "method": "GET",
            "query": {"type": "object", "properties": query, "additionalProperties": False},
            "headers": {
                "type": "object",
                "properties": {
                    "Authorization": {"type": "string", "description": "`Bearer <JWT>`: see the security schemes."},
                    "Sec-WebSocket-Protocol": {
                        "type": "string",
                        "description": "For browsers: `bearer, bearer.<JWT>`; the server answers `bearer`.",
                    },
                },
            },
            "bindingVersion": WS_BINDING_VERSION,
        }
    }


def _operator_properties(model: Model) -> dict[str, Any]:
    """The list's `field__op` parameters, which the feeds take too, typed as the OpenAPI
    document types them (openapi_parts.py `operator_parameters`)."""
    props: dict[str, Any] = {}
    for param in operator_parameters(model):
        props[param["name"]] = {**param["schema"], "description": param["description"]}
    return props


def _feed_query(model: Model) -> dict[str, Any]:
    query = _filter_properties(model)
    query.update(_operator_properties(model))
    searched = [f.name for f in model.fields if f.searchable]
    if searched:  # text search (compiler/search.py): the match rule as the list's OpenAPI parameter says
        query["search"] = {
            "type": "string",
            "minLength": 1,
            "description": f"Text search over {', '.join(searched)}: every word of it is a prefix of a word "
            "of those fields, compared after NFKD, accent stripping and case folding (at most 16 words).",
        }
    if model.projections:
        query["projection"] = {
            "type": "string",
            "enum": [p.name for p in model.projections],
            "description": "Send only the columns of this declared projection.",
        }
    query["after"] = _AFTER
    return query


_FEED_REFUSALS = (
    "Refused before the upgrade with a plain HTTP `application/problem+json` error: 400 "
    "`bad_query` (unknown parameter, unparsable value, an operator on a field that does not "
    "take it, `sort`/`limit`/`offset`/`cursor`, which a feed has no use for, unknown projection, "
    "a repeated `projection` or `after`) or `offset_out_of_range` (`after` ahead of the head); 401 "
    "`unauthorized`; 403 `forbidden`; 410 `offset_gone` (`after` no longer retained); 426 when "
    "the request is not a WebSocket handshake; 503 `unavailable` (connection limit)."
)


def _channel_message_ref(channel: str, key: str) -> dict[str, str]:
    return {"$ref": f"#/channels/{channel}/messages/{key}"}


def _operation(channel: str, keys: list[str], title: str, summary: str, tags: list[str]) -> dict[str, Any]:
    return {
        "action": "send",
        "channel": {"$ref": f"#/channels/{channel}"},
        "title": title,
        "summary": summary,
        "tags": [{"name": t} for t in tags],
        "messages": [_channel_message_ref(channel, k) for k in keys],
    }


def _add_feed_channels(channels: dict[str, Any], operations: dict[str, Any], schema: Schema, model: Model) -> None:
    name, kebab = model.name, model.kebab
    op_id = kebab.replace("-", "_")
    capacity = schema.runtime.changefeed_capacity
    lag = (
        f"Slow consumers never slow writers: a socket whose buffer of {capacity} events "
        "(`changefeed_capacity`) or of `SERVICE_CHANGEFEED_BYTES` bytes (8 MiB by default) "
        "is full is closed with 1013."
    )
    query = _feed_query(model)
    # With rules, the subscribe rule decides what reaches the socket (openapi_rules.py).
    rule = f"\n\n{rule_sentence(model, 'subscribe')}" if model.rules else ""

    feed = f"subscribe.{kebab}"
    feed_messages = {kind: ref(f"{name}.{kind.capitalize()}", "messages") for kind in ("insert", "update", "delete")}
    sources = link_sources(schema, model)
    links = ""
    if sources:
        feed_messages["link"] = ref(f"{name}.Link", "messages")
        pairs = " or ".join(f"`{child.name}.{f.name}`" for child, f in sources)
        links = f", and `link` when a {pairs} starts or stops referencing one"
    put(
        channels,
        feed,
        {
            "address": feed_path(SUBSCRIBE, kebab),
            "title": f"{name} change feed",
            "summary": f"Row events of matching `{name}` records.",
            "description": (
                "Text frames, one JSON event each, in offset order: `insert` (POST), `update` "
                f"(PUT/PATCH, with `previous`), `delete` (the last `record`) of `{name}` records"
                f"{links}. The filters and operators (`field__gte=`, `field__prefix=`, "
                "`field__null=`, ...) pass inserts and deletes whose record matches, updates whose "
                "old or new record matches, and links whose parent matches. With `projection`, "
                "`record` and `previous` carry only the projection's fields. With `after`, the "
                "matching events after that offset are replayed first, then the feed follows live "
                f"with no gap and no duplicate. {lag}{rule}\n\n{_FEED_REFUSALS}\n\n" + _socket_rules(tuple(CLOSE_CODES))
            ),
            "messages": feed_messages,
            "bindings": _ws_binding(query),
        },
    )
    put(
        operations,
        f"subscribe_{op_id}",
        _operation(
            feed,
            list(feed_messages),
            f"Send {name} row events",
            f"The server sends each matching `{name}` event on `/subscribe/{kebab}`.",
            ["realtime", name],
        ),
    )

    live = f"live-query.{kebab}"
    put(
        channels,
        live,
        {
            "address": feed_path(LIVE_QUERY, kebab),
            "title": f"{name} live query",
            "summary": f"The live result set of a `{name}` query.",
            "description": (
                f"Also answers at `/live-query/{name}`. Text frames, one `{name}LiveDelta` each: "
                "first the result set in `Init` slices (each with a part of `records`, the same "
                "`watermark` and `offset`, the last one `complete: true`), then `Added` / "
                "`Updated` (`record`) and `Removed` (`id`) as records enter, change inside, or "
                "leave the result set. Resumed with `after`, no `Init` is sent: the client already "
                "holds the result set as of that offset and gets the deltas of the later events. "
                f"With `projection`, records carry only its fields. {lag}{rule}\n\n{_FEED_REFUSALS}\n\n"
                + _socket_rules(tuple(CLOSE_CODES))
            ),
            "messages": {"delta": ref(f"{name}.LiveDelta", "messages")},
            "bindings": _ws_binding(query),
        },
    )
    put(
        operations,
        f"live_query_{op_id}",
        _operation(
            live,
            ["delta"],
            f"Send {name} live deltas",
            f"The server sends the `{name}` result set, then its changes, on `/live-query/{kebab}`.",
            ["realtime", name],
        ),
    )


def _who_replicates(schema: Schema) -> str:
    who = replicate_sentence(schema)
    return f"\n\n{who}" if who else ""


def _add_replication(
    schemas: dict[str, Any],
    messages: dict[str, Any],
    channels: dict[str, Any],
    operations: dict[str, Any],
    schema: Schema,
) -> None:
    state = "on" if schema.runtime.replication else "off"
    layout = (
        "`u64 offset | u32 crc32(payload) | u32 length | payload`, big-endian: 16 header "
        "bytes (the event's global offset, the CRC-32 of the payload, the payload's length "
        "in bytes), then the payload, the compact JSON of an insert, update or delete event "
        "(`PersistedEvent.Payload`) with whole records."
    )
    put(
        schemas,
        "PersistedEvent.Frame",
        {"type": "string", "format": "binary", "description": "One binary frame: " + layout},
    )
    events = [ref(f"{m.name}.{kind}") for m in schema.models for kind in ("Insert", "Update", "Delete")]
    payload: dict[str, Any] = {"description": "The JSON inside a `PersistedEvent` (never a `link`, never projected)."}
    if events:
        payload["oneOf"] = events
    else:
        payload["not"] = {}  # no model, no event
    put(schemas, "PersistedEvent.Payload", payload)
    put(
        messages,
        "PersistedEvent",
        message(
            "PersistedEvent",
            "Persisted event",
            ref("PersistedEvent.Frame"),
            "One binary frame per committed row: " + layout,
            BINARY,
        ),
    )
    refusals = (
        "Refused before the upgrade with a plain HTTP `application/problem+json` error: 400 "
        "`offset_out_of_range` (an `after` that is not an offset, or one ahead of the head), 400 "
        "`bad_query` (another parameter); 401 "
        "`unauthorized`; 403 `forbidden`; 404 `replication_disabled` (replication off); 410 "
        "`offset_gone` (`after` older than the retained log); 426 when the request is not a "
        "WebSocket handshake; 503 `unavailable` (connection limit)."
    )
    put(
        channels,
        "replicate",
        {
            "address": REPLICATE_PATH,
            "title": "Replication stream",
            "summary": "Every committed row, durable and resumable.",
            "description": (
                f"Replication is {state} in this schema (`[runtime] replication`); when off the "
                "route answers HTTP 404 `replication_disabled` and `/snapshot` says "
                '`"replication": false`. Binary frames, one `PersistedEvent` each, every model\'s '
                "rows in offset order. Offsets are global, gap-free, never reused, and survive "
                "restarts and compaction. The stream replays from disk after `after`, then follows "
                "live; it reads the log at the socket's pace, so a slow replica never grows server "
                f"memory.{_who_replicates(schema)}\n\n{refusals}\n\n" + _socket_rules(_REPLICATE_CLOSE_CODES)
            ),
            "messages": {"event": ref("PersistedEvent", "messages")},
            "bindings": _ws_binding(
                {
                    "after": {
                        "type": "integer",
                        "minimum": 0,
                        "default": 0,
                        "description": "Start after this global offset. Older than the retained log: 410 "
                        "`offset_gone`; ahead of the head: 400 `offset_out_of_range`.",
                    }
                }
            ),
        },
    )
    put(
        operations,
        "replicate",
        _operation(
            "replicate",
            ["event"],
            "Send persisted events",
            "The server sends every committed row on `/replicate`, from `after` on.",
            ["realtime"],
        ),
    )
    _add_snapshot_channel(schemas, messages, channels, operations, state, _who_replicates(schema))


def _add_snapshot_channel(
    schemas: dict[str, Any],
    messages: dict[str, Any],
    channels: dict[str, Any],
    operations: dict[str, Any],
    state: str,
    who: str = "",
) -> None:
    """`/replicate/snapshot`: what a read replica bootstraps from (replica/follower.py)."""
    put(
        schemas,
        "Snapshot.Header",
        object_schema(
            {
                "type": {"const": "snapshot"},
                "format": {"const": 1},
                "epoch": {"type": "string", "description": "The primary's epoch; the replica adopts it."},
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The offset the snapshot stands at: follow `/replicate?after=<offset>` next.",
                },
                "fingerprint": {
                    "type": "string",
                    "description": "The schema's fingerprint; a replica with another refuses to start.",
                },
            },
            ["type", "format", "epoch", "offset", "fingerprint"],
            "The first message.",
        ),
    )
    put(
        schemas,
        "Snapshot.End",
        object_schema(
            {
                "type": {"const": "end"},
                "bytes": {"type": "integer", "minimum": 0},
                "crc32": {"type": "integer", "minimum": 0, "description": "crc32 of every chunk's bytes, in order."},
            },
            ["type", "bytes", "crc32"],
            "The last message, before a normal close.",
        ),
    )
    put(
        schemas,
        "Snapshot.Chunk",
        {
            "type": "string",
            "contentEncoding": "binary",
            "description": "A piece of the snapshot file: lines of `CRC SP JSON LF`.",
        },
    )
    for key, title, content in (
        ("Snapshot.Header", "Snapshot header", JSON),
        ("Snapshot.Chunk", "Snapshot bytes", BINARY),
        ("Snapshot.End", "Snapshot end", JSON),
    ):
        put(messages, key, message(key.replace(".", ""), title, ref(key), title + ".", content))
    put(
        channels,
        "replicate-snapshot",
        {
            "address": REPLICATE_SNAPSHOT_PATH,
            "title": "Replica bootstrap snapshot",
            "summary": "The epoch's snapshot file, streamed, for `dbsvc serve --follow`.",
            "description": (
                f"Replication is {state} in this schema; when off the route answers HTTP 404 "
                "`replication_disabled`. A header, the snapshot file in binary chunks (every line "
                "carries its CRC), an end message with the size and crc32 of all of them, then close "
                f"1000.{who}\n\nRefused before the upgrade with a plain HTTP `application/problem+json` error: "
                "400 `bad_query` (any query parameter); 401 `unauthorized`; 403 `forbidden`; 404 "
                "`replication_disabled`; 426 when the request is not a WebSocket handshake; 503 "
                "`unavailable` while a compaction switches epochs.\n\n" + _socket_rules(_REPLICATE_CLOSE_CODES)
            ),
            "messages": {
                "header": ref("Snapshot.Header", "messages"),
                "chunk": ref("Snapshot.Chunk", "messages"),
                "end": ref("Snapshot.End", "messages"),
            },
            "bindings": _ws_binding({}),
        },
    )
    put(
        operations,
        "replicate_snapshot",
        _operation(
            "replicate-snapshot",
            ["header", "chunk", "end"],
            "Send the bootstrap snapshot",
            "The server sends its epoch's snapshot on `/replicate/snapshot`.",
            ["realtime"],
        ),
    )
