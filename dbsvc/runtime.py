"""The small, stable surface generated modules call and the rest of dbsvc reads.

A generated module (see `dbsvc.compiler`) exposes one `CompiledModel` per schema model;
storage, HTTP application and realtime feeds only ever talk to a model through it. Nothing
here walks the schema IR: every schema-specific decision was made when the module was
generated.

Record form: a record is a `dict` whose keys are the model's fields in declaration order
and whose values are already JSON-ready and canonical (datetime `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`
in UTC, date `YYYY-MM-DD`, uuid lower case, float as `float`). `json.dumps(record)` is the
wire form.

Index keys: `CompiledModel.keys[field](value)` maps a stored value to a hashable key that
compares with the field's typed order (datetime -> integer microseconds since the epoch;
float -> float, so 3 and 3.0 are one key; everything else the value itself). `None` stays
`None`: sorted indexes order null after every value (PostgreSQL's ASC NULLS LAST).
Filter sets in a `Query` hold keys of exactly this form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed, type-checked query string.

    `filters` maps a filterable field to the set of index keys it may take (OR inside a
    field, AND across fields). `sort` lists (field, descending) pairs; ties always break
    on the primary key ascending. `limit` is already clamped to MAX_LIMIT.
    """

    filters: Mapping[str, frozenset] = field(default_factory=dict)
    sort: tuple[tuple[str, bool], ...] = ()
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    projection: str | None = None
    as_of: int | None = None
    after: int | None = None


@dataclass(frozen=True, slots=True)
class CompiledModel:
    """Everything the runtime knows about one model, all of it generated code or constants."""

    name: str                                   # declared name, "BlogPost"
    kebab: str                                  # route segment, "blog-post"
    fields: tuple[str, ...]                     # declaration order
    id_field: str
    id_type: str                                # "int" | "str" | "uuid"
    unique_fields: tuple[str, ...]              # @unique fields, the id excluded
    filter_fields: tuple[str, ...]
    sort_fields: tuple[str, ...]
    refs: tuple[tuple[str, str], ...]           # (field, parent model name)
    projections: Mapping[str, tuple[str, ...]]
    keys: Mapping[str, Callable[[Any], Any]]    # index key of every id/unique/filter/sort/ref field
    validate_create: Callable[[Any], dict]      # body -> record; raises BadRequest/ConstraintViolation
    validate_replace: Callable[[Any, Any], dict]  # (body, path id) -> record
    validate_patch: Callable[[Any, dict], dict]   # (body, current record) -> record
    parse_id: Callable[[str], Any]              # path segment -> id value; raises BadRequest
    parse_list_query: Callable[[list[tuple[str, str]]], Query]   # raises BadQuery
    parse_get_query: Callable[[list[tuple[str, str]]], Query]    # projection, as_of only
    parse_feed_query: Callable[[list[tuple[str, str]]], Query]   # filters, projection, after
    match: Callable[[dict, Mapping[str, frozenset]], bool]       # record passes every filter
    project: Mapping[str, Callable[[dict], dict]]                # projection name -> encoder
    decode: Callable[[list], dict]              # stored row (values in field order) -> record
