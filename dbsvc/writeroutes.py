"""The write routes of a model: POST, PUT, PATCH and DELETE, and the request body they read.

A base of `dbsvc.app.Application` (as operational.py's routes are): the handlers of the
writes, apart from the reads and the dispatch. A write is answered by a `Deferred` on a
`Completion` the store settles once the write is durable (or failed): no task, coroutine
or future per write.

A turn's writes in one pass (issue 36 item 3). A write's handler does what needs no
record of the store (the id parsed, the body decoded, a create's body validated and its
`create` rule asked) and queues the rest; the first write queued in a loop turn schedules
`apply_turn` once (`loop.call_soon`), which applies every queued write back to back, so
the store's step of 64 connections' writes runs warm rather than between their parses
(bench/README.md, wt-grp). The rules:

1. Arrival order: the pass applies the writes in the order their requests were
   dispatched, each whole before the next, each with every check that reads the store
   (the record a PUT, PATCH or DELETE changes: 404, If-Match's 412, the access rules'
   `get`, `update`, `delete`; the store's own: unique and @ref 409s, 422s) run in the
   pass, in the order the handler ran them before, so a refusal's status and body are
   those of the write applied alone, and a PATCH merges onto what an earlier write of
   the same pass left.
2. A refused write changes nothing (the store's rule) and its completion is settled with
   its error after the pass, so its answer (and the next request its connection parses)
   comes after the pass's last write: the pass is one synchronous call, and no read runs
   in the middle of it. A write applied is settled by the store's group commit, as before.
3. Read-your-writes holds: a connection parses its next request only after its write's
   answer, which comes after the pass applied it.
4. A response is made empty by the handler and filled by the pass (its id, `Location`,
   `Dbsvc-Offset` and `ETag` are known once the write is applied); the connection sends
   it only once the completion is settled.
5. The pass is one run of the store (`begin_run` ... `end_run`, storage/writes.py rule
   7): each write is checked and applied as alone, in order, and the pass's frames go to
   the commit queue together, in one hand-over. Inserts into one model one after
   another (nothing else between them) are one store call (`insert_run_then`).
6. `POST /batch` (batchops.py) is applied on arrival, not queued: it is checked and
   applied whole against the store as it is then, and a single write queued in the same
   turn is applied after it (both were unanswered, so either order is one a client can see).

Imports what the app does for its writes, never a storage module (the store is an
`interfaces.ServedStore`), h11, wsproto or cryptography (tests/test_layers.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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

Done = Callable[[BaseException | None], object]  # a write's completion callback (the store's `*_then`)


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
        """405 on a read replica. The write handlers ask `self.replica` first, inline: one
        call fewer a write where there is none."""
        if self.replica is not None:
            raise ReadOnlyReplica(
                f"this server is a read replica of {self.replica.primary}: send writes to the primary",
                self.replica.primary,
            )

    # A turn's queued writes (module docstring), None while no pass is scheduled; an
    # insert's step is None (rule 5).
    _turn: list[tuple[Callable[..., None] | None, Completion, Response, tuple[Any, ...]]] | None = None

    def _queue(self, step: Callable[..., None] | None, response: Response, *args: Any) -> Deferred:
        """Queue `step(done, response, *args)` for this turn's pass (rule 1); the answer."""
        durable = Completion()
        turn = self._turn
        if turn is None:
            self._turn = turn = []
            asyncio.get_running_loop().call_soon(self.apply_turn)
        turn.append((step, durable, response, args))
        return Deferred(durable, response)

    def apply_turn(self) -> None:
        """Apply the writes queued since the last pass, in arrival order, in one run of the
        store (rule 5); then tell each refused one its error (rules 1-2)."""
        writes, self._turn = self._turn, None
        if writes is None:
            return
        refused: list[tuple[Completion, Exception]] = []
        at, count = 0, len(writes)
        self.store.begin_run()
        try:
            while at < count:
                step, durable, response, args = writes[at]
                if step is None:  # an insert: the run of inserts into its model starting here
                    end = at + 1
                    while end < count and writes[end][0] is None and writes[end][3][0] is args[0]:
                        end += 1
                    self._insert_run(writes[at:end], refused)
                    at = end
                    continue
                try:
                    step(durable.settle, response, *args)
                except Exception as exc:  # the refusal the handler would have raised
                    refused.append((durable, exc))
                at += 1
        finally:
            self.store.end_run()
        for durable, error in refused:
            durable.settle(error)

    def create(self, request: Request, model: CompiledModel, claims: Claims = NO_CLAIMS) -> Deferred:
        if self.replica is not None:
            self._check_writable()
        body = parse_json_body(request)
        if model.fill_from_token is not None:  # a model with `@default(token.X)` fields
            self.access.fill_from_token(model, body, claims)
        record = model.validate_create(body)
        if model.rules is not None:
            self.access.check_create(model, model.rules, record, claims)
        return self._queue(None, Response(201), model, record)

    def _insert_run(
        self,
        run: list[tuple[Callable[..., None] | None, Completion, Response, tuple[Any, ...]]],
        refused: list[tuple[Completion, Exception]],
    ) -> None:
        """A run of a pass's inserts into one model (rule 5): the store applies each in turn
        and hands their frames over together; each answer is filled from its own record and
        offset, each refusal kept for after the pass."""
        model: CompiledModel = run[0][3][0]
        outcomes = self.store.insert_run_then(
            model.name, [args[1] for _s, _d, _r, args in run], [durable.settle for _s, durable, _r, _a in run]
        )
        for (_step, durable, response, _args), outcome in zip(run, outcomes):
            if isinstance(outcome, Exception):
                refused.append((durable, outcome))
                continue
            stored, offset = outcome
            key = stored[model.id_field]
            if type(key) is int:
                location = item_path(model.kebab, str(key))
                response.body = b'{"id":%d}' % key
            else:
                # RFC 3986 §3.3: the id is one path segment, so '/', '%', spaces and non-ASCII are
                # percent-encoded (a header value is ASCII; a raw CR/LF would split the response).
                location = item_path(model.kebab, quote(str(key), safe=""))
                response.body = json_bytes({"id": key})
            response.headers = [("Location", location), ("Dbsvc-Offset", str(offset)), etag(offset)]

    def replace(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        if self.replica is not None:
            self._check_writable()
        key = model.parse_id(segment)
        body = parse_json_body(request)
        return self._queue(self._update, Response(200), request, model, key, body, claims, False)

    def patch(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        if self.replica is not None:
            self._check_writable()
        key = model.parse_id(segment)
        body = parse_json_body(request)
        return self._queue(self._update, Response(200), request, model, key, body, claims, True)

    def _update(
        self,
        done: Done,
        response: Response,
        request: Request,
        model: CompiledModel,
        key: Any,
        body: Any,
        claims: Claims,
        merge: bool,
    ) -> None:
        """A PUT (`merge` False: the body is the whole record, 404 if none) or a PATCH (`merge`
        True: the body merged onto the current record, read whatever the rules)."""
        current = self._current(request, model, key, claims, "update", need=merge)
        if merge:
            assert current is not None  # need=True: read, or refused
            record = model.validate_patch(body, current)
        else:
            record = model.validate_replace(body, key)
        if model.rules is not None:
            assert current is not None  # _current read it
            self.access.check_update(model, model.rules, current, record, claims)
        # Read, merge and apply run in one synchronous call: the merge is atomic.
        _previous, stored = self.store.replace_then(model.name, key, record, done)
        response.body = self.encoded.encode(model, stored, self.store.written_json(stored))
        response.headers = [*self._stored()]

    def delete(self, request: Request, model: CompiledModel, segment: str, claims: Claims = NO_CLAIMS) -> Deferred:
        if self.replica is not None:
            self._check_writable()
        key = model.parse_id(segment)
        return self._queue(self._delete, Response(204, content_type=None), request, model, key, claims)

    def _delete(
        self, done: Done, response: Response, request: Request, model: CompiledModel, key: Any, claims: Claims
    ) -> None:
        current = self._current(request, model, key, claims, "delete", need=False)
        if model.rules is not None:
            assert current is not None  # _current read it
            self.access.check_delete(model, model.rules, current, claims)
        self.store.delete_then(model.name, key, done)
        response.headers = [self._written()]
