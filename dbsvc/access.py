"""Access rules on the REST routes: a model's compiled `ModelRules` asked for one request.

The rules themselves are generated code (compiler/rules.py) returning answers of the shapes
`dbsvc/rules.py` defines; this module decides what each answer means for a request
(docs/guide/rest.md, "Access rules on these routes", has the table users read):

1. `list` never refuses: the token's `Scope` narrows the query (`scoped_query`). A pinned
   `field`/`keys` meets the request's own filter on that field (the intersection; an empty
   one is an empty page with no scan) or becomes that field's filter, so storage answers it
   from the field's hash index; the rest (`where_row`) is a test storage applies to every
   candidate, so `total`, the sort and the page count only visible records.
2. `get`, `update`, `delete` of a record the `get` rule hides: `NotFound` with exactly the
   message a missing record gets (`missing`), so an answer never tells a hidden record from
   an absent one. `as_of` reads ask the rule of the record as it was.
3. A readable record whose write rule refuses, or a create the rule refuses: `Forbidden`
   (403 `forbidden`), whose detail names the operation and the model, never the record's data.
4. `create` asks the rule of the record as it would be stored: the body with the token's
   defaults filled (`CompiledModel.fill_from_token`, which refuses a forged value itself)
   and then validated (defaults applied). `update` (PUT and PATCH) asks it of the stored
   record (`record`) and the validated new one (`new`).
5. Every refusal is counted once, by operation, in the server's one `Refusals` (/metrics).

A model without rules (`CompiledModel.rules is None`) is never passed here: the app tests
`is None` first, so the hot paths of a schema without rules pay one attribute test.

Imports errors, rules and runtime only (tests/test_layers.py, the `access` row).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from dbsvc.errors import Forbidden, NotFound
from dbsvc.rules import Claims, ModelRules, Refusals, Scope
from dbsvc.runtime import CompiledModel, Query, Record

NO_CLAIMS: Claims = {}  # the claims of a request to a server without a token guard


def missing(model: CompiledModel, key: Any) -> NotFound:
    """The 404 of a record that does not exist, and of one the token may not read (rule 2)."""
    return NotFound(f"{model.name} {key!r} does not exist")


def scoped_query(model: CompiledModel, query: Query, scope: Scope) -> Query | None:
    """`query` narrowed to what `scope` lets the token see; None: nothing can match (rule 1)."""
    if scope.everything:
        return query
    if scope.nothing:
        return None
    filters = query.filters
    if scope.field is not None:
        asked = filters.get(scope.field)
        keys = scope.keys if asked is None else asked & scope.keys
        if not keys:
            return None
        filters = {**filters, scope.field: keys}
    where_row = scope.where_row
    if where_row is None and scope.where is not None:
        where, decode = scope.where, model.decode
        where_row = lambda values: where(decode(values))  # noqa: E731
    if where_row is not None and query.where_row is not None:
        first, second = query.where_row, where_row
        where_row = lambda values: first(values) and second(values)  # noqa: E731
    # built directly: dataclasses.replace costs more than the rest of this function
    return Query(
        filters=filters,
        sort=query.sort,
        limit=query.limit,
        offset=query.offset,
        projection=query.projection,
        as_of=query.as_of,
        after=query.after,
        where_row=where_row if where_row is not None else query.where_row,
        ranges=query.ranges,
        nulls=query.nulls,
        cursor=query.cursor,
        expand=query.expand,
        search=query.search,
    )


class Access:
    """The rule checks of the REST routes, each raising what its refusal answers (module
    docstring) and counting it in `refusals`."""

    __slots__ = ("capacity", "refusals", "_scoped")

    def __init__(self, refusals: Refusals, capacity: int = 1024) -> None:
        self.refusals = refusals
        self.capacity = capacity
        # (token, model, id of a parsed query) -> (that query, its scoped query): a client
        # polling a list with one token asks the rule once. A rule is a pure function of
        # the claims, and the claims of a verified token are a function of its text, so the
        # token's text stands for them (the guard has checked its expiry on this very
        # request before we get here). The query is kept in the entry and compared with
        # `is`, so a recycled id never matches. Asking the compiled rule and building the
        # Query were most of a list's cost under an owner rule (bench/README.md).
        self._scoped: OrderedDict[tuple[str, str, int], tuple[Query, Query | None]] = OrderedDict()

    def list_query(
        self, model: CompiledModel, rules: ModelRules, query: Query, claims: Claims, token: str | None = None
    ) -> Query | None:
        """The query a `list` runs under the token's scope; None: an empty page. `token`:
        the request's Authorization value the claims were verified from (the cache key);
        None (no guard, or claims given directly): asked afresh."""
        if token is None:
            return scoped_query(model, query, rules.list(claims))
        key = (token, model.name, id(query))
        entry = self._scoped.get(key)
        if entry is not None and entry[0] is query:
            return entry[1]
        scoped = scoped_query(model, query, rules.list(claims))
        if len(self._scoped) >= self.capacity:
            self._scoped.popitem(last=False)
        self._scoped[key] = (query, scoped)
        return scoped

    def check_get(self, model: CompiledModel, rules: ModelRules, record: Record, key: Any, claims: Claims) -> None:
        self.check_visible(model, rules, "get", record, key, claims)

    def check_create(self, model: CompiledModel, rules: ModelRules, record: Record, claims: Claims) -> None:
        if not rules.create(record, claims):
            self.refusals.count("create")
            raise self._forbidden("create", model)

    def check_visible(
        self, model: CompiledModel, rules: ModelRules, operation: str, record: Record, key: Any, claims: Claims
    ) -> None:
        """A read of, or a write to, a record the token may not read is a 404, as a missing
        record (rule 2), counted under `operation`."""
        if not rules.get(record, claims):
            self.refusals.count(operation)
            raise missing(model, key)

    def check_update(
        self, model: CompiledModel, rules: ModelRules, before: Record, after: Record, claims: Claims
    ) -> None:
        if not rules.update(before, after, claims):
            self.refusals.count("update")
            raise self._forbidden("update", model)

    def check_delete(self, model: CompiledModel, rules: ModelRules, record: Record, claims: Claims) -> None:
        if not rules.delete(record, claims):
            self.refusals.count("delete")
            raise self._forbidden("delete", model)

    def fill_from_token(self, model: CompiledModel, body: Any, claims: Claims) -> None:
        """Fill the body's `@default(token.X)` fields from the claims (rule 4); the generated
        filler refuses a forged value or a missing claim (403), counted as a `create`
        refusal. A body that is not an object is left for `validate_create` to refuse (400)."""
        fill = model.fill_from_token
        if fill is not None and isinstance(body, dict):
            try:
                fill(body, claims)
            except Forbidden:
                self.refusals.count("create")
                raise

    @staticmethod
    def _forbidden(operation: str, model: CompiledModel) -> Forbidden:
        return Forbidden(f"{operation} of {model.name} is not allowed by the model's access rules for this token")
