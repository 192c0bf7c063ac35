"""The two demo schemas under schemas/ parse to the IR the rest of dbsvc expects."""

from __future__ import annotations

from pathlib import Path

from dbsvc.schema import load_schema
from dbsvc.schema.ir import DefaultKind, FieldType

ROOT = Path(__file__).resolve().parents[2]


def test_blog_schema_parses_to_expected_ir() -> None:
    schema = load_schema(ROOT / "schemas" / "blog.dbs")
    assert [m.name for m in schema.models] == ["User", "BlogPost", "Comment"]
    assert schema.runtime.replication is True
    assert schema.runtime.changefeed_capacity == 1024
    assert schema.auth.issuer == "https://id.example.com/"
    assert schema.auth.leeway == 60
    user = schema.model("User")
    assert user is not None
    assert [f.name for f in user.fields] == ["id", "email", "name", "age", "role", "joined", "profile"]
    assert user.id_field.name == "id" and user.id_field.type is FieldType.INT
    email = user.field("email")
    assert email is not None and email.unique and email.filterable and email.max == 254
    age = user.field("age")
    assert age is not None and age.nullable and age.sortable and (age.min, age.max) == (0, 150)
    role = user.field("role")
    assert role is not None and role.enum_members == ("admin", "editor", "reader")
    assert role.default is not None and role.default.value == "reader"
    joined = user.field("joined")
    assert joined is not None and joined.default is not None and joined.default.kind is DefaultKind.NOW
    assert [(p.name, p.fields) for p in user.projections] == [("card", ("id", "name"))]
    post = schema.model("BlogPost")
    assert post is not None and post.kebab == "blog-post"
    author = post.field("author_id")
    assert author is not None and author.ref == "User" and author.filterable
    published = post.field("published")
    assert published is not None and published.default is not None and published.default.value is False


def test_inventory_schema_parses_to_expected_ir() -> None:
    schema = load_schema(ROOT / "schemas" / "inventory.dbs")
    assert [m.name for m in schema.models] == ["Warehouse", "Item", "StockMove"]
    assert schema.runtime.replication is False and schema.runtime.changefeed_capacity == 256
    warehouse, item, move = schema.models
    assert warehouse.id_field.type is FieldType.STR and (warehouse.id_field.min, warehouse.id_field.max) == (2, 16)
    assert item.id_field.type is FieldType.UUID
    assert item.id_field.default is not None and item.id_field.default.kind is DefaultKind.UUID
    unit_price = item.field("unit_price")
    assert unit_price is not None and unit_price.min == 0.0 and isinstance(unit_price.min, float)
    assert [p.name for p in item.projections] == ["stock", "pricing"]
    delta = move.field("delta")
    assert delta is not None and (delta.min, delta.max) == (-100000, 100000)
    item_ref = move.field("item")
    assert item_ref is not None and item_ref.ref == "Item" and item_ref.type is FieldType.UUID
