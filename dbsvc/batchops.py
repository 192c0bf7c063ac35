"""`POST /batch`: several writes, all or nothing (issue 35; docs/guide/rest.md#batches-post-batch).

Request and response (docs/decisions.md, "POST /batch")::

    {"ops": [
      {"op": "create", "model": "order", "record": {"id": 7, ...}},
      {"op": "create", "model": "order-line", "record": {"order_id": {"$op": 0}, ...}},
      {"op": "update", "model": "product", "id": 3, "record": {...}},
      {"op": "patch",  "model": "Product", "id": 3, "record": {"stock": 4}},
      {"op": "delete", "model": "product", "id": 9}
    ]}
    -> 200 {"results": [{"status": 201, "id": 7, "etag": "\\"41\\""},
                        {"status": 201, "id": 12, "etag": "\\"42\\""},
                        {"status": 200, "id": 3, "etag": "\\"43\\"", "record": {...}},
                        {"status": 200, "id": 3, "etag": "\\"44\\"", "record": {...}},
                        {"status": 204, "id": 9}],
            "first": 41, "last": 45}                    Dbsvc-Offset: 45

Rules:

1. Shape first, every op, before anything is applied: the body is an object whose only key
   is `ops`, a list of 1 to MAX_OPS objects; each has `op` (create, update, patch,
   delete), `model` (the kebab route name or the declared name), `record` (an object:
   create, update, patch; absent for delete), `id` (update, patch, delete; absent for
   create, whose record holds its id if it gives one). Anything else is 400 naming the
   op's index (`"op": i` in the problem); more than MAX_OPS is 400 too (a shape the
   OpenAPI document refuses, `maxItems`), with `limit`. A body over SERVICE_MAX_BODY is the
   protocol layer's 413.
2. `if_match` (update, patch, delete; optional) is the op's If-Match precondition: a
   string as the header's value (`"\"12\""`, a comma-separated list, or `*`), checked as
   the single route checks the header (http/conditional.py) against the record's version in
   the state the earlier ops left (an earlier op of the batch that wrote the record gave it
   a new version). A failure is 412 `precondition_failed` for the whole batch, naming the
   op; a missing or hidden record with `if_match` is 412 too. A create takes none (a new
   record has no version: 400).
3. `{"$op": i}` as an op's `id`, or as the value of a @ref field of its `record`, is the id
   of the record op i (an earlier op) wrote; for an `id` op i must be of the same model, for
   a @ref of the referenced model. A batch may so create a parent and its children with
   automatic ids. Anywhere else (a `json` field) the object is stored as it is.
4. Ops run in order, each through the single route's own steps (generated validators,
   access rules, the store's checks) against the state the earlier ops left
   (storage/batchwrite.py); the first refusal aborts the batch (nothing applied, nothing
   written, nothing published) and is answered with the status and problem that op alone
   would get, plus `"op": i` and `op i: ` before its detail.
5. No await between the first op and the commit (batchwrite.py rule 2). The answer is
   sent once the whole batch is durable; `Dbsvc-Offset` is its last row's offset.
6. `etag` of a result: `"<offset of that op's row>"`, the version that op gave its record
   (a later op of the batch on the same record gives it another); none for a delete.

Imports errors, access, rules, routes, runtime, interfaces and http.types (the app's
seams); app.py calls `BatchRoute.answer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dbsvc.access import NO_CLAIMS, Access, missing
from dbsvc.errors import BadRequest, NotFound, RequestError
from dbsvc.http.conditional import ANY, IF_MATCH, Conditions, parse_tags
from dbsvc.http.types import Deferred, Response
from dbsvc.interfaces import BatchWriter, ServedStore
from dbsvc.rules import Claims
from dbsvc.runtime import CompiledModel, compact_json

MAX_OPS = 1000  # ops per batch (docs/guide/rest.md#batches-post-batch)
OPS = ("create", "update", "patch", "delete")
_KEYS = {
    "create": frozenset(("op", "model", "record")),
    "update": frozenset(("op", "model", "id", "record")),
    "patch": frozenset(("op", "model", "id", "record")),
    "delete": frozenset(("op", "model", "id")),
}
IF_MATCH_KEY = "if_match"  # rule 2: optional on update, patch and delete


class Op:
    """One op of a batch, its shape checked (rule 1)."""

    __slots__ = ("index", "kind", "model", "id", "record", "conditions")

    def __init__(
        self,
        index: int,
        kind: str,
        model: CompiledModel,
        id_: Any,
        record: dict | None,
        conditions: Conditions | None = None,
    ) -> None:
        self.index = index
        self.kind = kind
        self.model = model
        self.id = id_
        self.record = record
        self.conditions = conditions  # its `if_match` (rule 2), or None


def _refused(index: int, detail: str) -> BadRequest:
    return BadRequest(f"op {index}: {detail}", op=index)


def parse_ops(body: Any, models: Mapping[str, CompiledModel]) -> list[Op]:
    """The ops of a batch body, every op's shape checked (rule 1), or the refusal."""
    if not isinstance(body, dict):
        raise BadRequest(f'a batch is a JSON object {{"ops": [...]}}, got {type(body).__name__}')
    extra = sorted(set(body) - {"ops"})
    if extra:
        raise BadRequest(f"unknown batch key {extra[0]!r}: expected only 'ops'")
    ops = body.get("ops")
    if not isinstance(ops, list):
        raise BadRequest(f"'ops' must be a list of ops, got {type(ops).__name__ if 'ops' in body else 'nothing'}")
    if not ops:
        raise BadRequest(f"'ops' is empty: expected 1 to {MAX_OPS} ops")
    if len(ops) > MAX_OPS:
        raise BadRequest(f"a batch holds at most {MAX_OPS} ops, got {len(ops)}: split it", limit=MAX_OPS)
    return [_parse_op(i, raw, models) for i, raw in enumerate(ops)]


def _parse_op(index: int, raw: Any, models: Mapping[str, CompiledModel]) -> Op:
    if not isinstance(raw, dict):
        raise _refused(index, f"an op is a JSON object, got {type(raw).__name__}")
    kind = raw.get("op")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise _refused(index, f"unknown op {kind!r}: expected one of {', '.join(OPS)}")
    if kind == "create" and IF_MATCH_KEY in raw:
        raise _refused(index, f"a create op takes no {IF_MATCH_KEY!r}: a new record has no version to match")
    conditions = _conditions(index, raw[IF_MATCH_KEY]) if IF_MATCH_KEY in raw else None
    allowed = _KEYS[kind]
    if raw.keys() != allowed:  # the common op has exactly its keys: no set arithmetic for it
        extra = sorted(set(raw) - allowed - {IF_MATCH_KEY})
        if extra:
            raise _refused(index, f"unknown key {extra[0]!r} in a {kind} op: expected {', '.join(sorted(allowed))}")
        missing_keys = sorted(allowed - set(raw))
        if missing_keys:
            raise _refused(index, f"a {kind} op needs {missing_keys[0]!r}")
    name = raw["model"]
    model = models.get(name) if isinstance(name, str) else None
    if model is None:
        raise _refused(index, f"unknown model {name!r}: expected one of {', '.join(sorted(models))}")
    record = raw.get("record")
    if kind != "delete" and not isinstance(record, dict):
        raise _refused(index, f"'record' must be a JSON object, got {type(record).__name__}")
    id_ = raw.get("id")
    if kind != "create" and not _is_op_ref(id_):
        if isinstance(id_, float) and id_.is_integer():  # 7.0 is the integer 7, as an int field takes it
            id_ = int(id_)
        if isinstance(id_, bool) or not isinstance(id_, (int, str)):
            raise _refused(index, f"'id' must be a {model.name} id (a number or a string), got {id_!r}")
        try:
            id_ = model.parse_id(str(id_))
        except RequestError as exc:
            raise _refused(index, exc.detail) from None
    return Op(index, kind, model, id_, record, conditions)


def _conditions(index: int, value: Any) -> Conditions:
    """An op's `if_match` (rule 2), parsed as the If-Match header is."""
    shape = "expected '*' or a comma-separated list of entity tags such as \"\\\"12\\\"\" (the ETag a read gave)"
    if not isinstance(value, str):
        raise _refused(index, f"{IF_MATCH_KEY!r} must be a string, got {value!r}: {shape}")
    try:
        tags = parse_tags(IF_MATCH, value)
    except BadRequest:
        raise _refused(index, f"{IF_MATCH_KEY!r} {value!r} is malformed: {shape}") from None
    return Conditions(ANY if tags is None else tags, None)


def _is_op_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "$op" in value


class BatchRoute:
    """Answers `POST /batch` (module docstring) with the app's models and access rules."""

    def __init__(self, models: Mapping[str, CompiledModel], access: Access) -> None:
        # Both spellings of every model (rule 1): the route name and the declared name.
        self.models: dict[str, CompiledModel] = {}
        for kebab, model in models.items():
            self.models[kebab] = model
            self.models[model.name] = model
        self.access = access

    def answer(self, store: ServedStore, body: Any, claims: Claims = NO_CLAIMS) -> Deferred:
        ops = parse_ops(body, self.models)
        first = store.applied_offset + 1  # op i's row takes offset first + i (rule 6)
        batch = store.begin_batch(len(ops))
        results: list[str] = []  # each op's result as JSON text, encoded once
        written: list[tuple[CompiledModel, Any]] = []  # per op: its model and id (rule 3)
        try:
            for op in ops:
                results.append(self._run(store, batch, op, written, claims, first + op.index))
        except RequestError as exc:
            batch.abort()
            index = len(results)
            exc.detail = f"op {index}: {exc.detail}"
            exc.extra["op"] = index
            raise
        except BaseException:
            batch.abort()
            raise
        last = store.applied_offset
        assert last == first + len(ops) - 1, "each op writes one row"
        body_out = f'{{"results":[{",".join(results)}],"first":{first},"last":{last}}}'.encode("utf-8")
        return Deferred(batch.commit(), Response(200, body_out, [("Dbsvc-Offset", str(last))]))

    def _run(
        self,
        store: ServedStore,
        batch: BatchWriter,
        op: Op,
        written: list[tuple[CompiledModel, Any]],
        claims: Claims,
        offset: int,
    ) -> str:
        """One op, as its single route runs it (rule 4); its result as JSON text, the op's
        row at `offset`: `{"status":201,"id":7,"etag":"\\"41\\""}` (rule 6)."""
        model, rules, access = op.model, op.model.rules, self.access
        key = _resolve(op.index, op.id, model.name, written, "id") if op.kind != "create" else None
        record = _resolve_refs(op, written) if op.record is not None else None
        if op.kind == "create":
            assert record is not None
            access.fill_from_token(model, record, claims)
            checked = model.validate_create(record)
            if rules is not None:
                access.check_create(model, rules, checked, claims)
            stored = batch.insert(model.name, checked)
            id_ = stored[model.id_field]
            written.append((model, id_))
            return f'{{"status":201,"id":{_id_json(id_)},"etag":"\\"{offset}\\""}}'
        current, _watermark = store.get(model.name, key)
        if op.conditions is not None:  # rule 2, before the op's other checks, as the single route
            _check_precondition(store, op, key, current, access, claims)
        if op.kind == "delete":
            if rules is not None:
                if current is None:
                    raise missing(model, key)
                access.check_visible(model, rules, "delete", current, key, claims)
                access.check_delete(model, rules, current, claims)
            batch.delete(model.name, key)
            written.append((model, key))
            return f'{{"status":204,"id":{_id_json(key)}}}'
        if current is None:
            raise missing(model, key)
        if rules is not None:
            access.check_visible(model, rules, "update", current, key, claims)
        if op.kind == "update":
            checked = model.validate_replace(record, key)
        else:
            checked = model.validate_patch(record, current)
        if rules is not None:
            access.check_update(model, rules, current, checked, claims)
        _previous, stored = batch.replace(model.name, key, checked)
        written.append((model, key))
        return f'{{"status":200,"id":{_id_json(key)},"record":{compact_json(stored)},"etag":"\\"{offset}\\""}}'


def _id_json(id_: Any) -> str:
    """An id as JSON: an int's digits as they are (the common id, one per op of a batch,
    where the JSON encoder's call cost more than the digits), else `compact_json`."""
    return str(id_) if type(id_) is int else compact_json(id_)


def _check_precondition(
    store: ServedStore, op: Op, key: Any, current: dict | None, access: Access, claims: Claims
) -> None:
    """The op's `if_match` against its record's version (rule 2); a record that is missing
    or hidden from the token has none (412, as the single route answers)."""
    assert op.conditions is not None
    model, what = op.model, f"{op.model.name} {key!r}"
    try:
        if current is None:
            raise missing(model, key)
        if model.rules is not None:
            access.check_visible(
                model, model.rules, "delete" if op.kind == "delete" else "update", current, key, claims
            )
    except NotFound:
        op.conditions.check_write(0, what)
        raise
    op.conditions.check_write(store.version(model.name, key), what)


def _resolve(index: int, value: Any, expected: str, written: list[tuple[CompiledModel, Any]], what: str) -> Any:
    """`value`, or the id `{"$op": i}` names (rule 3), which must be a record of the
    model named `expected`."""
    if not _is_op_ref(value):
        return value
    target = value["$op"]
    # Raised while the batch runs: `BatchRoute.answer` adds the op's index.
    if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < index:
        earlier = f"0 to {index - 1}" if index > 1 else "0" if index else "none: it is the first op"
        raise BadRequest(f"{what} {{'$op': {target!r}}} must name an earlier op: expected {earlier}")
    other, id_ = written[target]
    if other.name != expected:
        raise BadRequest(f"{what} {{'$op': {target}}} names a {other.name} (op {target}), expected a {expected}")
    return id_


def _resolve_refs(op: Op, written: list[tuple[CompiledModel, Any]]) -> dict:
    """The op's record with every `{"$op": i}` of a @ref field replaced (rule 3): a copy
    when there is one, else the record itself (the request's own, parsed for this batch)."""
    assert op.record is not None
    record = op.record
    for field, parent in op.model.refs:
        value = record.get(field)
        if type(value) is dict:
            if record is op.record:
                record = dict(record)
            record[field] = _resolve(op.index, value, parent, written, field)
    return record
