"""The schema's intermediate representation: frozen dataclasses, no behaviour.

The parser (`dbsvc.schema.parser`) builds these from source text and the checker
(`dbsvc.schema.checks`) guarantees their invariants before anyone else sees them:

- every model has exactly one `@id` field, of type INT, STR or UUID, never nullable;
- `filterable`/`sortable` are never set on JSON fields; `searchable` only on STR fields;
- `ref` names an existing model whose id field has the same type;
- `min <= max` when both are set; defaults are of the field's type and inside its bounds;
- projection names are unique per model and name existing fields;
- a rule names only existing fields, `new` only in rules whose operations are all
  `update`, no field in the replicate rules; every constant it compares with a field is of
  that field's type, in the canonical form below (`Default`); `<` and friends only on
  int, float, str, date and datetime values; a lone operand is boolean.

Everything downstream (compiler, OpenAPI, storage) reads only these classes and may rely
on the invariants above. Imports nothing from dbsvc but `errors` (and not even that).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field


class FieldType(enum.Enum):
    """The scalar types of the schema language (docs/guide/schema.md#types)."""

    INT = "int"
    FLOAT = "float"
    STR = "str"
    BOOL = "bool"
    JSON = "json"
    DATETIME = "datetime"
    DATE = "date"
    UUID = "uuid"
    ENUM = "enum"


ID_TYPES = frozenset({FieldType.INT, FieldType.STR, FieldType.UUID})
RESERVED_FIELD_NAMES = frozenset(
    {"sort", "limit", "offset", "projection", "as_of", "after", "cursor", "expand", "search"}
)


class DefaultKind(enum.Enum):
    """What `@default(...)` asks for: a literal, the current instant, or a fresh uuid."""

    VALUE = "value"
    NOW = "now"
    UUID = "uuid"


@dataclass(frozen=True, slots=True)
class Default:
    """A field default. For VALUE, `value` is already of the field's Python type:
    int, float, str, bool, None (for nullable fields), and for DATETIME/DATE/UUID/ENUM the
    canonical string form (UTC `...Z`, `YYYY-MM-DD`, lower-case uuid, member name)."""

    kind: DefaultKind
    value: object = None


@dataclass(frozen=True, slots=True)
class Field:
    """One declared field. `line`/`col` point at the field name in the source."""

    name: str
    type: FieldType
    nullable: bool = False
    enum_members: tuple[str, ...] = ()
    is_id: bool = False
    unique: bool = False
    filterable: bool = False
    sortable: bool = False
    searchable: bool = False  # `@search`: only on str fields; its words feed `search=` (textsearch.py)
    min: int | float | None = None
    max: int | float | None = None
    default: Default | None = None
    ref: str | None = None
    line: int = 0
    col: int = 0
    # `@default(token.a.b)`: ("a", "b"), the claim a create takes the value from (the field
    # has no `default` then; on create the claim fills it, docs/guide/schema.md)
    token_default: tuple[str, ...] | None = None

    @property
    def required(self) -> bool:
        """True when a create body must carry this field (no default, not nullable, not an auto id)."""
        if self.default is not None or self.nullable:
            return False
        if self.is_id and self.type is FieldType.INT:
            return False
        return True


@dataclass(frozen=True, slots=True)
class Projection:
    """`@projection(name, field, ...)`: a named subset of columns, kept in the order given."""

    name: str
    fields: tuple[str, ...]
    line: int = 0
    col: int = 0


# -- access rules (`@allow`, docs/guide/schema.md#access-rules) -----------------------------

OPERATIONS = ("list", "get", "create", "update", "delete", "subscribe")  # as dbsvc.rules
SHORTHANDS = {"read": ("list", "get", "subscribe"), "write": ("create", "update", "delete"), "all": OPERATIONS}
REPLICATE = "replicate"  # the one operation of a schema-level rule


@dataclass(frozen=True, slots=True)
class FieldRef:
    """`record.FIELD` (`side` "record") or `new.FIELD` (`side` "new", update rules only)."""

    side: str
    field: Field


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """`token.a.b`: the claim at that path of the verified token (missing: dbsvc.rules.MISSING)."""

    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Const:
    """A literal: a JSON scalar. Compared with a field, it is of the field's type in its
    canonical stored form (as `Default.value`: a datetime `...Z` in UTC, a lower-case uuid,
    a float for a float field)."""

    value: object


@dataclass(frozen=True, slots=True)
class ListConst:
    """`[a, b, ...]`, only after `in`; each value converted as `Const` is."""

    values: tuple[object, ...]


Operand = FieldRef | ClaimRef | Const | ListConst


@dataclass(frozen=True, slots=True)
class Comparison:
    """`left OP right`; OP one of `== != < <= > >= in`."""

    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Truth:
    """A lone operand used as a condition: a bool field, `true`/`false`, or a claim (true
    only when the claim is the JSON `true`)."""

    operand: Operand


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[RuleExpr, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[RuleExpr, ...]


@dataclass(frozen=True, slots=True)
class Negation:
    operand: RuleExpr


RuleExpr = Comparison | Truth | AllOf | AnyOf | Negation


@dataclass(frozen=True, slots=True)
class Rule:
    """`@allow(OPERATIONS, EXPRESSION)`: `operations` expanded (`read` -> list, get,
    subscribe) in `OPERATIONS` order, or `("replicate",)` for a schema-level rule; `expr`
    None allows any valid token; `text` is the source, `@` to `)`; `line`/`col` at the `@`."""

    operations: tuple[str, ...]
    expr: RuleExpr | None
    text: str
    line: int = 0
    col: int = 0


@dataclass(frozen=True, slots=True)
class Model:
    """A record type. `fields` are in declaration order, which is also the wire order.
    `rules`: its `@allow` rules in source order; none keeps every operation open."""

    name: str
    fields: tuple[Field, ...]
    projections: tuple[Projection, ...] = ()
    line: int = 0
    col: int = 0
    rules: tuple[Rule, ...] = ()

    @property
    def kebab(self) -> str:
        """Route segment: `BlogPost` -> `blog-post`."""
        return kebab_case(self.name)

    @property
    def id_field(self) -> Field:
        for f in self.fields:
            if f.is_id:
                return f
        raise AssertionError(f"model {self.name!r} has no @id field; the checker must refuse it")

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    """The `[runtime]` table."""

    replication: bool = False
    changefeed_capacity: int = 1024
    replication_retain_mb: int = 256  # log kept past a compaction for replicas (0: none)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The `[auth]` table: generation-time defaults of the SERVICE_JWT_* variables.
    `pubkey` is resolved relative to the schema file's directory by the parser."""

    issuer: str | None = None
    audience: str | None = None
    alg: str | None = None
    tenant_claim: str | None = None
    leeway: int | None = None
    pubkey: str | None = None
    jwks_url: str | None = None


@dataclass(frozen=True, slots=True)
class Schema:
    """A whole checked schema file."""

    path: str
    models: tuple[Model, ...]
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    source: str = ""
    replicate_rules: tuple[Rule, ...] = ()  # the top-level `@allow(replicate, ...)`, OR-ed

    @property
    def has_rules(self) -> bool:
        """Any `@allow` or `@default(token.X)`: the service then needs a token guard."""
        return bool(self.replicate_rules) or any(m.rules or any(f.token_default for f in m.fields) for m in self.models)

    def model(self, name: str) -> Model | None:
        for m in self.models:
            if m.name == name:
                return m
        return None


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def kebab_case(name: str) -> str:
    """`BlogPost` -> `blog-post`, `HTTPLog` -> `http-log`, `User` -> `user`."""
    return _CAMEL_BOUNDARY.sub("-", name).lower()
