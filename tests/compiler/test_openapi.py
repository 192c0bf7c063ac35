"""The OpenAPI document: valid OpenAPI 3.1 for both demo schemas, and what it says about them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from dbsvc import __version__
from dbsvc.compiler.openapi import build_openapi
from dbsvc.compiler.openapi_schemas import ERROR_CODES
from dbsvc.schema import load_schema
from dbsvc.schema.ir import Default, DefaultKind, Field, FieldType, Model, Projection, Schema
from support.mutation import shared

ROOT = Path(__file__).resolve().parents[2]
BLOG = ROOT / "schemas" / "blog.dbs"
INVENTORY = ROOT / "schemas" / "inventory.dbs"


@pytest.fixture(scope=shared("module"))
def blog() -> dict:
    return build_openapi(load_schema(str(BLOG)))


@pytest.fixture(scope=shared("module"))
def inventory() -> dict:
    return build_openapi(load_schema(str(INVENTORY)))


def _param(operation: dict, name: str, spec: dict) -> dict:
    for p in operation["parameters"]:
        if "$ref" in p:
            p = spec["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
        if p["name"] == name:
            return p
    raise AssertionError(f"no parameter {name!r}")


def _resolve(parameter: dict, spec: dict) -> dict:
    if "$ref" in parameter:
        return spec["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
    return parameter


def _names(operation: dict, spec: dict) -> list[str]:
    out = []
    for p in operation["parameters"]:
        if "$ref" in p:
            p = spec["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
        out.append(p["name"])
    return out


@pytest.mark.parametrize("path", [BLOG, INVENTORY], ids=["blog", "inventory"])
def test_document_is_valid_openapi_3_1(path: Path) -> None:
    spec = build_openapi(load_schema(str(path)))
    validate(spec)
    assert spec["openapi"] == "3.1.0"


@pytest.mark.parametrize("path", [BLOG, INVENTORY], ids=["blog", "inventory"])
def test_document_is_deterministic_json(path: Path) -> None:
    first = json.dumps(build_openapi(load_schema(str(path))))
    second = json.dumps(build_openapi(load_schema(str(path))))
    assert first == second


def test_info_names_the_schema_file_and_version(blog: dict) -> None:
    assert blog["info"]["title"] == "blog"
    assert blog["info"]["version"] == __version__


def test_every_route_of_the_interface_is_present(blog: dict) -> None:
    paths, websocket = blog["paths"], blog["x-websocket-routes"]
    for kebab in ("user", "blog-post", "comment"):
        assert set(paths[f"/api/{kebab}"]) == {"get", "post"}
        assert set(paths[f"/api/{kebab}/{{id}}"]) == {"parameters", "get", "put", "patch", "delete"}
        assert "101" in websocket[f"/subscribe/{kebab}"]["get"]["responses"]
        assert "101" in websocket[f"/live-query/{kebab}"]["get"]["responses"]
    for route in ("/health", "/ready", "/metrics", "/snapshot"):
        assert "get" in paths[route]
    assert "get" in websocket["/replicate"]


def test_websocket_routes_are_out_of_the_http_operations(blog: dict) -> None:
    # A request/response client following a WebSocket route gets 426, or a 101 and a socket
    # it cannot read: they are listed under the extension, which OpenAPI tools pass over.
    assert not [p for p in blog["paths"] if p.startswith(("/subscribe/", "/live-query/", "/replicate"))]
    assert "/asyncapi.json" in blog["info"]["description"]
    handshake = {"Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version"}
    for path, item in blog["x-websocket-routes"].items():
        params = {p["name"]: p for p in (_resolve(p, blog) for p in item["get"]["parameters"])}
        assert handshake <= set(params), path
        assert all(params[name]["required"] for name in handshake), path


def test_operation_ids_are_unique(blog: dict) -> None:
    items = [*blog["paths"].values(), *blog["x-websocket-routes"].values()]
    ids = [op["operationId"] for item in items for key, op in item.items() if key != "parameters"]
    assert len(ids) == len(set(ids))
    assert "list_blog_post" in ids and "live_query_user" in ids


def test_record_schema_keeps_declaration_order_and_requires_every_field(blog: dict) -> None:
    user = blog["components"]["schemas"]["User"]
    assert list(user["properties"]) == ["id", "email", "name", "age", "role", "joined", "profile"]
    assert user["required"] == list(user["properties"])


def test_field_types_and_bounds(blog: dict) -> None:
    props = blog["components"]["schemas"]["User"]["properties"]
    assert props["id"] == {
        "type": "integer",
        "format": "int64",
        "minimum": -(2**63),
        "maximum": 2**63 - 1,
        "description": "primary key, assigned when omitted.",
    }
    assert props["email"]["type"] == "string" and props["email"]["maxLength"] == 254
    assert props["name"]["minLength"] == 1 and props["name"]["maxLength"] == 100
    assert props["age"]["type"] == ["integer", "null"]
    assert (props["age"]["minimum"], props["age"]["maximum"]) == (0, 150)
    assert props["role"]["enum"] == ["admin", "editor", "reader"]
    assert props["joined"]["format"] == "date-time"
    assert "type" not in props["profile"]  # json? is any JSON value


def test_inventory_types(inventory: dict) -> None:
    props = inventory["components"]["schemas"]["Item"]["properties"]
    assert props["id"]["format"] == "uuid"
    assert props["expires"] == {"type": ["string", "null"], "format": "date"}
    assert props["unit_price"]["type"] == "number" and props["unit_price"]["minimum"] == 0
    assert props["attributes"] == {"description": "any JSON value."}
    delta = inventory["components"]["schemas"]["StockMove"]["properties"]["delta"]
    assert (delta["minimum"], delta["maximum"]) == (-100000, 100000)


def test_create_body_requires_fields_without_default_or_auto_id(blog: dict) -> None:
    schemas = blog["components"]["schemas"]
    assert schemas["User.Create"]["required"] == ["email", "name"]
    assert schemas["User.Create"]["additionalProperties"] is False
    assert schemas["User.Create"]["properties"]["role"]["default"] == "reader"
    assert schemas["BlogPost.Create"]["required"] == ["author_id", "title", "body", "score"]
    assert "required" not in schemas["User.Patch"]


def test_string_primary_key_is_required_on_create_but_comes_from_the_path_on_replace(inventory: dict) -> None:
    schemas = inventory["components"]["schemas"]
    assert schemas["Warehouse.Create"]["required"] == ["code", "city", "opened"]
    assert schemas["Warehouse.Replace"]["required"] == ["city", "opened"]
    assert schemas["Item.Create"]["required"] == ["sku", "warehouse", "unit_price"]


def test_id_path_parameter_is_typed_by_the_primary_key(blog: dict, inventory: dict) -> None:
    def id_schema(spec: dict, kebab: str) -> dict:
        return spec["paths"][f"/api/{kebab}/{{id}}"]["parameters"][0]["schema"]

    assert id_schema(blog, "user") == {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
    assert id_schema(inventory, "warehouse") == {"type": "string"}
    assert id_schema(inventory, "item") == {"type": "string", "format": "uuid"}


def test_filter_parameters_are_typed_exploded_arrays(blog: dict, inventory: dict) -> None:
    list_users = blog["paths"]["/api/user"]["get"]
    role = _param(list_users, "role", blog)
    assert role["schema"] == {"type": "array", "items": {"type": "string", "enum": ["admin", "editor", "reader"]}}
    assert role["style"] == "form" and role["explode"] is True
    score = _param(blog["paths"]["/api/blog-post"]["get"], "score", blog)
    assert score["schema"]["items"] == {"type": "number"}
    published = _param(blog["paths"]["/api/blog-post"]["get"], "published", blog)
    assert published["schema"]["items"] == {"type": "boolean"}
    expires = _param(inventory["paths"]["/api/item"]["get"], "expires", inventory)
    assert expires["schema"]["items"] == {"type": ["string", "null"], "format": "date"}


def test_only_declared_filters_are_parameters(blog: dict) -> None:
    names = _names(blog["paths"]["/api/user"]["get"], blog)
    operators = [f"{f}__{op}" for f in ("name", "age", "joined") for op in ("gt", "gte", "lt", "lte")]
    operators[4:4] = ["name__prefix"]
    operators.insert(9, "age__null")
    assert names == ["email", "name", "role", *operators, "sort", "limit", "offset", "cursor", "projection", "as_of"]


def test_sort_pattern_accepts_sortable_keys_with_optional_minus(blog: dict) -> None:
    sort = _param(blog["paths"]["/api/user"]["get"], "sort", blog)
    pattern = re.compile(sort["schema"]["pattern"])
    for good in ("name", "-age", "name,-joined", "-joined,age,name"):
        assert pattern.search(good), good
    for bad in ("email", "", "name,", "--name", "+name", "name,email", "role"):
        assert not pattern.search(bad), bad


def test_model_without_sortable_fields_has_no_sort_parameter() -> None:
    model = Model("Tag", (Field("id", FieldType.INT, is_id=True), Field("label", FieldType.STR)))
    spec = build_openapi(Schema("tags.dbs", (model,)))
    validate(spec)
    names = _names(spec["paths"]["/api/tag"]["get"], spec)
    assert "sort" not in names and "projection" not in names


def test_limit_has_a_default_and_no_maximum_because_it_is_clamped(blog: dict) -> None:
    limit = blog["components"]["parameters"]["limit"]
    assert limit["schema"] == {"type": "integer", "minimum": 0, "default": 100}
    assert "1000" in limit["description"]
    assert blog["components"]["schemas"]["User.Page"]["properties"]["limit"]["maximum"] == 1000


def test_projection_parameter_enumerates_declared_names(inventory: dict) -> None:
    get_item = inventory["paths"]["/api/item/{id}"]["get"]
    assert _param(get_item, "projection", inventory)["schema"]["enum"] == ["stock", "pricing"]
    stock = inventory["components"]["schemas"]["Item.projection.stock"]
    assert list(stock["properties"]) == ["id", "sku", "quantity"]
    assert stock["required"] == ["id", "sku", "quantity"]
    items = inventory["components"]["schemas"]["Item.Page"]["properties"]["data"]["items"]
    plain = ["Item", "Item.projection.stock", "Item.projection.pricing"]  # then each with `_expand` (Item has a @ref)
    names = [*plain, *(f"{n}.Expanded" for n in plain)]
    assert items["anyOf"] == [{"$ref": f"#/components/schemas/{n}"} for n in names]


def test_list_and_create_responses(blog: dict) -> None:
    schemas = blog["components"]["schemas"]
    assert schemas["User.Page"]["required"] == ["data", "total", "limit", "offset"]
    assert schemas["User.Created"]["properties"]["id"]["type"] == "integer"
    created = blog["paths"]["/api/user"]["post"]["responses"]["201"]
    assert set(created["headers"]) == {"X-Request-Id", "Location", "Dbsvc-Offset", "ETag"}
    listed = blog["paths"]["/api/user"]["get"]["responses"]["200"]
    assert set(listed["headers"]) == {"X-Request-Id", "Dbsvc-Watermark", "Dbsvc-Offset", "Link"}


def test_etags_and_conditional_requests_are_described(blog: dict) -> None:
    """Issue 35: every record answer has an ETag; If-None-Match on a read (304), If-Match
    and If-None-Match on a write (412 `precondition_failed`)."""
    item = blog["paths"]["/api/user/{id}"]
    etag = blog["components"]["headers"]["ETag"]
    assert etag["required"] is True and etag["schema"] == {"type": "string", "pattern": '^"[1-9][0-9]*"$'}
    params = blog["components"]["parameters"]
    assert (params["If-Match"]["in"], params["If-None-Match"]["in"]) == ("header", "header")

    def names(operation: dict) -> set[str]:
        return {p["$ref"].rsplit("/", 1)[1] for p in operation.get("parameters", []) if "$ref" in p}

    assert {"If-None-Match"} <= names(item["get"]) and "If-Match" not in names(item["get"])
    assert set(item["get"]["responses"]["200"]["headers"]) == {
        "X-Request-Id",
        "Dbsvc-Watermark",
        "Dbsvc-Offset",
        "ETag",
    }
    not_modified = item["get"]["responses"]["304"]
    assert "content" not in not_modified and {"ETag", "Dbsvc-Watermark"} <= set(not_modified["headers"])
    for method in ("put", "patch", "delete"):
        assert {"If-Match", "If-None-Match"} <= names(item[method]), method
        assert item[method]["responses"]["412"] == {"$ref": "#/components/responses/PreconditionFailed"}
    for method in ("put", "patch"):
        assert "ETag" in item[method]["responses"]["200"]["headers"]
    failed = blog["components"]["responses"]["PreconditionFailed"]
    assert "precondition_failed" in failed["description"] and "ETag" in failed["headers"]
    assert "precondition_failed" in ERROR_CODES


def test_read_headers_watermark_always_offset_unless_as_of(blog: dict) -> None:
    headers = blog["components"]["headers"]
    assert headers["Dbsvc-Watermark"]["required"] is True
    assert headers["Dbsvc-Offset"]["required"] is False
    assert headers["X-Request-Id"]["required"] is True


def test_operational_route_shapes(blog: dict) -> None:
    schemas = blog["components"]["schemas"]
    assert schemas["Health"]["properties"]["status"]["const"] == "ok"
    assert schemas["Ready"]["properties"]["status"]["const"] == "ready"
    assert schemas["Metrics"]["required"] == ["model_count", "rows_per_model", "total_rows", "realtime"]
    assert schemas["Metrics"]["properties"]["realtime"]["required"] == [
        "subscriptions",
        "live_queries",
        "replication_streams",
        "events_sent",
        "lagged_closes",
    ]
    assert schemas["Snapshot"]["required"] == ["watermarks", "epoch", "replication", "offset", "fingerprint", "history"]
    assert schemas["Snapshot"]["properties"]["watermarks"]["propertyNames"]["enum"] == ["User", "BlogPost", "Comment"]


def test_the_snapshot_schema_describes_every_field_a_primary_and_a_replica_serve(blog: dict) -> None:
    """`/snapshot` of a read replica adds `replica` (replica/status.py's report) to the
    primary's fields, `history` among them (docs/replication.md): each one is described, and a
    body of each kind validates (the real server's own answer: test_real_server_answers_...)."""
    from dbsvc.replica.status import ReplicaStatus

    snapshot = blog["components"]["schemas"]["Snapshot"]
    status = ReplicaStatus("http://127.0.0.1:9", state="following", primary_offset=7, error=None)
    body = {
        "watermarks": {"User": 2, "BlogPost": 0, "Comment": 0},
        "epoch": "9f289a95f59067e0492ca3a7e71c0549",
        "replication": True,
        "offset": 5,
        "fingerprint": "d4dbd0a63c803634",
        "history": {"id": "fa25f888eafbf7eea0585936cc09c6cd", "forks": [{"id": "41aa", "at": 20}]},
        "replica": status.report(5),
    }
    assert set(body) == set(snapshot["properties"])
    assert set(body["replica"]) == set(snapshot["properties"]["replica"]["properties"])
    _validator(blog, "Snapshot").validate(body)
    _validator(blog, "Snapshot").validate({**body, "history": None})
    for bad in ({"forks": []}, {"id": "a", "forks": [{"id": "b"}]}, {"id": "a", "forks": [], "extra": 1}):
        with pytest.raises(Exception, match="required|Additional"):
            _validator(blog, "Snapshot").validate({**body, "history": bad})
    with pytest.raises(Exception, match="Additional"):
        _validator(blog, "Snapshot").validate({**body, "replica": {**body["replica"], "lag": 1}})


def test_problem_schema_and_error_responses(blog: dict) -> None:
    problem = blog["components"]["schemas"]["Problem"]
    assert problem["required"] == ["type", "title", "status", "code", "detail", "request_id"]
    assert problem["properties"]["code"]["enum"] == list(ERROR_CODES)
    assert {"bad_query", "unique_violation", "offset_gone", "internal"} <= set(ERROR_CODES)
    assert problem["properties"]["errors"]["items"] == {"$ref": "#/components/schemas/FieldError"}
    responses = blog["components"]["responses"]
    assert "application/problem+json" in responses["UnprocessableContent"]["content"]
    assert "WWW-Authenticate" in responses["Unauthorized"]["headers"]
    create = blog["paths"]["/api/user"]["post"]["responses"]
    assert {"400", "401", "403", "409", "413", "415", "422", "503"} <= set(create)
    assert set(blog["paths"]["/api/user/{id}"]["delete"]["responses"]) >= {"204", "404", "409"}


@pytest.mark.parametrize("path", [BLOG, INVENTORY], ids=["blog", "inventory"])
def test_every_operation_documents_the_protocol_layer_errors(path: Path) -> None:
    # The protocol layer answers 400 (malformed target, CL with TE), 413 (body over
    # SERVICE_MAX_BODY), 431 (head too large) and 503 (connection limit) on any route.
    spec = build_openapi(load_schema(str(path)))
    for route, item in spec["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            assert {"400", "413", "431", "503"} <= set(operation["responses"]), (method, route)
    too_large = spec["components"]["responses"]["HeadersTooLarge"]
    assert too_large["content"]["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_int_body_fields_say_a_fraction_is_refused(blog: dict) -> None:
    # JSON Schema counts 3.0 as an integer, the validators do not (exact JSON types).
    body = blog["components"]["schemas"]["User.Create"]["properties"]["age"]
    assert "`3.0` is 422" in body["description"]
    assert (body["minimum"], body["maximum"]) == (0, 150)
    assert "description" not in blog["components"]["schemas"]["User"]["properties"]["age"]


def test_problem_schema_declares_the_extension_members_errors_add(blog: dict) -> None:
    # The store adds `field` (409), `count` (409 referenced), `limit` (413), `head` (400) and
    # `oldest` (410) to problem bodies; the document types each of them.
    properties = blog["components"]["schemas"]["Problem"]["properties"]
    assert properties["field"]["type"] == "string"
    for member in ("count", "limit", "head", "oldest"):
        assert properties[member]["type"] == "integer", member


def test_security_is_bearer_jwt_except_operational_routes(blog: dict) -> None:
    scheme = blog["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert "only when" in scheme["description"]
    # Generated per schema, required per configuration: the server running the guard adds the
    # top-level requirement (tests/app/test_openapi_served.py); the routes without a token
    # say so themselves, so they stay open either way.
    assert "security" not in blog
    for route in ("/health", "/ready", "/metrics", "/snapshot"):
        assert blog["paths"][route]["get"]["security"] == []
    assert "security" not in blog["paths"]["/api/user"]["get"]  # inherits the served requirement


def test_websocket_routes_document_their_http_errors(blog: dict, inventory: dict) -> None:
    replicate = blog["x-websocket-routes"]["/replicate"]["get"]["responses"]
    assert {"101", "400", "401", "403", "404", "410"} <= set(replicate)
    assert replicate["404"] == {"$ref": "#/components/responses/ReplicationDisabled"}
    assert "off" in inventory["x-websocket-routes"]["/replicate"]["get"]["description"]
    subscribe = blog["x-websocket-routes"]["/subscribe/user"]["get"]
    assert {"role", "projection", "after", "Upgrade"} <= set(_names(subscribe, blog))


def test_nullable_enum_admits_null_among_its_members() -> None:
    model = Model(
        "Task",
        (
            Field("id", FieldType.INT, is_id=True),
            Field(
                "state",
                FieldType.ENUM,
                nullable=True,
                enum_members=("open", "done"),
                filterable=True,
                default=Default(DefaultKind.VALUE, None),
            ),
        ),
        (Projection("bare", ("id",)),),
    )
    spec = build_openapi(Schema("tasks.dbs", (model,)))
    validate(spec)
    state = spec["components"]["schemas"]["Task.Create"]["properties"]["state"]
    assert state == {"type": ["string", "null"], "enum": ["open", "done", None], "default": None}


def test_cli_prints_the_document() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "openapi", str(BLOG)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(json.dumps(build_openapi(load_schema(str(BLOG)))))


# ---------------------------------------------------------------- the document agrees with the compiler

_SAMPLES = {
    FieldType.INT: 7,
    FieldType.FLOAT: 2.5,
    FieldType.BOOL: True,
    FieldType.JSON: {"k": [1]},
    FieldType.DATETIME: "2024-05-01T12:00:00Z",
    FieldType.DATE: "2024-05-01",
    FieldType.UUID: "0f8fad5b-d9cb-469f-a165-70867728950e",
}


def _sample(field: Field) -> object:
    if field.type is FieldType.ENUM:
        return field.enum_members[0]
    if field.type is FieldType.STR:
        length = max(int(field.min or 0), 3)
        if field.max is not None:
            length = min(length, int(field.max))
        return "x" * length
    value = _SAMPLES[field.type]
    if field.type is FieldType.INT and field.min is not None:
        value = max(int(field.min), value)  # type: ignore[call-overload]
    return value


def _validator(spec: dict, name: str):
    from jsonschema import Draft202012Validator

    root = {"$defs": spec["components"]["schemas"], **spec["components"]["schemas"][name]}
    text = json.dumps(root).replace("#/components/schemas/", "#/$defs/")
    return Draft202012Validator(json.loads(text), format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("path", [BLOG, INVENTORY], ids=["blog", "inventory"])
def test_required_fields_match_the_generated_validators(path: Path) -> None:
    from dbsvc.compiler import compile_schema
    from dbsvc.errors import ConstraintViolation

    schema = load_schema(str(path))
    spec = build_openapi(schema)
    module = compile_schema(schema)
    for model in schema.models:
        compiled = module.BY_NAME[model.name]
        required = spec["components"]["schemas"][f"{model.name}.Create"]["required"]
        body = {name: _sample(model.field(name)) for name in required}
        _validator(spec, f"{model.name}.Create").validate(body)
        record = compiled.validate_create(dict(body))
        if record[model.id_field.name] is None:  # an auto int id: storage assigns it
            record[model.id_field.name] = 1
        _validator(spec, model.name).validate(record)
        for name in required:
            partial = {k: v for k, v in body.items() if k != name}
            with pytest.raises(ConstraintViolation):
                compiled.validate_create(partial)
        replace_required = spec["components"]["schemas"][f"{model.name}.Replace"]["required"]
        replaced = compiled.validate_replace({n: body[n] for n in replace_required}, _sample(model.id_field))
        _validator(spec, model.name).validate(replaced)


def test_real_server_answers_match_the_document(tmp_path: Path) -> None:
    import http.client
    import os
    import socket
    import time

    spec = build_openapi(load_schema(str(BLOG)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SERVICE_PORT": str(port), "SERVICE_DATA": str(tmp_path / "data")}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, None if body is None else json.dumps(body), headers)
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read() or b"null")
        finally:
            conn.close()

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = call("GET", "/health")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        checks = [
            ("GET", "/health", None, 200, "Health"),
            ("POST", "/api/user", {"email": "a@b.c", "name": "Ada"}, 201, "User.Created"),
            ("GET", "/api/user/1", None, 200, "User"),
            ("GET", "/api/user?projection=card&limit=5000&sort=-name,age", None, 200, "User.Page"),
            ("PATCH", "/api/user/1", {"age": 30}, 200, "User"),
            ("POST", "/api/user", {"email": 3}, 422, "Problem"),
            ("GET", "/api/user?bogus=1", None, 400, "Problem"),
            ("GET", "/metrics", None, 200, "Metrics"),
            ("GET", "/snapshot", None, 200, "Snapshot"),
        ]
        for method, path, payload, expected, schema_name in checks:
            status, body = call(method, path, payload)
            assert status == expected, (path, body)
            _validator(spec, schema_name).validate(body)
        status, body = call("GET", "/snapshot")
        assert set(body) <= set(spec["components"]["schemas"]["Snapshot"]["properties"])  # every field described
    finally:
        proc.terminate()
        proc.wait(timeout=15)
