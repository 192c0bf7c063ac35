"""The AsyncAPI document: a closed AsyncAPI 3.0.0 document for both demo schemas, whose
message schemas accept the frames the service really sends and refuse malformed ones.

No PyPI package ships the official AsyncAPI 3.0 JSON Schema, so the structure is checked
here: every channel, every message with a payload, every `$ref` resolving, every operation
naming messages of its own channel, and the payloads validated with `jsonschema` (draft 7,
the base of the AsyncAPI Schema Object) against real events.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from dbsvc import __version__
from dbsvc.cli import main
from dbsvc.compiler import compile_schema
from dbsvc.compiler.asyncapi import CLOSE_CODES, build_asyncapi
from dbsvc.compiler.openapi import build_openapi
from dbsvc.schema import load_schema, parse_schema
from dbsvc.storage.events import ChangeEvent, EventKind
from support.documents import refs, resolve
from support.mutation import shared

ROOT = Path(__file__).resolve().parents[2]
BLOG = ROOT / "schemas" / "blog.dbs"
INVENTORY = ROOT / "schemas" / "inventory.dbs"
BOTH = pytest.mark.parametrize("path", [BLOG, INVENTORY], ids=["blog", "inventory"])
COMPONENT_KEY = re.compile(r"^[\w\d.\-_]+$")  # AsyncAPI 3.0 components, fixed fields

# A create body per model of the demo schemas; the generated validators fill in the rest.
BODIES: dict[str, dict[str, Any]] = {
    "User": {"email": "a@b.c", "name": "Ada"},
    "BlogPost": {"author_id": 1, "title": "t", "body": "b", "score": 1.5},
    "Comment": {"post_id": 1, "author_id": 1, "body": "nice"},
    "Warehouse": {"code": "W1", "city": "Oslo", "opened": "2024-01-02"},
    "Item": {"sku": "abc", "warehouse": "W1", "unit_price": 2},
    "StockMove": {"item": "0b6e2c1e-7f3a-4c55-9d2e-6a1b8c0d4e07", "delta": -3},
}


def _document(path: Path) -> dict:
    return build_asyncapi(load_schema(str(path)))


@pytest.fixture(scope=shared("module"))
def blog_doc() -> dict:
    return _document(BLOG)


@pytest.fixture(scope=shared("module"))
def inventory_doc() -> dict:
    return _document(INVENTORY)


def _validator(doc: dict, pointer: str) -> Draft7Validator:
    """A draft-7 validator of the schema at `pointer`, its `$ref`s resolved in `doc`."""
    registry = Registry().with_resource("urn:asyncapi", Resource.from_contents(doc, DRAFT7))
    return Draft7Validator(
        {"$ref": "urn:asyncapi" + pointer}, registry=registry, format_checker=Draft7Validator.FORMAT_CHECKER
    )


def _payload(doc: dict, message: str) -> Draft7Validator:
    return _validator(doc, f"#/components/messages/{message}/payload")


def _records(path: Path) -> dict[str, dict]:
    """One valid stored record per model, made by the generated validators."""
    module = compile_schema(load_schema(str(path)))
    out = {}
    for name, compiled in module.BY_NAME.items():
        record = compiled.validate_create(dict(BODIES[name]))
        if record[compiled.id_field] is None:  # an auto int id: storage assigns it
            record[compiled.id_field] = 1
        out[name] = record
    return out


def _wire(kind: EventKind, model: str, record: dict, id_field: str, previous: dict | None = None) -> dict:
    event = ChangeEvent(kind, model, 41, 12, record[id_field], record, previous)
    return json.loads(event.payload())


# ---------------------------------------------------------------- the document as a whole


@BOTH
def test_document_is_asyncapi_3_0_0_with_the_package_version(path: Path) -> None:
    doc = _document(path)
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["version"] == __version__
    assert doc["info"]["title"] == f"{path.stem} realtime"
    assert doc["defaultContentType"] == "application/json"


@BOTH
def test_document_is_deterministic_json(path: Path) -> None:
    assert json.dumps(_document(path)) == json.dumps(_document(path))


def test_one_ws_server_at_the_default_address(blog_doc: dict) -> None:
    (server,) = blog_doc["servers"].values()
    assert (server["host"], server["protocol"]) == ("127.0.0.1:3000", "ws")


def test_server_security_offers_the_header_and_the_subprotocols(blog_doc: dict) -> None:
    schemes = [resolve(blog_doc, r["$ref"]) for r in blog_doc["servers"]["local"]["security"]]
    assert schemes[0] == {**schemes[0], "type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    assert schemes[1] == {**schemes[1], "type": "httpApiKey", "in": "header", "name": "Sec-WebSocket-Protocol"}
    assert "`bearer.<JWT>`" in schemes[1]["description"]
    assert "`Sec-WebSocket-Protocol: bearer`" in schemes[1]["description"]


@BOTH
def test_every_ref_resolves(path: Path) -> None:
    doc = _document(path)
    pointers = refs(doc)
    assert len(pointers) > 50
    for pointer in pointers:
        resolve(doc, pointer)


@BOTH
def test_component_keys_follow_the_asyncapi_pattern(path: Path) -> None:
    doc = _document(path)
    for kind in ("schemas", "messages", "securitySchemes"):
        for key in doc["components"][kind]:
            assert COMPONENT_KEY.match(key), (kind, key)


@BOTH
def test_every_component_schema_is_a_valid_draft_7_schema(path: Path) -> None:
    doc = _document(path)
    for schema in doc["components"]["schemas"].values():
        Draft7Validator.check_schema(schema)


def test_channels_are_one_feed_and_one_live_query_per_model_plus_replicate(blog_doc: dict) -> None:
    addresses = [c["address"] for c in blog_doc["channels"].values()]
    assert addresses == [
        "/subscribe/user",
        "/live-query/user",
        "/subscribe/blog-post",
        "/live-query/blog-post",
        "/subscribe/comment",
        "/live-query/comment",
        "/replicate",
        "/replicate/snapshot",
    ]


@BOTH
def test_every_channel_has_a_get_ws_binding_and_messages(path: Path) -> None:
    doc = _document(path)
    for key, channel in doc["channels"].items():
        ws = channel["bindings"]["ws"]
        assert (ws["method"], ws["bindingVersion"]) == ("GET", "0.1.0"), key
        assert ws["query"]["type"] == "object" and "properties" in ws["query"], key
        assert set(ws["headers"]["properties"]) == {"Authorization", "Sec-WebSocket-Protocol"}, key
        assert channel["messages"], key


@BOTH
def test_every_message_has_a_payload_name_and_content_type(path: Path) -> None:
    doc = _document(path)
    messages = doc["components"]["messages"]
    for key, message in messages.items():
        assert message["payload"], key
        resolve(doc, message["payload"]["$ref"])
        assert message["contentType"] in ("application/json", "application/octet-stream"), key
    names = [m["name"] for m in messages.values()]
    assert len(names) == len(set(names))


@BOTH
def test_operations_send_messages_of_their_own_channel(path: Path) -> None:
    doc = _document(path)
    covered: set[tuple[str, str]] = set()
    for op_id, operation in doc["operations"].items():
        assert operation["action"] == "send", op_id  # the document describes the server
        channel_ref = operation["channel"]["$ref"]
        channel_key = channel_ref.removeprefix("#/channels/")
        assert channel_key in doc["channels"], op_id
        for message in operation["messages"]:
            prefix = f"{channel_ref}/messages/"
            assert message["$ref"].startswith(prefix), (op_id, message)
            key = message["$ref"].removeprefix(prefix)
            assert key in doc["channels"][channel_key]["messages"], (op_id, key)
            covered.add((channel_key, key))
    every = {(c, m) for c, channel in doc["channels"].items() for m in channel["messages"]}
    assert covered == every


def test_operation_ids_match_the_openapi_operation_ids(blog_doc: dict) -> None:
    openapi = build_openapi(load_schema(str(BLOG)))
    realtime = {
        op["operationId"]
        for item in openapi["x-websocket-routes"].values()
        for method, op in item.items()
        if method != "parameters" and "realtime" in op["tags"]
    }
    assert set(blog_doc["operations"]) == realtime


def test_record_schemas_are_the_openapi_ones(inventory_doc: dict) -> None:
    openapi = build_openapi(load_schema(str(INVENTORY)))["components"]["schemas"]
    for key in ("Warehouse", "Item", "StockMove", "Item.projection.stock", "Warehouse.projection.label"):
        assert inventory_doc["components"]["schemas"][key] == openapi[key]
    assert "Item.Create" not in inventory_doc["components"]["schemas"]


# ---------------------------------------------------------------- query bindings


def _query(doc: dict, channel: str) -> dict:
    return doc["channels"][channel]["bindings"]["ws"]["query"]["properties"]


def test_feed_query_is_the_filters_then_operators_projection_and_after(blog_doc: dict) -> None:
    for channel in ("subscribe.user", "live-query.user"):
        query = _query(blog_doc, channel)
        operators = [n for n in query if "__" in n]  # tests/compiler/test_feed_operator_documents.py
        assert list(query) == ["email", "name", "role", *operators, "projection", "after"]
        assert query["role"]["enum"] == ["admin", "editor", "reader"]
        assert query["projection"]["enum"] == ["card"]
        assert (query["after"]["type"], query["after"]["minimum"]) == ("integer", 0)


def test_feed_query_filters_keep_their_types(blog_doc: dict, inventory_doc: dict) -> None:
    post = _query(blog_doc, "subscribe.blog-post")
    assert post["author_id"]["type"] == "integer" and post["published"]["type"] == "boolean"
    assert post["score"]["type"] == "number"
    item = _query(inventory_doc, "subscribe.item")
    assert item["expires"]["type"] == ["string", "null"] and item["expires"]["format"] == "date"
    assert item["batch"]["format"] == "uuid"
    assert "attributes" not in item  # json fields are never filters


def test_model_without_projections_has_no_projection_parameter(inventory_doc: dict) -> None:
    query = _query(inventory_doc, "subscribe.stock-move")
    assert [n for n in query if "__" not in n] == ["item", "after"]


def test_replicate_query_is_after_defaulting_to_zero(blog_doc: dict) -> None:
    query = _query(blog_doc, "replicate")
    assert list(query) == ["after"]
    assert (query["after"]["type"], query["after"]["minimum"], query["after"]["default"]) == ("integer", 0, 0)


# ---------------------------------------------------------------- feed messages


def test_feed_channels_carry_link_only_for_referenced_models(blog_doc: dict, inventory_doc: dict) -> None:
    def kinds(doc: dict, kebab: str) -> list[str]:
        return list(doc["channels"][f"subscribe.{kebab}"]["messages"])

    assert kinds(blog_doc, "user") == ["insert", "update", "delete", "link"]
    assert kinds(blog_doc, "blog-post") == ["insert", "update", "delete", "link"]
    assert kinds(blog_doc, "comment") == ["insert", "update", "delete"]
    assert kinds(inventory_doc, "stock-move") == ["insert", "update", "delete"]


def test_link_lists_every_child_model_and_field(blog_doc: dict, inventory_doc: dict) -> None:
    def pairs(doc: dict, model: str) -> list[tuple[str, str]]:
        variants = doc["components"]["schemas"][f"{model}.Link"]["oneOf"]
        return [(v["properties"]["child_model"]["const"], v["properties"]["field"]["const"]) for v in variants]

    assert pairs(blog_doc, "User") == [("BlogPost", "author_id"), ("Comment", "author_id")]
    assert pairs(blog_doc, "BlogPost") == [("Comment", "post_id")]
    assert pairs(inventory_doc, "Warehouse") == [("Item", "warehouse")]
    assert pairs(inventory_doc, "Item") == [("StockMove", "item")]


@BOTH
def test_real_change_events_match_their_messages(path: Path) -> None:
    doc = _document(path)
    schema = load_schema(str(path))
    records = _records(path)
    for model in schema.models:
        record, id_field = records[model.name], model.id_field.name
        for kind in EventKind:
            previous = dict(record) if kind is EventKind.UPDATE else None
            wire = _wire(kind, model.name, record, id_field, previous)
            _payload(doc, f"{model.name}.{kind.value.capitalize()}").validate(wire)


@BOTH
def test_projected_change_events_match_their_messages(path: Path) -> None:
    doc = _document(path)
    module = compile_schema(load_schema(str(path)))
    records = _records(path)
    for name, compiled in module.BY_NAME.items():
        for project in compiled.project.values():
            projected = project(records[name])
            event = {
                "kind": "update",
                "model": name,
                "offset": 3,
                "watermark": 2,
                "id": records[name][compiled.id_field],
                "record": projected,
                "previous": projected,
            }
            _payload(doc, f"{name}.Update").validate(event)


@pytest.mark.parametrize(
    "change, why",
    [
        ({"kind": "update"}, "an update without previous"),
        ({"model": "BlogPost"}, "another model"),
        ({"offset": 0}, "offsets start at 1"),
        ({"id": "7"}, "an int id sent as a string"),
        ({"extra": 1}, "an unknown member"),
        ({"record": {"id": 1}}, "a partial record that is no projection"),
    ],
)
def test_malformed_events_are_refused(blog_doc: dict, change: dict, why: str) -> None:
    user = _records(BLOG)["User"]
    event = {**_wire(EventKind.INSERT, "User", user, "id"), **change}
    with pytest.raises(ValidationError):
        _payload(blog_doc, "User.Insert").validate(event)


@pytest.mark.parametrize("child, field, child_id", [("BlogPost", "author_id", 9), ("Comment", "author_id", 4)])
def test_link_events_match(blog_doc: dict, child: str, field: str, child_id: int) -> None:
    event = {
        "kind": "link",
        "model": "User",
        "id": 7,
        "child_model": child,
        "child_id": child_id,
        "field": field,
        "linked": False,
        "offset": 41,
    }
    _payload(blog_doc, "User.Link").validate(event)
    with pytest.raises(ValidationError):
        _payload(blog_doc, "User.Link").validate({**event, "field": "post_id"})


def test_link_child_id_takes_the_child_key_type(inventory_doc: dict) -> None:
    event = {
        "kind": "link",
        "model": "Item",
        "id": "0b6e2c1e-7f3a-4c55-9d2e-6a1b8c0d4e07",
        "child_model": "StockMove",
        "child_id": 12,
        "field": "item",
        "linked": True,
        "offset": 5,
    }
    _payload(inventory_doc, "Item.Link").validate(event)
    with pytest.raises(ValidationError):
        _payload(inventory_doc, "Item.Link").validate({**event, "child_id": "12"})


# ---------------------------------------------------------------- live queries


@BOTH
def test_every_live_delta_kind_matches(path: Path) -> None:
    doc = _document(path)
    records = _records(path)
    module = compile_schema(load_schema(str(path)))
    for name, compiled in module.BY_NAME.items():
        record = records[name]
        message = doc["components"]["messages"][f"{name}.LiveDelta"]
        assert message["name"] == f"{name}LiveDelta"
        deltas = [
            {"type": "Init", "model": name, "records": [record], "watermark": 1, "offset": 0, "complete": False},
            {"type": "Init", "model": name, "records": [], "watermark": 1, "offset": 0, "complete": True},
            {"type": "Added", "model": name, "offset": 2, "watermark": 2, "record": record},
            {"type": "Updated", "model": name, "offset": 3, "watermark": 3, "record": record},
            {"type": "Removed", "model": name, "offset": 4, "watermark": 4, "id": record[compiled.id_field]},
        ]
        for delta in deltas:
            _payload(doc, f"{name}.LiveDelta").validate(delta)


@pytest.mark.parametrize(
    "delta",
    [
        {"type": "Init", "model": "User", "records": [], "watermark": 0, "complete": True},
        {"type": "Init", "model": "User", "records": [], "watermark": 0, "offset": 0},
        {"type": "Added", "model": "User", "offset": 2, "watermark": 2},
        {"type": "Removed", "model": "User", "offset": 4, "watermark": 4, "id": 1, "record": {}},
        {"type": "Deleted", "model": "User", "offset": 4, "watermark": 4, "id": 1},
    ],
    ids=["init-without-offset", "init-without-complete", "added-without-record", "removed-with-record", "unknown-type"],
)
def test_malformed_live_deltas_are_refused(blog_doc: dict, delta: dict) -> None:
    with pytest.raises(ValidationError):
        _payload(blog_doc, "User.LiveDelta").validate(delta)


def test_live_query_channel_names_its_second_address(blog_doc: dict) -> None:
    assert "`/live-query/BlogPost`" in blog_doc["channels"]["live-query.blog-post"]["description"]


# ---------------------------------------------------------------- replication


def test_replicate_sends_binary_persisted_events(blog_doc: dict) -> None:
    message = blog_doc["components"]["messages"]["PersistedEvent"]
    assert message["contentType"] == "application/octet-stream"
    assert resolve(blog_doc, message["payload"]["$ref"])["format"] == "binary"
    assert "`u64 offset | u32 crc32(payload) | u32 length | payload`, big-endian" in message["description"]


def test_persisted_event_frames_have_the_documented_layout_and_payload(blog_doc: dict) -> None:
    user = _records(BLOG)["User"]
    event = ChangeEvent(EventKind.INSERT, "User", 41, 12, 1, user)
    frame = event.frame()
    offset, crc, length = struct.unpack(">QII", frame[:16])
    payload = frame[16:]
    assert (offset, crc, length) == (41, zlib.crc32(payload), len(payload))
    _validator(blog_doc, "#/components/schemas/PersistedEvent.Payload").validate(json.loads(payload))


@pytest.mark.parametrize("path, state", [(BLOG, "on"), (INVENTORY, "off")], ids=["blog", "inventory"])
def test_replicate_says_whether_replication_is_on(path: Path, state: str) -> None:
    description = _document(path)["channels"]["replicate"]["description"]
    assert f"Replication is {state} in this schema" in description
    assert "404 `replication_disabled`" in description


# ---------------------------------------------------------------- descriptions


@BOTH
def test_every_channel_documents_refusals_and_close_codes(path: Path) -> None:
    doc = _document(path)
    for key, channel in doc["channels"].items():
        text = channel["description"]
        offsets = () if key == "replicate-snapshot" else ("`offset_out_of_range`", "410 `offset_gone`")
        for status in ("400 `bad_query`", "401", "403", "426", *offsets):
            assert status in text, (key, status)
        for code in CLOSE_CODES:
            if key.startswith("replicate") and code == 1013:
                assert "`1013`" not in text  # replication reads at the socket's pace
            else:
                assert f"`{code}`" in text, (key, code)
        assert "every 30 s" in text and "Client data messages are ignored" in text


def test_close_codes_are_also_a_component_table(blog_doc: dict) -> None:
    table = blog_doc["components"]["x-websocket-close-codes"]
    assert list(table) == ["1000", "1001", "1009", "1011", "1013", "4401"]
    assert "lagged after <offset>" in table["1013"] and "64 KiB" in table["1009"]


def test_lag_description_names_the_schema_capacity(inventory_doc: dict) -> None:
    assert "buffer of 256 events" in inventory_doc["channels"]["subscribe.item"]["description"]


def test_schema_with_one_unreferenced_model() -> None:
    schema = parse_schema("model Tag {\n  id int @id\n  label str @filter\n}\n", "tags.dbs")
    doc = build_asyncapi(schema)
    assert list(doc["channels"]) == ["subscribe.tag", "live-query.tag", "replicate", "replicate-snapshot"]
    assert "Tag.Link" not in doc["components"]["messages"]
    for pointer in refs(doc):
        resolve(doc, pointer)


# ---------------------------------------------------------------- the generated module and CLI


@BOTH
def test_generated_module_embeds_the_compact_document(path: Path) -> None:
    module = compile_schema(load_schema(str(path)))
    compact = json.dumps(_document(path), separators=(",", ":"), ensure_ascii=False)
    assert module.ASYNCAPI_JSON == compact


def test_cli_prints_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["asyncapi", str(BLOG)]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(_document(BLOG)))
