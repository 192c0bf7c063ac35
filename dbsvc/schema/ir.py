"""The schema's intermediate representation: frozen dataclasses, no behaviour.

The parser (`dbsvc.schema.parser`) builds these from source text and the checker
(`dbsvc.schema.checks`) guarantees their invariants before anyone else sees them:

- every model has exactly one `@id` field, of type INT, STR or UUID, never nullable;
- `filterable`/`sortable` are never set on JSON fields;
- `ref` names an existing model whose id field has the same type;
- `min <= max` when both are set; defaults are of the field's type and inside its bounds;
- projection names are unique per model and name existing fields.

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
RESERVED_FIELD_NAMES = frozenset({"sort", "limit", "offset", "projection", "as_of", "after"})


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
    min: int | float | None = None
    max: int | float | None = None
    default: Default | None = None
    ref: str | None = None
    line: int = 0
    col: int = 0

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


@dataclass(frozen=True, slots=True)
class Model:
    """A record type. `fields` are in declaration order, which is also the wire order."""

    name: str
    fields: tuple[Field, ...]
    projections: tuple[Projection, ...] = ()
    line: int = 0
    col: int = 0

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

    def model(self, name: str) -> Model | None:
        for m in self.models:
            if m.name == name:
                return m
        return None


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def kebab_case(name: str) -> str:
    """`BlogPost` -> `blog-post`, `HTTPLog` -> `http-log`, `User` -> `user`."""
    return _CAMEL_BOUNDARY.sub("-", name).lower()
