"""The write routes of a model: POST, PUT, PATCH and DELETE, and the request body they read.

A base of `dbsvc.app.Application` (as operational.py's routes are): the handlers of the
writes, apart from the reads and the dispatch. A write is applied synchronously
(`store.insert_then` and its kin) and answered by a `Deferred` on a `Completion` the store
settles once the write is durable (or failed): no task, coroutine or future per write.

Imports what the app does for its writes, never a storage module (the store is an
`interfaces.ServedStore`), h11, wsproto or cryptography (tests/test_layers.py).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dbsvc.access import NO_CLAIMS, Access, missing
from dbsvc.bodies import decode_body
from dbsvc.errors import BadRequest, NotFound, ReadOnlyReplica, UnsupportedMediaType
from dbsvc.http.conditional import etag, preconditions
from dbsvc.http.types import Completion, Deferred, Request, Response
from dbsvc.interfaces import ServedStore
from dbsvc.readcache import EncodedRecords
from dbsvc.replica.status import ReplicaStatus
from dbsvc.routes import item_path
from dbsvc.rules import Claims
from dbsvc.runtime import CompiledModel, json_bytes

__all__ = ["WriteRoutes", "parse_json_body"]


def parse_json_body(request: Request) -> Any:
    """The request body as JSON; 415 for a declared non-JSON type, 400 for anything unparsable."""
    content_type = request.header("content-type")
    if content_type is not None and content_type != "application/json":  # (the usual value: nothing to read)
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise UnsupportedMediaType(f"content type {media!r} is not supported: expected 'application/json'")
    body = request.body
    if not body or body.isspace():  # `not body.strip()`, without the copy
        raise BadRequest("request body is empty: expected a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not UTF-8: invalid byte at position {exc.start}") from exc
    return decode_body(text)  # 400/422 for what could not be stored (dbsvc/bodies.py)


class WriteRoutes:
    """The write handlers of `Application` (module docstring)."""

    store: ServedStore
    replica: ReplicaStatus | None
    access: Access
    encoded: EncodedRecords

    def _written(self) -> tuple[str, str]:
        """`Dbsvc-Offset` of the row a write just applied: a client reads its own write on a
        replica once the replica's offset reaches it (docs/replication.md)."""
        return ("Dbsvc-Offset", str(self.store.applied_offset))

    def _stored(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """`_written`, and the `ETag` of the record just stored (its version: that row's offset)."""
        offset = self.store.applied_offset
        return ("Dbsvc-Offset", str(offset)), etag(offset)

    def _current(
        self, request: Request, model: CompiledModel, key: Any, claims: Claims, operation: str, need: bool
    ) -> dict | None:
        """The record a PUT, PATCH or DELETE of `key` changes (read under rules or `need`):
        404 when missing or hidden (PUT never creates); 412 when If-Match / If-None-Match fails (a missing or
        hidden record has no version: http/conditional.py). No await comes between this
        check and the write, so no other write can (the single writer)."""
        conditions = preconditions(request)
        if model.rules is None and not need:
            if conditions is not None:
                conditions.check_write(self.store.version(model.name, key), f"{model.name} {key!r}")
            return None
        current, _watermark = self.store.get(model.name, key)
        try:
            if current is None:
                raise missing(model, key)
            if model.rules is not None:
                self.access.check_visible(model, model.rules, operation, current, key, claims)
        except NotFound:
            if conditions is not None:
                conditions.check_write(0, f"{model.name} {key!r}")
            raise
        if conditions is not None:
            conditions.check_write(self.store.version(model.name, key), f"{model.name} {key!r}")
        return current

    def _check_writable(self) -> None:
        if self.replica is not None:
            raise ReadOnlyReplica(
                f"this server is a read replica of {self.replica.primary}: send writes to the primary",
                self.replica.primary,
            )

    def create(self, request: Request, model: CompiledModel, claims: Claims = NO_CLAIMS) -> Deferred:
        self._check_writable()
        body = parse_json_body(request)
        self.access.fill_from_token(model, body, claims)
        record = model.validate_create(body)
        if model.rules is not None:
            self.access.check_create(model, model.rules, record, claims)
        durable = Completion()
        stored = self.store.insert_then(model.name, record, durable.settle)
        key = stored[model.id_field]
        if type(key) is int:
            location = item_path(model.kebab, str(key))
            body = b'{"id":%d}' % key
        else:
            # RFC 3986 §3.3: the id is one path segment, so '/', '%', spaces and non-ASCII are
            # percent-encoded (a header value is ASCII; a raw CR/LF would split the response).
            location = item_path(model.kebab, quote(str(key), safe=""))
            body = json_bytes({"id": key})
        return Deferred(durable, Response(201, body, [("Location", location), *self._stored()]))

    def replace(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        self._check_writable()
        key = model.parse_id(segment)
        body = parse_json_body(request)
        current = self._current(request, model, key, claims, "update", need=False)
        record = model.validate_replace(body, key)
        if model.rules is not None:
            assert current is not None  # _current read it
            self.access.check_update(model, model.rules, current, record, claims)
        durable = Completion()
        _previous, stored = self.store.replace_then(model.name, key, record, durable.settle)
        body = self.encoded.encode(model, stored, self.store.written_json(stored))
        return Deferred(durable, Response(200, body, [*self._stored()]))

    def patch(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        self._check_writable()
        key = model.parse_id(segment)
        body = parse_json_body(request)
        current = self._current(request, model, key, claims, "update", need=True)
        assert current is not None  # need=True: read, or refused
        record = model.validate_patch(body, current)
        if model.rules is not None:
            self.access.check_update(model, model.rules, current, record, claims)
        # Read, merge and apply run in one synchronous call: the merge is atomic.
        durable = Completion()
        _previous, stored = self.store.replace_then(model.name, key, record, durable.settle)
        body = self.encoded.encode(model, stored, self.store.written_json(stored))
        return Deferred(durable, Response(200, body, [*self._stored()]))

    def delete(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        self._check_writable()
        key = model.parse_id(segment)
        current = self._current(request, model, key, claims, "delete", need=False)
        if model.rules is not None:
            assert current is not None  # _current read it
            self.access.check_delete(model, model.rules, current, claims)
        durable = Completion()
        self.store.delete_then(model.name, key, durable.settle)
        return Deferred(durable, Response(204, headers=[self._written()], content_type=None))
