"""The names and words every builder shares (dbsvc/compiler/naming.py), at their own unit:
the generated identifiers, the docstring's origin line and the "expected ..." phrase of
each field type, compared with the texts the guide's error examples show."""

from __future__ import annotations

from dbsvc.compiler.naming import expected, field_list, local, origin, per_field, per_model, snake
from dbsvc.schema import ir, parse_schema

SCHEMA = """\
model BlogPost {
  id int @id
  n int
  f float
  s str
  b bool
  j json
  at datetime
  day date
  u uuid
  e enum(red, green, blue)
}
"""


def _model() -> ir.Model:
    return parse_schema(SCHEMA, "dir/blog.dbs").models[0]


def test_generated_names():
    model = _model()
    title = model.fields[3]
    assert snake(model) == "blog_post"
    assert per_model("validate_create", model) == "validate_create_blog_post"
    assert per_field("check", model, title) == "check_blog_post__s"
    assert local(title) == "_dbsvc_v_s"


def test_the_origin_line_names_the_file_without_its_directory():
    assert origin(parse_schema(SCHEMA, "dir/blog.dbs"), 3, "BlogPost.n") == "Generated from blog.dbs:3 (BlogPost.n)."
    assert origin(ir.Schema(path="", models=()), 1, "x") == "Generated from <schema>:1 (x)."


def test_what_each_type_expects_in_words():
    assert {f.name: expected(f) for f in _model().fields} == {
        "id": "an integer",
        "n": "an integer",
        "f": "a number",
        "s": "a string",
        "b": "a boolean",
        "j": "a JSON value",
        "at": 'an RFC 3339 date-time such as "2024-05-01T12:00:00Z"',
        "day": 'a date such as "2024-05-01" (YYYY-MM-DD)',
        "u": 'a UUID such as "123e4567-e89b-12d3-a456-426614174000"',
        "e": "one of red, green, blue",
    }


def test_a_field_list():
    assert field_list(["a", "b", "c"]) == "a, b, c"
    assert field_list(("a",)) == "a"
    assert field_list([]) == "(none)"
