"""Builders of access rules: a model's `@allow` rules -> plain generated functions.

Generated per model `m` with at least one `@allow` (docs/guide/schema.md#access-rules):

- `allow_m__get(record, token)`, `allow_m__create(record, token)`,
  `allow_m__delete(record, token)`, `allow_m__update(record, new, token)`: one `if` per
  rule allowing the operation (rules are OR-ed), `return False` after them (a model with
  rules refuses what no rule allows);
- `scope_m__list(token)`, `scope_m__subscribe(token)`: the read rule partially evaluated
  against the claims (dbsvc.rules.Scope). Each rule is split into OR-ed branches and each
  branch into AND-ed parts: the parts reading only the token are tested once, here; a
  branch with nothing left is EVERYTHING; a part `record.F == token.C` / `record.F in
  token.C` (or with a literal) on an `@filter` field F pins the branch to F's index keys;
  the rest is a test of each record (`where`, and `where_row` on the stored values), a
  closure over the token. `_dbsvc_rules.scope_of` puts the branches together;
- `fill_m__from_token(body, token)` when a field is `@default(token.X)`: sets the field of
  a create body from the claim (403 when the body carries another value, or the claim is
  missing and the field is not nullable);
- the `ModelRules(...)` passed as `rules=` to the model's CompiledModel.

Module level: `allow_replicate(token)` and `REPLICATE_RULE` (it, or None), `RULES` (the
schema has any rule or token default).

Values are compared in their typed form by `dbsvc.rules` helpers (`same`, `differs`,
`ordered`, `member`), so a missing claim is false and kinds never mix (rules 1-2 there): a
datetime field by its index key (microseconds), so instants order as instants; a literal
is converted here, at compile time; a claim compared with a datetime or uuid field is
converted at run time (`_dbsvc_rules.converted`). Every function's docstring quotes its
rules with their lines. Imports only the schema IR, sibling helpers, runtime (for keys of
literals) and the stdlib.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dbsvc.compiler.naming import RT, origin, snake
from dbsvc.compiler.nodes import (
    Stmts,
    and_,
    assign,
    call,
    const,
    dict_,
    dotted,
    expr,
    function,
    if_,
    is_,
    item,
    name,
    not_,
    or_,
    raise_,
    return_,
    set_item,
    subscript,
    tuple_,
)
from dbsvc.compiler.queries import key_function
from dbsvc.runtime import datetime_key
from dbsvc.schema.ir import (
    OPERATIONS,
    AllOf,
    AnyOf,
    ClaimRef,
    Comparison,
    Const,
    Field,
    FieldRef,
    FieldType,
    ListConst,
    Model,
    Negation,
    Operand,
    Rule,
    RuleExpr,
    Schema,
    Truth,
)

RULES_ALIAS = "_dbsvc_rules"  # the generated module's `import dbsvc.rules as _dbsvc_rules`
_PARTS = "_dbsvc_parts"
_VALUE = "_dbsvc_value"
_HELPER = {"==": "same", "!=": "differs", "in": "member"}
# The JSON kinds a claim may have to pin a field of each type (dbsvc.rules.claim_keys).
_KINDS = {
    FieldType.INT: ("int", "float"),
    FieldType.FLOAT: ("int", "float"),
    FieldType.BOOL: ("bool",),
    FieldType.STR: ("str",),
    FieldType.ENUM: ("str",),
    FieldType.DATE: ("str",),
    FieldType.UUID: ("str",),
    FieldType.DATETIME: ("str",),
}
# What turns a claim into a typed value of a field compared with it; the others compare as they are.
_CLAIM_PARSERS = {FieldType.DATETIME: f"{RT}.parse_datetime_key", FieldType.UUID: f"{RT}.parse_uuid"}


def rules_name(action: str, model: Model, operation: str) -> str:
    """`allow_note__get`, `scope_note__list`."""
    return f"{action}_{snake(model)}__{operation}"


def fill_name(model: Model) -> str:
    return f"fill_{snake(model)}__from_token"


def _helper(helper: str, *args: ast.expr) -> ast.Call:
    return call(f"{RULES_ALIAS}.{helper}", *args)


def _claim(path: tuple[str, ...]) -> ast.Call:
    return _helper("claim", name("token"), tuple_(const(step) for step in path))


def _rules_for(model: Model, operation: str) -> list[Rule]:
    return [rule for rule in model.rules if operation in rule.operations]


def _doc(schema: Schema, model: Model, operation: str, rules: list[Rule]) -> str:
    line = rules[0].line if rules else model.line
    head = origin(schema, line, f"{model.name}, {operation}")
    if not rules:
        return head + f"\n\nNo rule allows {operation}: refused."
    quoted = "\n".join(f"line {rule.line}: {rule.text}" for rule in rules)
    both = "\nA rule that does not read `new` is tested on the record before and after the change."
    return f"{head}\n\nAllowed when any of these holds:\n{quoted}" + (both if operation == "update" else "")


# ---------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Subject:
    """How a field reference reads: `record['f']` / `new['f']`, or `row[i]` (stored values).
    `record_as` reads `record.f` from another variable: an update rule that does not mention
    `new` is tested on the record after the change too (`new`, build_allow)."""

    model: Model
    row: bool = False
    record_as: str | None = None

    def field(self, ref: FieldRef) -> ast.expr:
        if self.row:
            position = [f.name for f in self.model.fields].index(ref.field.name)
            return subscript(name("row"), const(position))
        side = self.record_as if self.record_as is not None and ref.side == "record" else ref.side
        return item(side, ref.field.name)


def _typed(operand: Operand, other: Field | None, subject: _Subject) -> ast.expr:
    """An operand in the typed form of the comparison (`other`: the field it meets, if any)."""
    if isinstance(operand, FieldRef):
        value = subject.field(operand)
        if operand.field.type is FieldType.DATETIME and (other is None or other.type is not FieldType.JSON):
            return call(f"{RT}.datetime_key", value)
        return value
    if isinstance(operand, ClaimRef):
        claimed: ast.expr = _claim(operand.path)
        if other is not None and other.type in _CLAIM_PARSERS:
            return _helper("converted", claimed, dotted(_CLAIM_PARSERS[other.type]))
        return claimed
    if isinstance(operand, Const):
        return const(_const_key(operand.value, other))
    assert isinstance(operand, ListConst)
    return tuple_(const(_const_key(v, other)) for v in operand.values)


def _const_key(value: object, other: Field | None) -> object:
    if other is not None and other.type is FieldType.DATETIME and isinstance(value, str):
        return datetime_key(value)
    return value


def _field_of(operand: Operand) -> Field | None:
    return operand.field if isinstance(operand, FieldRef) else None


def _condition(node: RuleExpr, subject: _Subject) -> ast.expr:
    if isinstance(node, AllOf):
        return and_(*(_condition(part, subject) for part in node.parts))
    if isinstance(node, AnyOf):
        return or_(*(_condition(part, subject) for part in node.parts))
    if isinstance(node, Negation):
        return not_(_condition(node.operand, subject))
    if isinstance(node, Truth):
        operand = node.operand
        if isinstance(operand, Const):
            return const(bool(operand.value))
        return _helper("same", _typed(operand, None, subject), const(True))
    assert isinstance(node, Comparison)
    left = _typed(node.left, _field_of(node.right), subject)
    right = _typed(node.right, _field_of(node.left), subject)
    if node.op in _HELPER:
        return _helper(_HELPER[node.op], left, right)
    return _helper("ordered", left, const(node.op), right)


def _reads_side(node: RuleExpr, side: str) -> bool:
    """Whether `node` reads a field of `side` ("record" or "new")."""
    if isinstance(node, (AllOf, AnyOf)):
        return any(_reads_side(part, side) for part in node.parts)
    if isinstance(node, Negation):
        return _reads_side(node.operand, side)
    operands = (node.operand,) if isinstance(node, Truth) else (node.left, node.right)
    return any(isinstance(o, FieldRef) and o.side == side for o in operands)


def _reads_record(node: RuleExpr) -> bool:
    if isinstance(node, (AllOf, AnyOf)):
        return any(_reads_record(part) for part in node.parts)
    if isinstance(node, Negation):
        return _reads_record(node.operand)
    if isinstance(node, Truth):
        return isinstance(node.operand, FieldRef)
    return isinstance(node.left, FieldRef) or isinstance(node.right, FieldRef)


# ---------------------------------------------------------------------------------------
# allow_m__op: one record (two for update)
# ---------------------------------------------------------------------------------------

_PARAMS = {
    "get": ["record", "token"],
    "create": ["record", "token"],
    "delete": ["record", "token"],
    "update": ["record", "new", "token"],
}


def build_allow(schema: Schema, model: Model, operation: str) -> ast.FunctionDef:
    rules = _rules_for(model, operation)
    subject = _Subject(model)
    body: Stmts = []
    for rule in rules:
        if rule.expr is None:
            body.append(return_(const(True)))
            break
        condition = _condition(rule.expr, subject)
        if operation == "update" and not _reads_side(rule.expr, "new"):
            # PostgreSQL's row security without WITH CHECK: the rule holds before and after.
            condition = and_(condition, _condition(rule.expr, _Subject(model, record_as="new")))
        body.append(if_(condition, [return_(const(True))]))
    else:
        body.append(return_(const(False)))
    return function(
        rules_name("allow", model, operation), _PARAMS[operation], _doc(schema, model, operation, rules), body
    )


# ---------------------------------------------------------------------------------------
# scope_m__list / scope_m__subscribe: the token's Scope
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pin:
    field: Field
    keys: ast.expr  # a frozenset of index keys, built once per token


def _pin(model: Model, part: RuleExpr) -> _Pin | None:
    """`record.F == token.C`, `record.F in token.C`, `record.F == "x"`, `record.F in [...]`
    (either side for `==`) with F an `@filter` field: the keys it pins F to."""
    if not isinstance(part, Comparison) or part.op not in ("==", "in"):
        return None
    ref, other = part.left, part.right
    if part.op == "==" and not isinstance(ref, FieldRef):
        ref, other = other, ref
    if not isinstance(ref, FieldRef) or ref.side != "record" or not ref.field.filterable:
        return None
    field = ref.field
    if isinstance(other, ClaimRef):
        convert = dotted(_CLAIM_PARSERS[field.type]) if field.type in _CLAIM_PARSERS else key_function(model, field)
        keys: ast.expr = _helper(
            "claim_keys",
            _claim(other.path),
            tuple_(name(kind) for kind in _KINDS[field.type]),
            convert,
            const(part.op == "in"),
            const(field.nullable),
        )
        return _Pin(field, keys)
    if isinstance(other, Const) and part.op == "==":
        values: tuple[object, ...] = (other.value,)
    elif isinstance(other, ListConst) and part.op == "in":
        values = other.values
    else:
        return None
    literal_keys = [_literal_key(field, value) for value in values]
    return _Pin(field, call("frozenset", tuple_(const(key) for key in literal_keys)))


def _literal_key(field: Field, value: object) -> object:
    """A literal's index key: the same as `CompiledModel.keys[F]` gives for the stored value."""
    if value is None:
        return None
    if field.type is FieldType.DATETIME:
        return _const_key(value, field)
    if field.type is FieldType.FLOAT:
        return float(value)  # type: ignore[arg-type]
    return value


def _branches(rule: Rule) -> list[list[RuleExpr]]:
    """A rule's OR-ed branches, each a list of AND-ed parts (an empty list: always)."""
    if rule.expr is None:
        return [[]]
    branches = rule.expr.parts if isinstance(rule.expr, AnyOf) else (rule.expr,)
    return [list(b.parts) if isinstance(b, AllOf) else [b] for b in branches]


def build_scope(schema: Schema, model: Model, operation: str) -> ast.FunctionDef:
    rules = _rules_for(model, operation)
    body: Stmts = [assign(_PARTS, ast.List(elts=[], ctx=ast.Load()))]
    branches = [parts for rule in rules for parts in _branches(rule)]
    doc = _doc(schema, model, operation, rules) + "\n\nThe token's Scope (dbsvc.rules): what it may see."
    if len(branches) == 1:  # the common case, built straight (no Part, no scope_of)
        return function(rules_name("scope", model, operation), ["token"], doc, _single(model, branches[0]))
    for number, parts in enumerate(branches, 1):
        token_only, pin, on_record = _split(model, parts)
        branch = _branch(model, number, pin, on_record)
        if token_only:
            test = and_(*(_condition(p, _Subject(model)) for p in token_only))
            body.append(if_(test, branch))
            continue
        body += branch
        if pin is None and not on_record:
            break  # EVERYTHING returned: later branches are unreachable
    body.append(return_(_helper("scope_of", name(_PARTS))))
    return function(rules_name("scope", model, operation), ["token"], doc, body)


def _split(model: Model, parts: list[RuleExpr]) -> tuple[list[RuleExpr], _Pin | None, list[RuleExpr]]:
    """A branch's parts: (those reading only the token, the first pin, the record tests left)."""
    token_only = [p for p in parts if not _reads_record(p)]
    on_record = [p for p in parts if _reads_record(p)]
    for index, candidate in enumerate(on_record):
        pin = _pin(model, candidate)
        if pin is not None:
            return token_only, pin, on_record[:index] + on_record[index + 1 :]
    return token_only, None, on_record


def _single(model: Model, parts: list[RuleExpr]) -> Stmts:
    """The body of a scope function whose rules make one branch: the Scope built directly."""
    token_only, pin, tests = _split(model, parts)
    body: Stmts = []
    if token_only:
        test = and_(*(_condition(p, _Subject(model)) for p in token_only))
        body.append(if_(not_(test), [return_(dotted(f"{RULES_ALIAS}.NOTHING"))]))
    if pin is None and not tests:
        return body + [return_(dotted(f"{RULES_ALIAS}.EVERYTHING"))]
    arguments: dict[str, ast.expr] = {}
    if tests:
        body += _where_functions(model, 1, tests)
        arguments["where"] = name("_dbsvc_where_1")
        arguments["where_row"] = name("_dbsvc_where_row_1")
    if pin is not None:
        keys = "_dbsvc_keys"
        body += [assign(keys, pin.keys), if_(not_(name(keys)), [return_(dotted(f"{RULES_ALIAS}.NOTHING"))])]
        arguments = {
            "field": const(pin.field.name),
            "keys": name(keys),
            "key": key_function(model, pin.field),
            **arguments,
        }
    return body + [return_(call(f"{RULES_ALIAS}.Scope", **arguments))]


def _where_functions(model: Model, number: int, tests: list[RuleExpr]) -> Stmts:
    """`_dbsvc_where_N(record)` and `_dbsvc_where_row_N(row)`: a branch's record tests,
    closures over the enclosing call's token."""
    doc = "The record-side parts of this branch (the token is the enclosing call's)."
    record_test = and_(*(_condition(p, _Subject(model)) for p in tests))
    row_test = and_(*(_condition(p, _Subject(model, row=True)) for p in tests))
    return [
        function(f"_dbsvc_where_{number}", ["record"], doc, [return_(record_test)]),
        function(
            f"_dbsvc_where_row_{number}", ["row"], doc.replace("record-side", "stored values'"), [return_(row_test)]
        ),
    ]


def _branch(model: Model, number: int, pin: _Pin | None, tests: list[RuleExpr]) -> Stmts:
    """What one branch adds once its token-only parts hold: EVERYTHING, or a Part."""
    if pin is None and not tests:
        return [return_(dotted(f"{RULES_ALIAS}.EVERYTHING"))]
    out: Stmts = []
    arguments: dict[str, ast.expr] = {}
    if tests:
        out += _where_functions(model, number, tests)
        arguments["where"] = name(f"_dbsvc_where_{number}")
        arguments["where_row"] = name(f"_dbsvc_where_row_{number}")
    if pin is not None:
        position = [f.name for f in model.fields].index(pin.field.name)
        arguments["field"] = const(pin.field.name)
        arguments["position"] = const(position)
        arguments["keys"] = pin.keys
        arguments["key"] = key_function(model, pin.field)
    out.append(expr(call(ast.Attribute(value=name(_PARTS), attr="append", ctx=ast.Load()), _helper_part(arguments))))
    return out


def _helper_part(arguments: dict[str, ast.expr]) -> ast.Call:
    return call(f"{RULES_ALIAS}.Part", **arguments)


# ---------------------------------------------------------------------------------------
# fill_m__from_token, the ModelRules, the module constants
# ---------------------------------------------------------------------------------------


def build_fill(schema: Schema, model: Model) -> ast.FunctionDef | None:
    fields = [f for f in model.fields if f.token_default]
    if not fields:
        return None
    # A body that is not an object is left to validate_create_m, which says so.
    body: Stmts = [if_(not_(call("isinstance", name("body"), name("dict"))), [return_(const(None))])]
    lines = []
    for f in fields:
        assert f.token_default is not None
        claim_text = "token." + ".".join(f.token_default)
        lines.append(f"line {f.line}: {f.name} @default({claim_text})")
        if f.nullable:
            missing: Stmts = [assign(_VALUE, const(None))]
        else:
            missing = [
                raise_(
                    call(
                        "Forbidden",
                        const(
                            f"the token has no claim {'.'.join(f.token_default)!r}, which sets field {f.name!r} "
                            f"of {model.name} (@default({claim_text})), expected a token carrying it"
                        ),
                    )
                )
            ]
        carries_other = and_(
            ast.Compare(left=const(f.name), ops=[ast.In()], comparators=[name("body")]),
            not_(_helper("same", item("body", f.name), name(_VALUE))),
        )
        body += [
            assign(_VALUE, _claim(f.token_default)),
            if_(is_(name(_VALUE), dotted(f"{RULES_ALIAS}.MISSING")), missing),
            if_(
                carries_other,
                [
                    raise_(
                        call(
                            "Forbidden",
                            const(
                                f"field {f.name!r} of {model.name} is set from the token's claim "
                                f"{'.'.join(f.token_default)!r} (@default({claim_text})), expected the body to "
                                "omit it or carry the same value"
                            ),
                        )
                    )
                ],
            ),
            set_item("body", const(f.name), name(_VALUE)),
        ]
    doc = origin(schema, fields[0].line, model.name) + "\n\nSets from the token, on create:\n" + "\n".join(lines)
    return function(fill_name(model), ["body", "token"], doc, body)


def build_rules(schema: Schema, model: Model) -> Stmts:
    """Every rule function of one model (none for a model without rules or token defaults)."""
    out: Stmts = []
    if model.rules:
        for operation in OPERATIONS:
            if operation in ("list", "subscribe"):
                out.append(build_scope(schema, model, operation))
            else:
                out.append(build_allow(schema, model, operation))
    fill = build_fill(schema, model)
    if fill is not None:
        out.append(fill)
    return out


def model_rules_arguments(model: Model) -> dict[str, ast.expr]:
    """The CompiledModel arguments `rules=` and `fill_from_token=`, where the model has them."""
    arguments: dict[str, ast.expr] = {}
    if model.rules:
        functions = {
            op: name(rules_name("scope" if op in ("list", "subscribe") else "allow", model, op)) for op in OPERATIONS
        }
        text = {op: " or ".join(rule.text for rule in _rules_for(model, op)) for op in OPERATIONS}
        arguments["rules"] = call(
            f"{RULES_ALIAS}.ModelRules", **functions, text=dict_([(const(k), const(v)) for k, v in text.items()])
        )
    if any(f.token_default for f in model.fields):
        arguments["fill_from_token"] = name(fill_name(model))
    return arguments


def build_replicate(schema: Schema) -> Stmts:
    """`allow_replicate(token)` (when the schema has a replicate rule), `REPLICATE_RULE`, `RULES`."""
    out: Stmts = []
    rules = list(schema.replicate_rules)
    if rules:
        body: Stmts = []
        for rule in rules:
            if rule.expr is None:
                body.append(return_(const(True)))
                break
            body.append(if_(_condition(rule.expr, _Subject(schema.models[0])), [return_(const(True))]))
        else:
            body.append(return_(const(False)))
        quoted = "\n".join(f"line {rule.line}: {rule.text}" for rule in rules)
        doc = origin(schema, rules[0].line, "replicate") + f"\n\nMay this token replicate? Any of:\n{quoted}"
        out.append(function("allow_replicate", ["token"], doc, body))
    out.append(assign("REPLICATE_RULE", name("allow_replicate") if rules else const(None)))
    out.append(assign("RULES", const(schema.has_rules)))
    return out
