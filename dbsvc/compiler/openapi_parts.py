"""The reusable parts of the OpenAPI document: parameters, headers and error responses.

`openapi.py` assembles the paths; this module holds what many operations share: the
components under `#/components/parameters`, `#/components/headers` and
`#/components/responses`, the per-model query parameters (filters, `sort`, `projection`, the
path id), and the small builders of a response or request body. Every error response shares
the `Problem` schema of `openapi_schemas.py`; `ERROR_RESPONSES` is the one table of what each
status means, and `errors_for(...)` is how an operation lists the ones it can answer.

Invariants: pure (the IR, `openapi_schemas.py` and the stdlib; no I/O, never runtime or http,
whose numbers are mirrored here, each saying where it comes from); deterministic.
"""

from __future__ import annotations

import re
from typing import Any

from dbsvc.compiler.openapi_schemas import MAX_LIMIT, nullable, ref, scalar_schema
from dbsvc.compiler.operators import operator_params
from dbsvc.schema.ir import Model
from dbsvc.textsearch import MAX_QUERY_WORDS, MAX_WORD

PROBLEM_JSON = "application/problem+json"
JSON = "application/json"
DEFAULT_LIMIT = 100  # mirrors dbsvc.runtime; the compiler layer must not import runtime
# RFC 9110 §8.8.3 and §5.6.1: `*`, or a comma-separated list of entity tags, empty elements
# and OWS allowed (obs-text left out); mirrors dbsvc/http/conditional.py.
_TAG = r'(W/)?"[\x21\x23-\x7e]*"'
ENTITY_TAGS = rf"^(\*|[ \t,]*({_TAG}([ \t]*,[ \t,]*{_TAG})*[ \t,]*)?)$"
MAX_HEAD = 16 * 1024  # mirrors dbsvc.http.connection.MAX_HEAD; the compiler must not import http


# status -> (component name, description); every error response shares the Problem schema.
ERROR_RESPONSES: dict[int, tuple[str, str]] = {
    400: (
        "BadRequest",
        "`bad_query`: unknown parameter, filter or sort on a field not allowed, "
        "unparsable value, unknown projection, bad `as_of`; `bad_request`: body not a JSON "
        "object, a path id that does not parse as the primary key, or (any route) a request "
        "target that is not valid percent-encoded UTF-8, or both Content-Length and "
        "Transfer-Encoding, or an `If-Match` / `If-None-Match` that is not `*` or a list of "
        "entity tags; `offset_out_of_range`: a WebSocket `after` ahead of the head.",
    ),
    401: (
        "Unauthorized",
        "`unauthorized`: missing, malformed, badly signed, expired or not yet "
        "valid bearer token (only when the guard is configured).",
    ),
    403: (
        "Forbidden",
        "`forbidden`: the token's tenant claim is missing or differs from "
        "SERVICE_TENANT (only when the guard is configured).",
    ),
    404: ("NotFound", "`not_found`: no record with this id."),
    405: (
        "MethodNotAllowed",
        "`method_not_allowed`: the path exists but not for this method; the `Allow` header lists the methods it has.",
    ),
    409: (
        "Conflict",
        "`unique_violation` or `foreign_key_violation` on a write; `referenced` "
        "when deleting a record that child records still reference.",
    ),
    410: ("Gone", "`offset_gone`: `after` is older than the retained events."),
    412: (
        "PreconditionFailed",
        "`precondition_failed`: the record's current version does not match `If-Match` (or "
        "the record does not exist), or matches `If-None-Match`; nothing was changed. The "
        "`ETag` header carries the current version when there is a record.",
    ),
    413: (
        "PayloadTooLarge",
        "`payload_too_large`: body over SERVICE_MAX_BODY bytes (any route: checked before routing).",
    ),
    414: (
        "UriTooLong",
        "`bad_request`: the request line alone is over the server's limit of "
        f"{MAX_HEAD // 1024} KiB for a request head (any route): a target too long.",
    ),
    415: ("UnsupportedMediaType", "`unsupported_media_type`: a Content-Type that is not JSON."),
    422: ("UnprocessableContent", "`constraint_violation`: `errors` lists every invalid field."),
    426: (
        "UpgradeRequired",
        "`upgrade_required`: a WebSocket route asked without a WebSocket "
        "opening handshake (or a version other than 13); `Upgrade: websocket` and "
        "`Sec-WebSocket-Version: 13` say what is expected.",
    ),
    431: (
        "HeadersTooLarge",
        "`bad_request`: the request head (line and headers) is over the "
        f"server's limit of {MAX_HEAD // 1024} KiB (any route).",
    ),
    503: (
        "Unavailable",
        "`unavailable`: connection limit reached, or the store turned read-only after an I/O error (writes).",
    ),
}


def parameter(
    name: str, where: str, description: str, schema: dict[str, Any], required: bool = False
) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": description, "schema": schema}


def shared_parameters() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    return {
        "limit": parameter(
            "limit",
            "query",
            f"Page size, default {DEFAULT_LIMIT}. Values above {MAX_LIMIT} are "
            f"accepted and clamped to {MAX_LIMIT}; the applied value is the page's `limit`.",
            {**count, "default": DEFAULT_LIMIT},
        ),
        "offset": parameter("offset", "query", "Number of matches skipped.", {**count, "default": 0}),
        "If-Match": parameter(
            "If-Match",
            "header",
            'RFC 9110 §13.1.1: write only if the record\'s current `ETag` is one of these (`"12"`, '
            'a comma-separated list, or `*`: any existing record); weak tags (`W/"12"`) never match. '
            "Otherwise 412 `precondition_failed` and nothing changes; a missing record is 412 too.",
            {"type": "string", "pattern": ENTITY_TAGS},
        ),
        "If-None-Match": parameter(
            "If-None-Match",
            "header",
            "RFC 9110 §13.1.2, compared weakly: on a read, 304 Not Modified when the record's `ETag` "
            "is one of these (or `*`); on a write, 412 `precondition_failed` then.",
            {"type": "string", "pattern": ENTITY_TAGS},
        ),
        "cursor": parameter(
            "cursor",
            "query",
            "Opaque: the `cursor` of a list's `Link: <...>; rel=\"next\"` header. The page starts right after "
            "the record it was made from, in the same sort (another sort, another model or a malformed "
            "cursor is 400 `bad_query`); not together with `offset`. Valid across compactions.",
            {"type": "string"},
        ),
        "as_of": parameter(
            "as_of",
            "query",
            "Point-in-time read at a watermark (a row count of the model, from "
            "`Dbsvc-Watermark` or /snapshot), valid within one compaction epoch. Ahead of the "
            "current watermark is 400 `bad_query`.",
            count,
        ),
        "after": parameter(
            "after",
            "query",
            "Replay the matching events after this global offset (from "
            "`Dbsvc-Offset` or a `lagged after <offset>` close reason) before following live. "
            "No longer retained: 410 `offset_gone`; ahead of the head: 400 "
            "`offset_out_of_range`.",
            count,
        ),
        "Upgrade": parameter(
            "Upgrade",
            "header",
            "WebSocket opening handshake (RFC 6455 §4.1), with "
            "`Connection: Upgrade`, `Sec-WebSocket-Key` and `Sec-WebSocket-Version: 13`.",
            {"type": "string", "enum": ["websocket"]},
            required=True,
        ),
        "Connection": parameter(
            "Connection", "header", "`Upgrade` (RFC 6455 §4.1).", {"type": "string", "enum": ["Upgrade"]}, required=True
        ),
        "Sec-WebSocket-Key": parameter(
            "Sec-WebSocket-Key",
            "header",
            "16 random bytes in base64 (RFC 6455 §4.1); the 101 answers its digest in `Sec-WebSocket-Accept`.",
            {"type": "string", "pattern": "^[A-Za-z0-9+/]{22}==$"},
            required=True,
        ),
        "Sec-WebSocket-Version": parameter(
            "Sec-WebSocket-Version",
            "header",
            "`13` (RFC 6455 §4.1); another version answers 426.",
            {"type": "string", "enum": ["13"]},
            required=True,
        ),
        "Sec-WebSocket-Protocol": parameter(
            "Sec-WebSocket-Protocol",
            "header",
            "For browsers, which cannot set Authorization: offer `bearer, bearer.<JWT>`; the server answers `bearer`.",
            {"type": "string"},
        ),
    }


def filter_parameters(model: Model) -> list[dict[str, Any]]:
    params = []
    for f in model.fields:
        if not f.filterable:
            continue
        items = scalar_schema(f)
        note = ""
        if f.nullable:
            items = nullable(items)
            note = " The literal `null` matches records where the field is null."
        params.append(
            {
                **parameter(
                    f.name,
                    "query",
                    f"Exact-match filter on `{f.name}`, compared by type. Repeat the "
                    "parameter to match any of several values; different fields are ANDed." + note,
                    {"type": "array", "items": items},
                ),
                "style": "form",
                "explode": True,
            }
        )
    return params


_OPERATOR_WORDS = {
    "gt": "Greater than",
    "gte": "Greater than or equal to",
    "lt": "Less than",
    "lte": "Less than or equal to",
}


def operator_parameters(model: Model) -> list[dict[str, Any]]:
    """One parameter per declared operator (compiler/operators.py `operator_params`), typed."""
    params = []
    for param, f, op in operator_params(model):
        if op == "null":
            text = f"`true`: only records whose `{f.name}` is null; `false`: only those where it is not."
            schema: dict[str, Any] = {"type": "boolean"}
        elif op == "prefix":
            text = f"Records whose `{f.name}` starts with this text (a range over the sorted strings)."
            schema = scalar_schema(f)
        else:
            text = (
                f"{_OPERATOR_WORDS[op]}: a range over `{f.name}`'s ordered index, compared by type; "
                "never matches a null. Several bounds are ANDed."
            )
            schema = scalar_schema(f)
        params.append(parameter(param, "query", text, schema))
    return params


def search_parameter(model: Model) -> dict[str, Any] | None:
    """`search` for a model with `@search` fields (compiler/search.py), else None."""
    fields = [f.name for f in model.fields if f.searchable]
    if not fields:
        return None
    text = (
        f"Text search over {', '.join(f'`{f}`' for f in fields)}: a record matches when every word of this "
        "text is a prefix of some word of those fields. Words are compared after Unicode NFKD, accent "
        "stripping and case folding, and split on every character that is not a letter or digit. "
        f"At most {MAX_QUERY_WORDS} words of at most {MAX_WORD} characters; no word at all is 400 `bad_query`."
    )
    return parameter("search", "query", text, {"type": "string", "minLength": 1})


def sort_parameter(model: Model) -> dict[str, Any] | None:
    keys = [f.name for f in model.fields if f.sortable]
    if not keys:
        return None
    key = "-?(?:" + "|".join(re.escape(k) for k in keys) + ")"
    return parameter(
        "sort",
        "query",
        "Comma-separated sort keys, each a sortable field, ascending, or "
        "descending with a leading `-`; ties break on the primary key ascending. Without "
        f"`sort`, primary-key order. Sortable: {', '.join(f'`{k}`' for k in keys)}.",
        {"type": "string", "pattern": f"^{key}(?:,{key})*$", "examples": [keys[0], f"-{keys[0]}"]},
    )


def projection_parameter(model: Model) -> dict[str, Any] | None:
    if not model.projections:
        return None
    return parameter(
        "projection",
        "query",
        "Return only the columns of this declared projection.",
        {"type": "string", "enum": [p.name for p in model.projections]},
    )


def expand_parameter(values: list[str]) -> dict[str, Any] | None:
    """`expand` (compiler/expand.py's `expand_params`: each `@ref` field, alone or with a
    projection of the referenced model), a comma-separated list: form style, not exploded."""
    if not values:
        return None
    described = parameter(
        "expand",
        "query",
        "Embed the record each named `@ref` field points to under `_expand`, the record's last member, "
        "in the order named (`field:projection` applies a projection of the referenced model). "
        "One level; each field once; a null reference or a record the token may not read has no entry. "
        f"Values: {', '.join(f'`{v}`' for v in values)}.",
        {"type": "array", "items": {"type": "string", "enum": values}, "minItems": 1, "uniqueItems": True},
    )
    return {**described, "style": "form", "explode": False}


def id_parameter(model: Model) -> dict[str, Any]:
    f = model.id_field
    return parameter("id", "path", f"The `{f.name}` of the `{model.name}` record.", scalar_schema(f), required=True)


def header_components() -> dict[str, Any]:
    def header(description: str, schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
        return {"description": description, "required": required, "schema": schema}

    return {
        "X-Request-Id": header(
            "Identifier of this request, also in the log line and any problem body's `request_id`.", {"type": "string"}
        ),
        "Dbsvc-Watermark": header(
            "The model's watermark (row count) this read was made at; usable as `as_of`.",
            {"type": "integer", "minimum": 0},
        ),
        "Dbsvc-Offset": header(
            "On a read, the global event offset when it was made (0 before "
            "any event; absent on `as_of` reads): subscribe with `after=` it to "
            "miss nothing. On a write, the offset of the row it wrote: a read "
            "replica whose `/snapshot` offset reached it holds the write.",
            {"type": "integer", "minimum": 0},
            False,
        ),
        "Location": header("Path of the created record.", {"type": "string"}),
        "ETag": header(
            'The record\'s version: `"<n>"`, n the global offset of its last write (strong; the same '
            "with or without `projection`; on an `as_of` read, the version it shows). Send it back in "
            "`If-Match` to write only that version, or in `If-None-Match` to read it only if it changed.",
            {"type": "string", "pattern": '^"[1-9][0-9]*"$'},
        ),
        "WWW-Authenticate": header(
            '`Bearer realm="dbsvc"`, plus `error="invalid_token"` when a token was sent.', {"type": "string"}
        ),
        "Allow": header("Methods the path has.", {"type": "string"}),
        "Link": header(
            'RFC 8288 `<PATH?...&cursor=...>; rel="next"`: the next page, keyed on this page\'s last record '
            "(the request's own parameters, `offset` left out, and a `cursor`). Absent on the last page.",
            {"type": "string"},
            required=False,
        ),
    }


def error_response_components() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status, (name, description) in ERROR_RESPONSES.items():
        headers: dict[str, Any] = {"X-Request-Id": ref("X-Request-Id", "headers")}
        if status == 401:
            headers["WWW-Authenticate"] = ref("WWW-Authenticate", "headers")
        if status == 405:
            headers["Allow"] = ref("Allow", "headers")
        if status == 412:
            headers["ETag"] = {  # absent when there is no record
                "description": "The record's current version, when there is a record.",
                "required": False,
                "schema": {"type": "string", "pattern": '^"[1-9][0-9]*"$'},
            }
        out[name] = {
            "description": description,
            "headers": headers,
            "content": {PROBLEM_JSON: {"schema": ref("Problem")}},
        }
    out["ReplicationDisabled"] = {
        **out["NotFound"],
        "description": "`replication_disabled`: `[runtime].replication` is off.",
    }
    return out


# The protocol layer answers these on any route, before the application sees the request:
# a malformed request, a body over SERVICE_MAX_BODY, a request line or head too large, the
# connection limit.
PROTOCOL_STATUSES = (400, 413, 414, 431, 503)


def errors_for(*statuses: int) -> dict[str, Any]:
    """The error responses of one operation: its own plus those of the protocol layer."""
    every = sorted({*statuses, *PROTOCOL_STATUSES})
    return {str(s): ref(ERROR_RESPONSES[s][0], "responses") for s in every}


def json_response(description: str, schema: dict[str, Any], *headers: str) -> dict[str, Any]:
    h: dict[str, Any] = {"X-Request-Id": ref("X-Request-Id", "headers")}
    for name in headers:
        h[name] = ref(name, "headers")
    return {"description": description, "headers": h, "content": {JSON: {"schema": schema}}}


def parameter_list(*items: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [p for p in items if p is not None]


def request_body(name: str, description: str) -> dict[str, Any]:
    return {"required": True, "description": description, "content": {JSON: {"schema": ref(name)}}}
