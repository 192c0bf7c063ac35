"""The read side's builders (compiler/queries.py, operators.py, search.py, expand.py) and the
module's assembly (compiler/module.py) word for word.

The behaviour of the generated parsers is pinned by test_query_parsers.py,
test_query_operators.py, test_search.py and test_expand_parser.py over the demo schemas;
what they cannot see is text they never print and shapes those schemas do not have (a model
without `@sort` fields, a `@ref` to a model without projections, a float `@unique` field's
key). `golden/queries.dbs` has them all: every filter type, nullable and not, `@sort` on
every ordered type, `@search` on a nullable field that is neither `@filter` nor `@sort`, two
projections, `@ref`s to a model with projections, without, and to its own model, a float
`@unique` key, a model with nothing but its id.

- `golden/queries.py.txt` is the source `build_queries` emits for every model of it, reviewed
  by hand and compared byte for byte. It depends on queries.py, operators.py, search.py,
  expand.py, nodes.py and naming.py, never on the validators', rules' or OpenAPI builders.
- `golden/module.py.txt` is the whole module `build_tree` assembles from it (with a given
  description and documents), where each statement another builder makes (validators.py,
  rules.py, and the read side above) stands as one line naming its builder and its first
  line: their order and presence are module.py's, their text the other files'.

After a deliberate change of the emitted code, write both files again and review the diff:
`python tests/compiler/test_queries_mutants.py` (given a directory, it writes there instead;
test_golden_scripts.py runs it so).

The rest are the decisions no emitted text shows: the trees compiled as trees (every
context set), the generated functions run (the id parser's fast path at its 19-digit edge,
the matcher's operator loop on each key kind), and the helpers other builders call
(`operator_params`, `expand_params`, `key_function`, `keyed_fields`, the module header).
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script (below): this tree's dbsvc and tests/support, not an installed tree's
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import pytest

from dbsvc.compiler import compile_schema
from dbsvc.compiler.expand import expand_params
from dbsvc.compiler.module import ApiDocuments, build_tree, model_constant, project_name
from dbsvc.compiler.naming import snake
from dbsvc.compiler.operators import allowed_operators, operator_params
from dbsvc.compiler.queries import build_queries, key_function, keyed_fields
from dbsvc.compiler.rules import build_replicate, build_rules
from dbsvc.compiler.search import search_params, uses_search
from dbsvc.compiler.validators import build_validators
from dbsvc.cursors import encode_cursor
from dbsvc.errors import BadQuery, BadRequest
from dbsvc.schema import parse_schema
from support.mutation import shared

GOLDEN = Path(__file__).resolve().parent / "golden"
SCHEMA = GOLDEN / "queries.dbs"
QUERIES = GOLDEN / "queries.py.txt"
MODULE = GOLDEN / "module.py.txt"
DESCRIPTION = {"described": ["by", "the", "test"]}
DOCUMENTS = ApiDocuments(openapi='{"openapi":"3.1.0"}', asyncapi='{"asyncapi":"3.0.0"}')


def _schema():
    """The golden schema, named by its file name alone (SCHEMA_PATH is in the module text)."""
    return parse_schema(SCHEMA.read_text(encoding="utf-8"), "queries.dbs")


def _queries_source() -> str:
    schema = _schema()
    modules = [ast.Module(body=build_queries(schema, model), type_ignores=[]) for model in schema.models]
    return "\n\n".join(ast.unparse(module) for module in modules) + "\n"


def _module_source() -> str:
    """`build_tree`'s statements, one per paragraph; another builder's statement as one line
    `# <builder>: <its first line>`."""
    schema = _schema()
    others: dict[str, str] = {}
    for model in schema.models:
        for builder, statements in (
            ("validators", build_validators(schema, model)),
            ("queries", build_queries(schema, model)),
            ("rules", build_rules(schema, model)),
        ):
            for statement in statements:
                others[ast.unparse(statement)] = builder
    for statement in build_replicate(schema):
        others[ast.unparse(statement)] = "rules"
    tree = build_tree(schema, DESCRIPTION, "9.9.9", DOCUMENTS)
    parts = []
    for statement in tree.body:
        text = ast.unparse(statement)
        parts.append(f"# {others[text]}: {text.splitlines()[0]}" if text in others else text)
    return "\n".join(parts) + "\n"


def _same(got: str, path: Path) -> None:
    want = path.read_text(encoding="utf-8")
    if got != want:  # the first differing line, not a 1,400-line diff
        for number, (a, b) in enumerate(zip(got.splitlines(), want.splitlines(), strict=False), 1):
            assert a == b, f"{path.name} line {number}"
    assert got == want


def test_the_read_side_of_the_golden_schema_is_the_reviewed_source_byte_for_byte():
    _same(_queries_source(), QUERIES)


def test_the_module_of_the_golden_schema_is_assembled_as_reviewed():
    _same(_module_source(), MODULE)


def test_the_read_side_and_the_module_are_valid_trees_not_only_valid_text():
    """The trees compile as trees (every context and argument list set): the module is
    unparsed first, but a tree that unparse happens to print would break the day it is
    compiled directly."""
    schema = _schema()
    for model in schema.models:
        tree = ast.fix_missing_locations(ast.Module(body=build_queries(schema, model), type_ignores=[]))
        compile(tree, "<queries>", "exec")
    compile(ast.fix_missing_locations(build_tree(schema, DESCRIPTION, "9.9.9", DOCUMENTS)), "<module>", "exec")


@pytest.fixture(scope=shared("module"))
def golden():
    return compile_schema(_schema())


def test_a_generated_cursor_decode_builds_no_dict_and_passes_its_models_constant(golden):
    """`decode_cursor_m` hands `_dbsvc_ops.decode_cursor` the module's `cursor_kinds_m`,
    built once at import, where it built a new kinds dict on every cursor page (issue 36,
    session 23): no map is built in its code, and the constant holds each sort field's kind."""
    for model in _schema().models:
        decode = getattr(golden, f"decode_cursor_{snake(model)}")
        built = {i.opname for i in dis.get_instructions(decode)} & {"BUILD_MAP", "BUILD_CONST_KEY_MAP"}
        assert not built, model.name
        assert f"cursor_kinds_{snake(model)}" in decode.__code__.co_names
    assert golden.cursor_kinds_person["score"] == "f" and golden.cursor_kinds_person["vip"] == "b"
    assert golden.cursor_kinds_bare == {}


# ---------------------------------------------------------------------------------------
# What the generated functions do where no text shows it
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segment", "parsed"),
    [
        ("0", 0),
        ("007", 7),
        ("999999999999999999", 999999999999999999),  # 18 digits: the fast path
        ("9223372036854775807", 9223372036854775807),  # 19 digits: the checked path, in range
        ("-9223372036854775808", -9223372036854775808),
        ("1.0", 1),  # an integral spelling names that integer (runtime.parse_int_id)
    ],
)
def test_an_int_id_is_parsed_on_either_path(golden, segment, parsed):
    assert golden.parse_id_person(segment) == parsed


@pytest.mark.parametrize(
    "segment", ["9223372036854775808", "9999999999999999999", "12345678901234567890", "١٢", "", "+5"]
)
def test_an_int_id_out_of_range_or_not_ascii_digits_is_refused_naming_the_segment(golden, segment):
    with pytest.raises(BadRequest) as info:
        golden.parse_id_person(segment)
    assert info.value.detail == f"invalid id {segment!r}: Person ids are signed 64-bit integers"


def test_str_and_uuid_ids_are_normalized_and_dot_segments_refused(golden):
    assert golden.parse_id_team("Cafe\u0301") == "Caf\u00e9"
    for segment in (".", ".."):
        with pytest.raises(BadRequest) as info:
            golden.parse_id_team(segment)
        assert info.value.detail == (f"invalid id {segment!r}: '.' and '..' are path segments, not ids (RFC 3986 §3.3)")
    assert golden.parse_id_team("...") == "..."
    assert golden.parse_id_tag("123E4567-E89B-12D3-A456-426614174000") == "123e4567-e89b-12d3-a456-426614174000"


def _person(**values):
    record = {
        "id": 1, "name": "Ann", "nick": None, "bio": None, "age": None, "score": 2.5, "rating": None,
        "vip": False, "tier": "basic", "born": None, "seen": "2024-05-01T00:00:00Z", "day": "2024-05-01",
        "badge": "123e4567-e89b-12d3-a456-426614174000", "notes": None,
    }  # fmt: skip
    record.update(values)
    return record


def test_the_matchers_range_loop_keys_floats_and_datetimes_and_never_holds_a_null(golden):
    match = golden.match_person
    q = golden.parse_list_query_person
    born = _person(born="2024-05-01T12:00:00Z")
    # a datetime is compared as its instant, in any offset
    assert match(born, {}, q([("born__gte", "2024-05-01T14:00:00+02:00")]).ranges)
    assert not match(born, {}, q([("born__gt", "2024-05-01T14:00:00+02:00")]).ranges)
    assert match(born, {}, q([("born__lte", "2024-05-01T12:00:00Z")]).ranges)
    assert not match(born, {}, q([("born__lt", "2024-05-01T12:00:00Z")]).ranges)
    # a float's key is a float: an int bound meets it at the same number
    assert match(_person(score=3.0), {}, q([("score__gte", "3")]).ranges)
    assert not match(_person(score=3.0), {}, q([("score__gt", "3")]).ranges)
    assert match(_person(rating=1.5), {}, q([("rating__lt", "2")]).ranges)
    # a null is in no range, high or low
    assert not match(_person(), {}, q([("rating__lt", "2")]).ranges)
    assert not match(_person(), {}, q([("born__gte", "1970-01-01T00:00:00Z")]).ranges)
    # and the null tests
    assert match(_person(), {}, (), q([("rating__null", "true")]).nulls)
    assert not match(_person(rating=1.0), {}, (), q([("rating__null", "true")]).nulls)
    assert match(_person(rating=1.0), {}, (), q([("rating__null", "false")]).nulls)


@pytest.mark.parametrize(
    ("pair", "ranges"),
    [
        (("age__gte", "3.0"), (("age", 3, True, None, True),)),
        (("score__gt", "3"), (("score", 3.0, False, None, True),)),
        (("vip__lt", "true"), (("vip", None, True, True, False),)),
        (("tier__lte", "gold"), (("tier", None, True, "gold", True),)),
        (("born__gt", "2024-05-01T14:00:00+02:00"), (("born", 1714564800000000, False, None, True),)),
        (("day__gte", "2024-05-01"), (("day", "2024-05-01", True, None, True),)),
        (("name__prefix", "Cafe\u0301"), (("name", "Caf\u00e9", True, "Caf\u00ea", False),)),
    ],
)
def test_a_bound_of_each_type_is_the_fields_index_key(golden, pair, ranges):
    got = golden.parse_list_query_person([pair]).ranges
    assert got == ranges
    assert [type(v) for v in got[0]] == [type(v) for v in ranges[0]]  # 3 stays an int, 3.0 a float


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        (("age__gte", "3.5"), "an integer"),
        (("score__gt", "x"), "a number"),
        (("vip__lt", "1"), "a boolean"),
        (("tier__lte", "silver"), "one of basic, gold"),
        (("born__gt", "2024-05-01"), 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z"'),
        (("day__gte", "2024-5-1"), 'a date such as "2024-05-01" (YYYY-MM-DD)'),
        (("nick__lt", "null"), None),  # a bound is never null: "null" is the text null
    ],
)
def test_a_bad_bound_of_each_type_names_the_parameter_and_what_was_expected(golden, pair, expected):
    if expected is None:
        assert golden.parse_list_query_person([pair]).ranges == (("nick", None, True, "null", False),)
        return
    with pytest.raises(BadQuery) as info:
        golden.parse_feed_query_person([pair])
    assert info.value.detail == f"invalid value {pair[1]!r} for {pair[0]!r}: expected {expected}"


@pytest.mark.parametrize(
    ("field", "key", "wrong"),
    [
        ("age", 7, 7.5),  # an int key
        ("born", 1714564800000000, "2024-05-01T12:00:00Z"),  # a datetime's key is an int
        ("score", 2.5, "2.5"),  # a float key
        ("vip", True, 1),  # a bool key
        ("tier", "gold", 1),  # an enum's key is its str
        ("day", "2024-05-01", 20240501),
    ],
)
def test_a_cursor_carries_each_sort_fields_key_kind_and_refuses_another(golden, field, key, wrong):
    sort = ((field, True),)
    pairs = [("sort", f"-{field}"), ("cursor", encode_cursor("Person", sort, [key], 7))]
    assert golden.parse_list_query_person(pairs).cursor == ((key,), 7)
    pairs = [("sort", f"-{field}"), ("cursor", encode_cursor("Person", sort, [wrong], 7))]
    with pytest.raises(BadQuery, match="^malformed cursor "):
        golden.parse_list_query_person(pairs)


def test_a_cursor_names_its_models_id_kind(golden):
    assert golden.parse_list_query_team([("cursor", encode_cursor("Team", (), [], "x"))]).cursor == ((), "x")
    with pytest.raises(BadQuery, match="^malformed cursor "):
        golden.parse_list_query_team([("cursor", encode_cursor("Team", (), [], 7))])
    with pytest.raises(BadQuery, match="^malformed cursor "):
        golden.parse_list_query_person([("cursor", encode_cursor("Person", (), [], "7"))])


def test_the_matchers_filters_read_the_stored_key_of_a_datetime_and_the_value_of_the_rest(golden):
    q = golden.parse_list_query_person
    born = _person(born="2024-05-01T12:00:00Z", vip=True)
    assert golden.match_person(born, q([("born", "2024-05-01T14:00:00+02:00")]).filters)
    assert not golden.match_person(born, q([("born", "2024-05-01T14:00:01+02:00")]).filters)
    assert golden.match_person(born, q([("vip", "true"), ("score", "2.5")]).filters)
    assert not golden.match_person(born, q([("vip", "true"), ("score", "2")]).filters)
    row = golden.PERSON_MODEL.row(born)
    assert golden.passes_person(row, q([("born", "2024-05-01T12:00:00Z"), ("badge", born["badge"].upper())]).filters)
    assert not golden.passes_person(row, q([("day", "2024-05-02")]).filters)


def test_search_is_tested_first_and_only_when_asked(golden):
    q = golden.parse_list_query_person
    ann = _person(name="Ann Lee", bio="paris")
    assert golden.match_person(ann, {}, (), (), q([("search", "par an")]).search)
    assert not golden.match_person(ann, {}, (), (), q([("search", "lyon")]).search)
    assert golden.match_person(ann, {}, (), (), ())
    row = golden.PERSON_MODEL.row(ann)
    assert golden.passes_person(row, {}, q([("search", "lee")]).search)
    assert not golden.passes_person(row, {}, q([("search", "bob")]).search)
    # a search that fails is False even with filters that pass
    assert not golden.match_person(ann, q([("name", "Ann Lee")]).filters, (), (), q([("search", "bob")]).search)


@pytest.mark.parametrize(
    ("parser", "pairs", "detail"),
    [
        (
            "parse_list_query_team",
            [("sort", "-lead")],
            "cannot sort by '-lead'; sortable fields of Team: (none) (prefix - for descending)",
        ),
        (
            "parse_get_query_tag",
            [("expand", "team:only")],
            "unknown projection 'only' in expand 'team:only'; team references Team, Team declares no projections",
        ),
        (
            "parse_get_query_team",
            [("expand", "lead:rev,parent,lead")],
            "expand names 'lead' twice in 'lead:rev,parent,lead'",
        ),
        (
            "parse_list_query_team",
            [("expand", "lead,,parent")],
            "cannot expand ''; @ref fields of Team: lead, deputy, parent (each once, as field or field:projection)",
        ),
        (
            "parse_list_query_bare",
            [("id", "1")],
            "cannot filter on 'id' (not marked @filter); filterable fields of Bare: (none)",
        ),
        (
            "parse_feed_query_bare",
            [("cursor", "x")],
            "'cursor' does not apply to a feed: /subscribe and /live-query have no pages (a live query's Init is the whole result set); allowed: projection, after",
        ),
        ("parse_get_query_bare", [("projection", "card")], "unknown projection 'card'; Bare declares no projections"),
        (
            "parse_list_query_person",
            [("rating", "1")],
            "cannot filter on 'rating' (not marked @filter); filterable fields of Person: name, nick, age, score, vip, tier, born, day, badge",
        ),
    ],
)
def test_the_shapes_only_the_golden_schema_has_are_refused_with_their_details(golden, parser, pairs, detail):
    with pytest.raises(BadQuery) as info:
        getattr(golden, parser)(pairs)
    assert info.value.detail == detail


def test_an_expand_is_parsed_in_the_order_asked_with_its_projection(golden):
    query = golden.parse_get_query_team([("expand", "parent,lead:card,deputy")])
    assert query.expand == (("parent", None), ("lead", "card"), ("deputy", None))
    assert golden.parse_get_query_team([("as_of", "3")]).expand == ()


# ---------------------------------------------------------------------------------------
# The helpers other builders call
# ---------------------------------------------------------------------------------------


def _models():
    schema = _schema()
    return schema, {m.name: m for m in schema.models}


def test_operator_params_are_every_declared_parameter_in_field_order():
    _schema, models = _models()
    got = [(param, field.name, op) for param, field, op in operator_params(models["Person"])]
    want = []
    for field in ("name", "nick", "age", "score", "rating", "vip", "tier", "born", "day"):
        want += [(f"{field}__{op}", field, op) for op in ("gt", "gte", "lt", "lte")]
        if field in ("name", "nick"):
            want.append((f"{field}__prefix", field, "prefix"))
        if field in ("nick", "age", "rating", "born"):
            want.append((f"{field}__null", field, "null"))
    assert got == want
    assert operator_params(models["Team"]) == []  # nullable, but neither @filter nor @sort
    assert operator_params(models["Bare"]) == []
    assert allowed_operators(models["Team"]) == ""


def test_a_nullable_filter_field_without_sort_takes_only_null():
    schema = parse_schema("model M {\n  id int @id\n  a str? @filter\n}\n", "t.dbs")
    model = schema.models[0]
    assert [(p, f.name, op) for p, f, op in operator_params(model)] == [("a__null", "a", "null")]
    assert allowed_operators(model) == "__null on a"


def test_expand_params_list_each_ref_field_then_its_projections():
    schema, models = _models()
    assert expand_params(schema, models["Team"]) == [
        "lead",
        "lead:card",
        "lead:rev",
        "deputy",
        "deputy:card",
        "deputy:rev",
        "parent",
    ]
    assert expand_params(schema, models["Tag"]) == ["team"]
    assert expand_params(schema, models["Person"]) == []


def test_a_ref_naming_no_model_is_the_checkers_bug_said_as_such():
    """The checker refuses `@ref(Ghost)`; an IR that holds one anyway stops the builder with
    the reason, not with a KeyError."""
    schema, models = _models()
    team = models["Team"]
    ghost = dataclasses.replace(
        team, fields=tuple(dataclasses.replace(f, ref="Ghost") if f.name == "lead" else f for f in team.fields)
    )
    with pytest.raises(AssertionError) as info:
        expand_params(schema, ghost)
    assert str(info.value) == "@ref(Ghost) names no model; the checker must refuse it"


def test_search_params_and_uses_search():
    schema, models = _models()
    assert search_params(models["Person"]) == ["search"]
    assert search_params(models["Team"]) == []
    assert uses_search(schema) is True
    plain = parse_schema("model M {\n  id int @id\n  a str @filter\n}\n", "t.dbs")
    assert uses_search(plain) is False


def test_keyed_fields_and_their_key_functions():
    _schema, models = _models()
    person, team = models["Person"], models["Team"]
    assert [f.name for f in keyed_fields(person)] == [
        "id",
        "name",
        "nick",
        "age",
        "score",
        "rating",
        "vip",
        "tier",
        "born",
        "day",
        "badge",
    ]
    assert [f.name for f in keyed_fields(team)] == ["slug", "lead", "deputy", "parent", "size"]
    keys = {f.name: ast.unparse(key_function(person, f)) for f in keyed_fields(person)}
    assert keys["score"] == "key_person__score"
    assert keys["born"] == "_dbsvc_rt.datetime_key"  # takes None itself: no wrapper (storage/followrun.py)
    assert keys["rating"] == "key_person__rating"
    assert keys["name"] == keys["day"] == keys["id"] == "_dbsvc_rt.identity"


def test_the_module_names_of_a_model():
    _schema, models = _models()
    assert model_constant(models["Person"]) == "PERSON_MODEL"
    assert project_name(models["Person"], "card") == "project_person_card"
    blog = parse_schema("model BlogPost { id int @id }\n", "t.dbs")
    assert model_constant(blog.models[0]) == "BLOG_POST_MODEL"


def test_the_header_of_a_schema_without_a_path_or_models():
    """`<schema>` where the schema has no file name, `(none)` where it has no models."""
    schema = parse_schema("model M { id int @id }\n", "")
    header = ast.unparse(build_tree(schema, {}, "1.2.3").body[0])
    assert "Generated by dbsvc 1.2.3 from <schema>." in header
    assert "`dbsvc generate <schema> -o FILE`" in header
    assert "Models: M." in header
    empty = schema.__class__(**{**{f: getattr(schema, f) for f in schema.__dataclass_fields__}, "models": ()})
    tree = build_tree(empty, {}, "1.2.3")
    assert "Models: (none)." in ast.unparse(tree.body[0])


def test_only_a_schema_with_search_fields_imports_the_text_search():
    """search.py: a schema without `@search` fields gets the module it had before text search."""
    plain = parse_schema("model M {\n  id int @id\n  a str @filter @sort\n}\n", "t.dbs")
    assert "dbsvc.textsearch" not in ast.unparse(build_tree(plain, {}, "1.2.3"))
    assert "import dbsvc.textsearch as _dbsvc_words" in ast.unparse(build_tree(_schema(), {}, "1.2.3"))


def test_the_api_documents_default_to_empty_json_objects():
    assert ApiDocuments() == ApiDocuments(openapi="{}", asyncapi="{}")
    schema = parse_schema("model M { id int @id }\n", "t.dbs")
    text = ast.unparse(build_tree(schema, {}, "1.2.3"))
    assert "OPENAPI_JSON = '{}'" in text
    assert "ASYNCAPI_JSON = '{}'" in text


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN  # a directory to write to instead
    (target / QUERIES.name).write_text(_queries_source(), encoding="utf-8")
    (target / MODULE.name).write_text(_module_source(), encoding="utf-8")
    print(
        f"wrote {target / QUERIES.name} and {target / MODULE.name} from the dbsvc in {Path(sys.modules['dbsvc'].__file__).parent}"
    )
