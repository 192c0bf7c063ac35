"""Parse tree -> checked IR: every rule of docs/guide/schema.md, every error with its place.

The checker never stops at the first problem. Each rule appends a `SchemaError` and the
check goes on with what is still sound (a field of unknown type is left out of the IR,
a bad attribute is ignored), so one run reports everything. Where an error points:

- at a value (an argument, a default, an enum member) when the value is wrong;
- at the `@` of an attribute when the attribute itself is wrong (unknown, repeated,
  wrong argument count, meaningless on this type);
- at the field or model name when the declaration is wrong (name, duplicate, no `@id`).

Literals the lexer already rejected (`LiteralKind.BAD`) are skipped silently.
The IR returned satisfies the invariants listed in `dbsvc.schema.ir` only when no error
was reported; callers must not use it otherwise.
Imports nothing from dbsvc but `dbsvc.errors` and `dbsvc.schema.*`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dbsvc.errors import SchemaError
from dbsvc.schema.ir import (
    ID_TYPES,
    RESERVED_FIELD_NAMES,
    Default,
    Field,
    FieldType,
    Model,
    Projection,
    Rule,
    Schema,
    kebab_case,
)
from dbsvc.schema.rules import RuleChecker
from dbsvc.schema.syntax import Attribute, FieldDecl, LiteralKind, ModelDecl, SchemaFile
from dbsvc.schema.tables import check_tables
from dbsvc.schema.values import (
    BOUNDED_TYPES,
    Bound,
    Problem,
    check_default_bounds,
    convert_bound,
    convert_default,
    is_number,
    shown,
)

MODEL_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")
RESERVED_MODEL_NAMES = frozenset({"None", "True", "False"})  # CapWords, yet Python keywords
TYPES = {t.value: t for t in FieldType}
TYPES_HINT = "int, float, str, bool, json, datetime, date, uuid or enum(...)"

# Flags take no arguments; every other field attribute takes exactly one.
FLAG_ATTRIBUTES = ("id", "unique", "filter", "sort", "search")
FIELD_ATTRIBUTES = ("id", "unique", "filter", "sort", "search", "min", "max", "default", "ref")
MODEL_ATTRIBUTES = ("projection", "allow")


@dataclass(slots=True)
class _FieldFacts:
    """What the field pass learned that later passes need, with places for messages."""

    decl: FieldDecl
    type: FieldType | None
    attrs: dict[str, Attribute] = field(default_factory=dict)


class _Checker:
    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[SchemaError] = []
        self.lost_model = False

    def error(self, message: str, line: int, col: int) -> None:
        self.errors.append(SchemaError(message, line, col, self.path))

    # -- the whole file --------------------------------------------------------------

    def check(self, tree: SchemaFile, source: str) -> Schema:
        runtime, auth = check_tables(tree.tables, self.path, self.errors)
        self.lost_model = tree.lost_model
        first: dict[str, ModelDecl] = {}
        routes: dict[str, ModelDecl] = {}
        for decl in tree.models:
            if decl.name in first:
                self.error(
                    f"duplicate model {decl.name!r}, first declared at line {first[decl.name].line}",
                    decl.line,
                    decl.col,
                )
                continue
            first[decl.name] = decl
            if not MODEL_NAME.fullmatch(decl.name):
                self.error(
                    f"model name {decl.name!r} is not CapWords, expected a capital letter then "
                    "letters and digits, such as 'BlogPost'",
                    decl.line,
                    decl.col,
                )
            elif decl.name in RESERVED_MODEL_NAMES:
                self.error(f"model name {decl.name!r} is a Python keyword, expected another name", decl.line, decl.col)
            elif kebab_case(decl.name) in routes:
                other = routes[kebab_case(decl.name)]
                self.error(
                    f"model {decl.name!r} would be served at '/api/{kebab_case(decl.name)}' like model "
                    f"{other.name!r} (line {other.line}), expected a name with a different route",
                    decl.line,
                    decl.col,
                )
            else:
                routes[kebab_case(decl.name)] = decl
        if not tree.models:
            self.error("the schema declares no models, expected at least one 'model Name { ... }'", 1, 1)
        facts = {name: self.field_facts(decl) for name, decl in first.items()}
        id_types = {name: _id_type(fs) for name, fs in facts.items()}
        models = []
        for name, decl in first.items():
            models.append(self.build_model(decl, facts[name], id_types))
        replicate = self.top_level_rules(tree)
        return Schema(self.path, tuple(models), runtime, auth, source, replicate)

    def top_level_rules(self, tree: SchemaFile) -> tuple[Rule, ...]:
        checker = RuleChecker(self.error, None, {}, ())
        rules = []
        for attr in tree.rules:
            if attr.rule is None:
                self.error(
                    f"unknown top-level attribute '@{attr.name}', expected '@allow(replicate, ...)' "
                    "(field and model attributes go inside a model)",
                    attr.line,
                    attr.col,
                )
                continue
            rule = checker.check(attr.rule)
            if rule is not None:
                rules.append(rule)
        return tuple(rules)

    # -- fields: names, types, attribute shapes ----------------------------------------

    def field_facts(self, model: ModelDecl) -> list[_FieldFacts]:
        seen: dict[str, FieldDecl] = {}
        facts: list[_FieldFacts] = []
        for decl in model.fields:
            self.check_field_name(model, decl, seen)
            type_ = self.check_type(decl)
            fact = _FieldFacts(decl, type_)
            for attr in decl.attributes:
                if self.check_attribute_shape(decl, attr, fact.attrs):
                    fact.attrs[attr.name] = attr
            if decl.name not in seen:
                seen[decl.name] = decl
                facts.append(fact)
        return facts

    def check_field_name(self, model: ModelDecl, decl: FieldDecl, seen: dict[str, FieldDecl]) -> None:
        if decl.name in seen:
            self.error(
                f"duplicate field {decl.name!r} in model {model.name!r}, first declared at line {seen[decl.name].line}",
                decl.line,
                decl.col,
            )
        elif decl.name in RESERVED_FIELD_NAMES:
            self.error(
                f"field name {decl.name!r} is reserved for a query parameter, expected another name "
                f"(reserved: {', '.join(sorted(RESERVED_FIELD_NAMES))})",
                decl.line,
                decl.col,
            )
        elif "__" in decl.name:
            self.error(
                f"field name {decl.name!r} contains '__', expected a name without a double underscore: "
                "query operators are written field__op (score__gte=3), so '__' cannot be part of a field name",
                decl.line,
                decl.col,
            )
        elif not FIELD_NAME.fullmatch(decl.name):
            self.error(
                f"field name {decl.name!r} is not snake_case, expected lower-case letters, digits "
                "and '_', starting with a letter",
                decl.line,
                decl.col,
            )

    def check_type(self, decl: FieldDecl) -> FieldType | None:
        ref = decl.type
        type_ = TYPES.get(ref.name)
        if type_ is None:
            self.error(f"unknown type {ref.name!r} for field {decl.name!r}, expected {TYPES_HINT}", ref.line, ref.col)
            return None
        if type_ is FieldType.ENUM:
            if not ref.members:
                self.error(f"enum of field {decl.name!r} has no members, expected at least one", ref.line, ref.col)
            seen: set[object] = set()
            for member in ref.members:
                if member.value in seen:
                    self.error(
                        f"enum member {member.text!r} of field {decl.name!r} is repeated", member.line, member.col
                    )
                seen.add(member.value)
        return type_

    def check_attribute_shape(self, decl: FieldDecl, attr: Attribute, seen: dict[str, Attribute]) -> bool:
        """Known name, not repeated, right number and kind of arguments. True if usable."""
        name = attr.name
        if name in MODEL_ATTRIBUTES:
            self.error(
                f"@{name} is a model attribute, expected it on its own line in the model body", attr.line, attr.col
            )
            return False
        if name not in FIELD_ATTRIBUTES:
            known = ", ".join("@" + a for a in FIELD_ATTRIBUTES)
            self.error(
                f"unknown attribute '@{name}' on field {decl.name!r}, expected one of {known}", attr.line, attr.col
            )
            return False
        if name in seen:
            self.error(f"duplicate attribute '@{name}' on field {decl.name!r}", attr.line, attr.col)
            return False
        wanted = 0 if name in FLAG_ATTRIBUTES else 1
        if len(attr.args) != wanted:
            takes = "no arguments" if wanted == 0 else "exactly one argument"
            self.error(f"@{name} takes {takes}, got {len(attr.args)}", attr.line, attr.col)
            return False
        if wanted and attr.args[0].kind is LiteralKind.BAD:
            return False
        arg = attr.args[0] if wanted else None
        if name in ("min", "max") and arg is not None and not is_number(arg):
            self.error(f"@{name} expects a number, got {shown(arg)}", arg.line, arg.col)
            return False
        if name == "ref" and arg is not None and arg.kind is not LiteralKind.IDENT:
            self.error(f"@ref expects a model name, got {shown(arg)}", arg.line, arg.col)
            return False
        return True

    # -- one model: field meaning, @id, refs, projections -------------------------------

    def build_model(self, model: ModelDecl, facts: list[_FieldFacts], id_types: dict[str, FieldType | None]) -> Model:
        fields: list[Field] = []
        id_fields: list[_FieldFacts] = []
        for fact in facts:
            if "id" in fact.attrs:
                id_fields.append(fact)
            built = self.build_field(fact, id_types)
            if built is not None:
                fields.append(built)
        if not id_fields and not model.incomplete and not self.id_mentioned(facts):
            self.error(f"model {model.name!r} has no @id field, expected exactly one", model.line, model.col)
        for extra in id_fields[1:]:
            attr = extra.attrs["id"]
            self.error(
                f"model {model.name!r} has a second @id field {extra.decl.name!r} "
                f"(the first is {id_fields[0].decl.name!r}), expected exactly one",
                attr.line,
                attr.col,
            )
        names = [f.decl.name for f in facts]
        projections = self.build_projections(model, names)
        checker = RuleChecker(self.error, model.name, {f.name: f for f in fields}, model.broken + tuple(names))
        rules = []
        for attr in model.attributes:
            if attr.rule is not None:
                rule = checker.check(attr.rule)
                if rule is not None:
                    rules.append(rule)
        return Model(model.name, tuple(fields), projections, model.line, model.col, tuple(rules))

    @staticmethod
    def id_mentioned(facts: list[_FieldFacts]) -> bool:
        """True when some field wrote `@id`, even in a form already reported as wrong."""
        return any(attr.name == "id" for fact in facts for attr in fact.decl.attributes)

    def build_field(self, fact: _FieldFacts, id_types: dict[str, FieldType | None]) -> Field | None:
        decl, type_, attrs = fact.decl, fact.type, fact.attrs
        if type_ is None:
            return None
        name = decl.name
        nullable = decl.type.nullable
        if "id" in attrs:
            at = attrs["id"]
            if type_ not in ID_TYPES:
                self.error(f"@id field {name!r} has type {type_.value!r}, expected int, str or uuid", at.line, at.col)
            if nullable:
                self.error(f"@id field {name!r} cannot be nullable, expected no '?' after its type", at.line, at.col)
        if type_ is FieldType.JSON:
            for flag in ("filter", "sort"):
                if flag in attrs:
                    at = attrs[flag]
                    self.error(
                        f"@{flag} on json field {name!r} is not allowed: json values have no order", at.line, at.col
                    )
            if "unique" in attrs:
                at = attrs["unique"]
                self.error(
                    f"@unique on json field {name!r} is not allowed: json values have no index key", at.line, at.col
                )
        if "search" in attrs and type_ is not FieldType.STR:
            at = attrs["search"]
            self.error(
                f"@search on {type_.value} field {name!r} is not allowed: expected it on a str field "
                "(text search cuts a field's text into words)",
                at.line,
                at.col,
            )
        low, high = self.bound(fact, "min"), self.bound(fact, "max")
        if low is not None and high is not None and low[0] > high[0]:
            arg = attrs["min"].args[0]
            self.error(f"@min({low[1]}) of field {name!r} is above @max({high[1]})", arg.line, arg.col)
        default = None
        token_default = None
        if "default" in attrs and attrs["default"].args[0].kind is LiteralKind.CLAIM:
            token_default = self.token_default(fact)
        elif "default" in attrs:
            default = self.field_default(fact, low, high)
        ref = None
        if "ref" in attrs:
            ref = self.check_ref(fact, id_types)
        members = tuple(str(m.value) for m in decl.type.members)
        return Field(
            name=name,
            type=type_,
            nullable=nullable,
            enum_members=tuple(dict.fromkeys(members)),
            is_id="id" in attrs,
            unique="unique" in attrs,
            filterable="filter" in attrs and type_ is not FieldType.JSON,
            sortable="sort" in attrs and type_ is not FieldType.JSON,
            searchable="search" in attrs and type_ is FieldType.STR,
            min=low[0] if low else None,
            max=high[0] if high else None,
            default=default,
            ref=ref,
            line=decl.line,
            col=decl.col,
            token_default=token_default,
        )

    def token_default(self, fact: _FieldFacts) -> tuple[str, ...] | None:
        """`@default(token.a.b)`: the claim path, unless the field is the `@id`."""
        attr = fact.attrs["default"]
        arg = attr.args[0]
        if "id" in fact.attrs:
            self.error(
                f"@default({arg.text}) on @id field {fact.decl.name!r} is not allowed: a token claim "
                "names a user, not a record",
                arg.line,
                arg.col,
            )
            return None
        assert isinstance(arg.value, tuple)
        return arg.value

    def bound(self, fact: _FieldFacts, which: str) -> Bound | None:
        attr = fact.attrs.get(which)
        if attr is None or fact.type is None:
            return None
        if fact.type not in BOUNDED_TYPES:
            self.error(
                f"@{which} means nothing on {fact.type.value} field {fact.decl.name!r}, "
                "expected it on int, float or str",
                attr.line,
                attr.col,
            )
            return None
        arg = attr.args[0]
        value = convert_bound(which, fact.type, fact.decl.name, arg)
        if isinstance(value, Problem):
            self.error(value, arg.line, arg.col)
            return None
        return value, arg.text

    def field_default(self, fact: _FieldFacts, low: Bound | None, high: Bound | None) -> Default | None:
        attr = fact.attrs["default"]
        arg = attr.args[0]
        assert fact.type is not None
        if "id" in fact.attrs and fact.type is FieldType.INT:
            self.error(
                f"@default on int @id field {fact.decl.name!r} is not allowed: int ids are auto-assigned",
                attr.line,
                attr.col,
            )
            return None
        members = tuple(str(m.value) for m in fact.decl.type.members)
        default = convert_default(fact.type, members, fact.decl.type.nullable, fact.decl.name, arg)
        if isinstance(default, Problem):
            self.error(default, arg.line, arg.col)
            return None
        problem = check_default_bounds(fact.type, fact.decl.name, default, low, high, arg)
        if problem is not None:
            self.error(problem, arg.line, arg.col)
            return None
        return default

    def check_ref(self, fact: _FieldFacts, id_types: dict[str, FieldType | None]) -> str | None:
        arg = fact.attrs["ref"].args[0]
        target = str(arg.value)
        if target not in id_types:
            if self.lost_model:
                return None
            known = ", ".join(sorted(id_types)) or "none"
            self.error(
                f"@ref to unknown model {target!r}, expected one of the declared models ({known})", arg.line, arg.col
            )
            return None
        target_type = id_types[target]
        if target_type is not None and fact.type is not target_type:
            assert fact.type is not None
            self.error(
                f"@ref({target}) on {fact.type.value} field {fact.decl.name!r} does not match the "
                f"{target_type.value} id of model {target!r}, expected type {target_type.value!r}",
                arg.line,
                arg.col,
            )
            return None
        return target

    def build_projections(self, model: ModelDecl, field_names: list[str]) -> tuple[Projection, ...]:
        projections: list[Projection] = []
        seen: dict[str, int] = {}
        for attr in model.attributes:
            if attr.name == "allow":
                continue  # a rule: checked once the fields are built (build_model)
            if attr.name not in MODEL_ATTRIBUTES:
                self.error(
                    f"unknown model attribute '@{attr.name}' in model {model.name!r}, expected "
                    "'@projection' or '@allow' (field attributes go after the field's type)",
                    attr.line,
                    attr.col,
                )
                continue
            projection = self.check_projection(model, attr, field_names, seen)
            if projection is not None:
                projections.append(projection)
        return tuple(projections)

    def check_projection(
        self, model: ModelDecl, attr: Attribute, field_names: list[str], seen: dict[str, int]
    ) -> Projection | None:
        if len(attr.args) < 2:
            self.error(
                f"@projection takes a name and at least one field, got {len(attr.args)} "
                f"argument{'s' if len(attr.args) != 1 else ''}",
                attr.line,
                attr.col,
            )
            return None
        ok = True
        for arg in attr.args:
            if arg.kind is LiteralKind.BAD:
                ok = False
            elif arg.kind is not LiteralKind.IDENT:
                self.error(f"@projection expects names, got {shown(arg)}", arg.line, arg.col)
                ok = False
        if not ok:
            return None
        name_arg, *field_args = attr.args
        name = str(name_arg.value)
        if name in seen:
            self.error(
                f"duplicate projection {name!r} in model {model.name!r}, first declared at line {seen[name]}",
                name_arg.line,
                name_arg.col,
            )
            ok = False
        seen.setdefault(name, attr.line)
        chosen: list[str] = []
        for arg in field_args:
            field_name = str(arg.value)
            if field_name in model.broken:
                ok = False
            elif field_name not in field_names:
                self.error(
                    f"projection {name!r} names unknown field {field_name!r} of model {model.name!r}", arg.line, arg.col
                )
                ok = False
            elif field_name in chosen:
                self.error(f"projection {name!r} repeats field {field_name!r}", arg.line, arg.col)
                ok = False
            else:
                chosen.append(field_name)
        return Projection(name, tuple(chosen), attr.line, attr.col) if ok else None


def _id_type(facts: list[_FieldFacts]) -> FieldType | None:
    """The type of a model's first usable `@id` field, None if it has none (reported elsewhere)."""
    for fact in facts:
        if "id" in fact.attrs and fact.type in ID_TYPES:
            return fact.type
    return None


def check_schema(tree: SchemaFile, source: str, path: str) -> tuple[Schema, list[SchemaError]]:
    """Check the parse tree; the Schema is meaningful only when the error list is empty."""
    checker = _Checker(path)
    schema = checker.check(tree, source)
    return schema, checker.errors
