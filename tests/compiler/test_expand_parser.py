"""The generated `expand` parser (compiler/expand.py): what it accepts, in what form, and the
exact detail of every refusal (docs/guide/queries.md, "Embedded references")."""

from __future__ import annotations

import pytest

from dbsvc.compiler import generate_source
from dbsvc.errors import BadQuery
from dbsvc.schema import parse_schema

SCHEMA = """
model Person {
  id    int  @id
  name  str
  @projection(card, id, name)
  @projection(tiny, id)
}

model Tag {
  id    str  @id
}

model Post {
  id      int   @id
  author  int   @ref(Person) @filter
  editor  int?  @ref(Person)
  tag     str?  @ref(Tag)
  title   str   @sort
  @projection(short, id, title)
}
"""

REFUSAL = "cannot expand {!r}; @ref fields of Post: author, editor, tag (each once, as field or field:projection)"


@pytest.fixture
def module(compile_text):
    return compile_text(SCHEMA)


def bad(parse, pairs) -> str:
    with pytest.raises(BadQuery) as caught:
        parse(pairs)
    return str(caught.value)


def test_expand_parses_to_fields_and_projections_in_the_order_asked(module):
    post = module.BY_NAME["Post"]
    query = post.parse_list_query([("expand", "tag,author:card,editor:tiny"), ("sort", "title")])
    assert query.expand == (("tag", None), ("author", "card"), ("editor", "tiny"))
    assert query.sort == (("title", False),)
    assert post.parse_get_query([("expand", "author")]).expand == (("author", None),)
    assert post.parse_get_query([("projection", "short")]).expand == ()
    assert post.parse_list_query([]).expand == ()


@pytest.mark.parametrize("value", ["title", "id", "nope", "", "author.name", " author", "Author"])
def test_only_ref_fields_expand_and_the_detail_lists_them(module, value):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_list_query, [("expand", value)]) == REFUSAL.format(value)
    assert bad(post.parse_get_query, [("expand", value)]) == REFUSAL.format(value)


def test_an_empty_part_is_refused_by_name(module):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_list_query, [("expand", "author,,tag")]) == REFUSAL.format("")


def test_an_unknown_projection_names_the_referenced_models_projections(module):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_get_query, [("expand", "author:short")]) == (
        "unknown projection 'short' in expand 'author:short'; author references Person, projections of Person: card, tiny"
    )
    assert bad(post.parse_list_query, [("expand", "editor:")]) == (
        "unknown projection '' in expand 'editor:'; editor references Person, projections of Person: card, tiny"
    )
    assert bad(post.parse_list_query, [("expand", "tag:card")]) == (
        "unknown projection 'card' in expand 'tag:card'; tag references Tag, Tag declares no projections"
    )


def test_a_field_named_twice_or_expand_given_twice_is_refused(module):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_list_query, [("expand", "author,author:card")]) == (
        "expand names 'author' twice in 'author,author:card'"
    )
    assert bad(post.parse_get_query, [("expand", "author"), ("expand", "tag")]) == "'expand' given more than once"


def test_a_model_without_refs_refuses_expand_and_does_not_list_it(module):
    person = module.BY_NAME["Person"]
    detail = "cannot expand 'x': Person has no @ref fields (expand embeds the record a @ref field points to)"
    assert bad(person.parse_list_query, [("expand", "x")]) == detail
    assert bad(person.parse_get_query, [("expand", "x")]) == detail
    assert bad(person.parse_get_query, [("nope", "1")]) == "unknown query parameter 'nope'; allowed: projection, as_of"


def test_the_unknown_parameter_detail_lists_expand_where_the_model_has_refs(module):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_get_query, [("nope", "1")]) == (
        "unknown query parameter 'nope'; allowed: projection, as_of, expand"
    )
    assert "; sort, limit, offset, cursor, projection, as_of, expand; " in bad(post.parse_list_query, [("nope", "1")])


def test_feeds_do_not_take_expand(module):
    post = module.BY_NAME["Post"]
    assert bad(post.parse_feed_query, [("expand", "author")]).startswith("unknown query parameter 'expand'; ")


def test_dbsvc_generate_shows_the_expand_parser_with_the_declared_names():
    source = generate_source(parse_schema(SCHEMA, "test.dbs"))
    start = source.index("def parse_expand_post(text):")
    parser = source[start : source.index("\ndef ", start + 1)]
    assert "if _dbsvc_field == 'author':" in parser
    assert "elif _dbsvc_field == 'editor':" in parser
    assert "elif _dbsvc_field == 'tag':" in parser
    assert (
        "_dbsvc_projection not in {'card', 'tiny'}" in parser or "_dbsvc_projection not in {'tiny', 'card'}" in parser
    )
    assert "def parse_expand_person" not in source  # no @ref fields: no parser


def test_a_field_may_not_be_named_expand():
    """A `@filter` field named `expand` would take the parameter from the expand branch."""
    from dbsvc.schema import SchemaErrors

    with pytest.raises(SchemaErrors) as caught:
        parse_schema("model M {\n  id int @id\n  expand str @filter\n}\n", "m.dbs")
    assert "field name 'expand' is reserved for a query parameter" in str(caught.value.errors[0])
