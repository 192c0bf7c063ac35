"""The Python client's types: a TypedDict per record, projection, body and query.

Per model, in the generated module (python.py draws the whole)::

    UserSort = Literal['name', '-name', ...]         the `sort` keys (a model with @sort fields)
    UserExpand = Literal['author_id', ...]           the `expand` choices (a model with @ref fields)
    class User(TypedDict)                            a whole record, fields in declaration order
    class UserCard(TypedDict)                        each projection, in its order
    class UserCreate(TypedDict)                      POST's body: required fields required
    class UserReplace(TypedDict)                     PUT's body: the id may be left out
    class UserPatch(TypedDict, total=False)          PATCH's body: any field
    class UserQuery(TypedDict, total=False)          what list() takes: filters, operators,
                                                     search, sort, limit, offset, cursor,
                                                     as_of, expand
    class UserFeedQuery(TypedDict, total=False)      what subscribe() and live_query() take
    USER_SPEC = QuerySpec(...)                       the same keys, checked at run time

Value types: int, float, bool; str for str, datetime (RFC 3339 text), date and uuid;
`Literal[...]` for an enum; `Any` for json; `| None` when nullable. A filter takes one value
or a sequence of them (any of; `None` in the sequence asks for null); a `@ref` field of a body may be `OpRef` inside a batch. A
record a `@ref` model returns may carry `_expand` (NotRequired). A TypedDict whose keys are
not all identifiers (a field named `class`) is written in the functional form.

Imports the client model only.
"""

from __future__ import annotations

import keyword

from dbsvc.clients.model import ClientField, ClientModel, ClientSchema

# A feed method's own keywords: a field named like one is passed as `name_` (as a keyword is).
OWN_KEYWORDS = frozenset({"self", "handler", "on_change", "on_reset", "on_error"})


class Lines:
    """The generated text, line by line, with indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str = "", indent: int = 0) -> None:
        self.lines.append(("    " * indent + line) if line else "")

    def extend(self, lines: list[str], indent: int = 0) -> None:
        for line in lines:
            self.add(line, indent)

    def blank(self) -> None:
        self.lines.append("")

    def text(self) -> str:
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def kwarg(name: str) -> str:
    """The Python keyword argument standing for a field or operator parameter `name`."""
    return f"{name}_" if keyword.iskeyword(name) or name in OWN_KEYWORDS else name


def scalar(field: ClientField) -> str:
    if field.kind == "int":
        return "int"
    if field.kind == "float":
        return "float"
    if field.kind == "bool":
        return "bool"
    if field.kind == "json":
        return "Any"
    if field.kind == "enum":
        return f"Literal[{', '.join(repr(m) for m in field.members)}]"
    return "str"


def value_type(field: ClientField) -> str:
    base = scalar(field)
    return f"{base} | None" if field.nullable and base != "Any" else base


def id_type(model: ClientModel) -> str:
    return "int" if model.id_field.kind == "int" else "str"


def emit_typed_dict(out: Lines, name: str, doc: str, entries: list[tuple[str, str]], total: bool = True) -> None:
    """`class name(TypedDict)`, or the functional form when a key is not an identifier."""
    if all(key.isidentifier() and not keyword.iskeyword(key) for key, _ in entries):
        out.add(f"class {name}(TypedDict{'' if total else ', total=False'}):")
        out.add(f'"""{doc}"""', 1)
        if entries:
            out.blank()
        for key, annotation in entries:
            out.add(f"{key}: {annotation}", 1)
    else:
        out.add(f"{name} = TypedDict(")
        out.add(f"{name!r},", 1)
        out.add("{", 1)
        for key, annotation in entries:
            out.add(f"{key!r}: {annotation},", 2)
        out.add("}," if total else "},", 1)
        if not total:
            out.add("total=False,", 1)
        out.add(")")
        out.add(f"# {doc}")
    out.blank()
    out.blank()


def emit_problems(out: Lines, schema: ClientSchema) -> None:
    """One ApiError subclass per problem code the server answers with, and PROBLEM_CLASSES."""
    for problem in schema.problems:
        out.add(f"class {problem.class_name}(ApiError):")
        out.add(f'"""{problem.status} `{problem.code}` (docs/guide/errors.md)."""', 1)
        out.blank()
        out.add(f"code = {problem.code!r}", 1)
        out.blank()
        out.blank()
    out.add("PROBLEM_CLASSES.update(")
    out.add("{", 1)
    for problem in schema.problems:
        out.add(f"{problem.code!r}: {problem.class_name},", 2)
    out.add("}", 1)
    out.add(")")
    out.blank()
    out.blank()


def record_entries(model: ClientModel, fields: tuple[ClientField, ...]) -> list[tuple[str, str]]:
    entries = [(f.name, value_type(f)) for f in fields]
    if model.expands:
        entries.append(("_expand", "NotRequired[dict[str, Any]]"))
    return entries


def body_type(field: ClientField) -> str:
    """A field's type in a write body: a `@ref` may be an earlier batch op's `OpRef`."""
    return f"{value_type(field)} | OpRef" if field.ref else value_type(field)


def emit_types(out: Lines, schema: ClientSchema, model: ClientModel) -> None:
    where = f"{schema.source}:{model.line} ({model.name})"
    if model.sorts:
        keys = [key for f in model.sorts for key in (f.name, f"-{f.name}")]
        out.add(f"{model.type('Sort')} = Literal[{', '.join(repr(k) for k in keys)}]")
    if model.expands:
        choices = [c for e in model.expands for c in e.choices]
        out.add(f"{model.type('Expand')} = Literal[{', '.join(repr(c) for c in choices)}]")
    out.add(f"{model.type('Id')} = {id_type(model)}")
    out.blank()
    out.blank()
    emit_typed_dict(
        out, model.type_name, f"A whole {model.name} record ({where}).", record_entries(model, model.fields)
    )
    for projection in model.projections:
        emit_typed_dict(
            out,
            projection.type_name,
            f"{model.name} under projection {projection.name!r} ({where}).",
            record_entries(model, projection.fields),
        )
    create = []
    replace = []
    for f in model.fields:
        required = f.on_create == "required"
        create.append((f.name, body_type(f) if required else f"NotRequired[{body_type(f)}]"))
        replace.append((f.name, body_type(f) if required and not f.is_id else f"NotRequired[{body_type(f)}]"))
    emit_typed_dict(out, model.type("Create"), f"The body of a {model.name} create (POST).", create)
    emit_typed_dict(out, model.type("Replace"), f"The body of a {model.name} replace (PUT).", replace)
    patch = [(f.name, body_type(f)) for f in model.fields]
    emit_typed_dict(out, model.type("Patch"), f"The body of a {model.name} merge (PATCH).", patch, total=False)
    feed = feed_entries(model)
    listing = list_entries(model, feed)
    emit_typed_dict(
        out, model.type("Query"), f"What a {model.name} list takes (docs/guide/queries.md).", listing, False
    )
    emit_typed_dict(out, model.type("FeedQuery"), f"What a {model.name} feed takes.", feed, total=False)
    emit_spec(out, model, listing, feed)


def feed_entries(model: ClientModel) -> list[tuple[str, str]]:
    # one value, or several (any of them); None alone is "not given", None in a list is null
    entries = [(kwarg(f.name), f"{scalar(f)} | Sequence[{value_type(f)}]") for f in model.filters]
    for op in model.operators:
        if op.op == "null":
            entries.append((kwarg(op.key), "bool"))
        elif op.op == "prefix":
            entries.append((kwarg(op.key), "str"))
        else:
            entries.append((kwarg(op.key), scalar(op.field)))
    if model.searchable:
        entries.append(("search", "str"))
    return entries


def list_entries(model: ClientModel, feed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    entries = list(feed)
    if model.sorts:
        entries.append(("sort", f"{model.type('Sort')} | Sequence[{model.type('Sort')}]"))
    entries += [("limit", "int"), ("offset", "int"), ("cursor", "str"), ("as_of", "int")]
    if model.expands:
        entries.append(("expand", f"{model.type('Expand')} | Sequence[{model.type('Expand')}]"))
    return entries


def spec_name(model: ClientModel) -> str:
    return f"{model.type_name}_SPEC"


def emit_spec(out: Lines, model: ClientModel, listing: list[tuple[str, str]], feed: list[tuple[str, str]]) -> None:
    names = [f.name for f in model.filters] + [op.key for op in model.operators]
    renamed = {kwarg(n): n for n in names if kwarg(n) != n}
    unkeyed = [p.name for p in model.projections if model.id_field not in p.fields]
    out.add(f"{spec_name(model)} = QuerySpec(")
    out.add(f"model={model.name!r},", 1)
    out.add(f"kebab={model.kebab!r},", 1)
    out.add(f"id_field={model.id_field.name!r},", 1)
    out.add(f"list_keys=frozenset({sorted(k for k, _ in listing)!r}),", 1)
    out.add(f"feed_keys=frozenset({sorted(k for k, _ in feed)!r}),", 1)
    out.add(f"renamed={renamed!r},", 1)
    out.add(f"unkeyed=frozenset({unkeyed!r}),", 1)
    out.add(")")
    out.blank()
    out.blank()
