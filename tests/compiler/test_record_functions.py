"""Generated matcher, projections, row decoders, index keys, and the CompiledModel tables."""

from __future__ import annotations

import pytest

from dbsvc.runtime import CompiledModel, identity
from support.mutation import shared


@pytest.fixture(scope=shared("module"))
def user(blog):
    return blog.BY_NAME["User"]


@pytest.fixture(scope=shared("module"))
def post(blog):
    return blog.BY_NAME["BlogPost"]


@pytest.fixture(scope=shared("module"))
def item(inventory):
    return inventory.BY_NAME["Item"]


def make_user(user, **fields):
    return user.validate_create({"email": "a@b.c", "name": "Ann", **fields})


def test_tables_list_models_in_declaration_order(blog):
    assert [m.name for m in blog.MODELS] == ["User", "BlogPost", "Comment"]
    assert list(blog.ROUTES) == ["user", "blog-post", "comment"]
    assert blog.ROUTES["blog-post"] is blog.BY_NAME["BlogPost"] is blog.BLOG_POST_MODEL
    assert all(isinstance(m, CompiledModel) for m in blog.MODELS)


def test_compiled_model_constants(post, item):
    assert post.fields == ("id", "author_id", "title", "body", "published", "score", "tags")
    assert (post.id_field, post.id_type, post.kebab) == ("id", "int", "blog-post")
    assert post.filter_fields == ("author_id", "published", "score")
    assert post.sort_fields == ("title", "score")
    assert post.refs == (("author_id", "User"),)
    assert post.projections == {"summary": ("id", "title", "score")}
    assert item.unique_fields == ("sku",) and item.id_type == "uuid"


def test_module_settings(blog, inventory):
    assert blog.RUNTIME == {"replication": True, "changefeed_capacity": 1024, "replication_retain_mb": 256}
    assert blog.AUTH == {
        "issuer": "https://id.example.com/",
        "audience": "blog",
        "alg": "RS256",
        "tenant_claim": "tenant",
        "leeway": 60,
    }
    assert inventory.AUTH == {} and inventory.RUNTIME["changefeed_capacity"] == 256
    assert blog.SCHEMA_PATH.endswith("blog.dbs")


def test_description_is_describe_schema_output(blog):
    from dbsvc.schema import describe_schema, load_schema

    assert blog.DESCRIPTION == describe_schema(load_schema(blog.SCHEMA_PATH))


def test_keys_cover_id_unique_filter_sort_and_ref_fields(blog, item):
    user, post, comment = blog.MODELS
    assert set(user.keys) == {"id", "email", "name", "age", "role", "joined"}
    assert set(post.keys) == {"id", "author_id", "title", "published", "score"}
    assert set(comment.keys) == {"id", "post_id", "author_id", "created"}
    assert set(item.keys) == {
        "id",
        "sku",
        "warehouse",
        "kind",
        "quantity",
        "unit_price",
        "expires",
        "checked_at",
        "batch",
    }


def test_identity_keys_for_values_that_already_order(user, item):
    assert user.keys["email"] is identity and item.keys["expires"] is identity and item.keys["id"] is identity


def test_datetime_key_is_microseconds_since_epoch(user, item):
    assert user.keys["joined"]("1970-01-01T00:00:01.000002Z") == 1_000_002
    assert user.keys["joined"]("1969-12-31T23:59:59Z") == -1_000_000
    assert item.keys["checked_at"](None) is None


def test_datetime_keys_order_like_instants(user):
    stamps = [
        "0001-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999999Z",
        "1970-01-01T00:00:00Z",
        "2024-05-01T12:00:00Z",
        "2024-05-01T12:00:00.000001Z",
        "9999-12-31T23:59:59.999999Z",
    ]
    keys = [user.keys["joined"](s) for s in stamps]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_float_key_is_float(post):
    assert post.keys["score"](3) == 3.0 and type(post.keys["score"](3)) is float
    assert post.keys["score"](None) is None


def test_match_with_no_filters_passes_everything(user):
    assert user.match(make_user(user), {})


def test_match_ands_fields_and_ors_values(user):
    record = make_user(user, role="editor")
    query = user.parse_list_query([("role", "admin"), ("role", "editor"), ("name", "Ann")])
    assert user.match(record, query.filters)
    query = user.parse_list_query([("role", "admin"), ("name", "Ann")])
    assert not user.match(record, query.filters)


def test_match_compares_typed_values(post, blog):
    record = post.validate_create({"author_id": 1, "title": "t", "body": "b", "score": 3})
    assert post.match(record, post.parse_list_query([("score", "3.0")]).filters)
    assert post.match(record, post.parse_list_query([("score", "3")]).filters)
    assert not post.match(record, post.parse_list_query([("score", "3.5")]).filters)


def test_match_datetime_in_any_offset(item):
    record = item.validate_create(
        {"sku": "abc", "warehouse": "w1", "unit_price": 1, "checked_at": "2024-05-01T12:00:00Z"}
    )
    for text in ["2024-05-01T12:00:00Z", "2024-05-01T13:00:00+01:00", "2024-05-01T02:00:00-10:00"]:
        assert item.match(record, item.parse_feed_query([("checked_at", text)]).filters)
    assert not item.match(record, item.parse_feed_query([("checked_at", "2024-05-01T12:00:00.000001Z")]).filters)


def test_match_null_literal_on_nullable_field(item):
    record = item.validate_create({"sku": "abc", "warehouse": "w1", "unit_price": 1})
    assert item.match(record, item.parse_list_query([("checked_at", "null")]).filters)
    assert item.match(record, item.parse_list_query([("expires", "null"), ("batch", "null")]).filters)
    assert not item.match(record, item.parse_list_query([("expires", "2024-01-01")]).filters)


def test_match_uuid_any_case(item):
    batch = "123e4567-e89b-12d3-a456-426614174abc"
    record = item.validate_create({"sku": "abc", "warehouse": "w1", "unit_price": 1, "batch": batch.upper()})
    assert record["batch"] == batch
    assert item.match(record, item.parse_list_query([("batch", batch.upper())]).filters)


def test_projection_keeps_projection_order(user, item):
    record = make_user(user, id=5)
    assert user.project["card"](record) == {"id": 5, "name": "Ann"}
    stock = item.validate_create({"sku": "abc", "warehouse": "w", "unit_price": 2})
    assert list(item.project["pricing"](stock)) == ["sku", "unit_price"]
    assert list(item.project["stock"](stock)) == ["id", "sku", "quantity"]


def test_decode_rebuilds_the_record(user):
    record = make_user(user, id=5, profile={"x": [1]})
    assert user.decode(list(record.values())) == record
    assert list(user.decode(list(record.values()))) == list(user.fields)
