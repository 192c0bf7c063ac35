"""Names and words shared by the builders: generated identifiers, docstrings, type phrases.

Generated public functions are `<action>_<model>` (`validate_create_blog_post`); per-field
helpers put a double underscore between model and field (`check_blog_post__title`) so a
model `UserEmail` and a field `email` of `User` can never produce the same name. Every
temporary inside generated code starts with `_dbsvc_`, a prefix schema names cannot take.

Imports only `dbsvc.schema.ir` and the standard library.
"""

from __future__ import annotations

import os

from dbsvc.schema.ir import Field, FieldType, Model, Schema, kebab_case

# Alias under which the generated module imports dbsvc.runtime.
RT = "_dbsvc_rt"

# Str ids a record may not take: as a path segment they are the collection or its parent
# (RFC 3986 §5.2.4 removes them), so most clients could never address such a record.
DOT_SEGMENTS = (".", "..")
DOT_SEGMENTS_WHY = "'.' and '..' are path segments, not ids (RFC 3986 §3.3)"


def snake(model: Model) -> str:
    """`BlogPost` -> `blog_post`."""
    return kebab_case(model.name).replace("-", "_")


def per_model(action: str, model: Model) -> str:
    """`validate_create_blog_post`."""
    return f"{action}_{snake(model)}"


def per_field(action: str, model: Model, field: Field) -> str:
    """`check_blog_post__title`."""
    return f"{action}_{snake(model)}__{field.name}"


def local(field: Field) -> str:
    """The local variable holding a field's checked value inside a validator."""
    return f"_dbsvc_v_{field.name}"


def origin(schema: Schema, line: int, what: str) -> str:
    """The docstring naming where a generated function came from."""
    return f"Generated from {os.path.basename(schema.path) or '<schema>'}:{line} ({what})."


def expected(field: Field) -> str:
    """What a valid JSON value of the field looks like, in words (no nullability)."""
    kind = field.type
    if kind is FieldType.INT:
        return "an integer"
    if kind is FieldType.FLOAT:
        return "a number"
    if kind is FieldType.STR:
        return "a string"
    if kind is FieldType.BOOL:
        return "a boolean"
    if kind is FieldType.JSON:
        return "a JSON value"
    if kind is FieldType.DATETIME:
        return 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z"'
    if kind is FieldType.DATE:
        return 'a date such as "2024-05-01" (YYYY-MM-DD)'
    if kind is FieldType.UUID:
        return 'a UUID such as "123e4567-e89b-12d3-a456-426614174000"'
    assert kind is FieldType.ENUM, kind
    return "one of " + ", ".join(field.enum_members)


def field_list(names: list[str] | tuple[str, ...]) -> str:
    """`a, b, c`, or `(none)` for an empty list."""
    return ", ".join(names) if names else "(none)"
