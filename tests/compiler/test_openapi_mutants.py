"""The OpenAPI builders (dbsvc/compiler/openapi.py, openapi_parts.py, openapi_schemas.py,
openapi_batch.py) word for word.

Most of the document is text a client generator or a reader takes as it is: descriptions,
summaries, patterns, bounds, the order of parameters and responses. `golden/openapi.json` is
the whole document of `golden/openapi.dbs` (every field type, each bound and kind of default,
nullable and plain filters, sort and search fields, token defaults, projections, references
with and without a projection to expand, a rule, replication off), reviewed by hand and
compared byte for byte, key order included (the document is deterministic). The branches that
schema does not take have a test each below, with their expectations written here or quoted
from docs/guide/*.md. Every document is also checked by `openapi-spec-validator`.

After a deliberate change of the document, write the file again and review its diff:
`python tests/compiler/test_openapi_mutants.py` (given a directory, it writes there instead;
test_golden_scripts.py runs it so).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script (below): this tree's dbsvc and tests/support, not an installed tree's
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import pytest
from openapi_spec_validator import validate

from dbsvc import __version__
from dbsvc.compiler.openapi import build_openapi
from dbsvc.schema import ir, load_schema, parse_schema

GOLDEN = Path(__file__).resolve().parent / "golden"
SCHEMA = GOLDEN / "openapi.dbs"
DOCUMENT = GOLDEN / "openapi.json"
ROOT = Path(__file__).resolve().parents[2]


def _comparable(doc: dict) -> str:
    """The document as the golden file holds it: the version replaced by a marker."""
    doc = json.loads(json.dumps(doc))
    assert doc["info"]["version"] == __version__
    doc["info"]["version"] = "<dbsvc version>"
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def test_the_document_of_the_golden_schema_is_the_reviewed_one_byte_for_byte():
    doc = build_openapi(load_schema(str(SCHEMA)))
    got = _comparable(doc)
    want = DOCUMENT.read_text(encoding="utf-8")
    if got != want:  # the first differing line, not a 160 kB diff
        for number, (a, b) in enumerate(zip(got.splitlines(), want.splitlines(), strict=False), 1):
            assert a == b, f"{DOCUMENT.name} line {number}"
    assert got == want
    validate(doc)


# test_openapi.py validates blog.dbs and inventory.dbs, test_rules_documents.py notes.dbs.
VALIDATED_ELSEWHERE = {"blog.dbs", "inventory.dbs", "notes.dbs"}
SHIPPED = [
    p
    for p in sorted(ROOT.glob("schemas/*.dbs")) + sorted(ROOT.glob("dbsvc/templates/*.dbs"))
    if p.name not in VALIDATED_ELSEWHERE
]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_schema_gives_a_valid_openapi_3_1_document(path: Path):
    """openapi-spec-validator, an independent reading of OpenAPI 3.1, over every schema we ship
    that no other test validates (a schema added to schemas/ is validated here)."""
    doc = build_openapi(load_schema(str(path)))
    validate(doc)
    assert doc["openapi"] == "3.1.0"


def _doc(text: str, path: str = "other.dbs") -> dict:
    doc = build_openapi(parse_schema(text, path))
    validate(doc)
    return doc


def _documented(chapter: str, pattern: str) -> tuple[int, ...]:
    """The numbers `pattern` finds in docs/guide/<chapter> (thousands written with a comma)."""
    text = (ROOT / "docs" / "guide" / chapter).read_text(encoding="utf-8")
    found = re.search(pattern, text)
    assert found, f"{chapter} no longer says {pattern!r}"
    return tuple(int(g.replace(",", "")) for g in found.groups())


def test_the_limits_the_document_states_are_the_ones_the_guide_states():
    doc = build_openapi(load_schema(str(SCHEMA)))
    default, most = _documented("queries.md", r"page size: default (\d+), at most (\d+) \(larger values are lowered to")
    limit = doc["components"]["parameters"]["limit"]
    assert limit["schema"] == {"type": "integer", "minimum": 0, "default": default}
    assert limit["description"].startswith(f"Page size, default {default}. Values above {most} are accepted")
    assert doc["components"]["schemas"]["Author.Page"]["properties"]["limit"]["maximum"] == most
    words, chars = _documented("queries.md", r"At most (\d+) distinct words a query, each at most (\d+) characters")
    (search,) = [p for p in doc["paths"]["/api/author"]["get"]["parameters"] if p.get("name") == "search"]
    assert (
        f"At most {words} words of at most {chars} characters; no word at all is 400 `bad_query`."
        in (search["description"])
    )
    (ops,) = _documented("rest.md", r"A batch holds at most ([\d,]+) ops and")
    batch = doc["components"]["schemas"]["Batch"]["properties"]["ops"]
    assert (batch["minItems"], batch["maxItems"]) == (1, ops)
    assert f"At most {ops} ops (400 beyond)." in doc["paths"]["/batch"]["post"]["description"]


PLAIN = """\
[runtime]
replication = true
model Item {
  code str @id
  n int
}
"""


def test_a_plain_model_names_its_record_alone_and_lists_only_the_shared_parameters():
    doc = _doc(PLAIN, "some/dir/shop.v2.dbs")
    assert doc["info"]["title"] == "shop.v2"
    assert doc["info"]["description"].startswith(
        "Database service generated by dbsvc from `shop.v2.dbs`. Models: `Item` (`/api/item`). Errors are"
    )
    shared = ["limit", "offset", "cursor", "as_of"]
    assert doc["paths"]["/api/item"]["get"]["parameters"] == [
        {"$ref": f"#/components/parameters/{name}"} for name in shared
    ]
    record = {"$ref": "#/components/schemas/Item"}
    assert doc["paths"]["/api/item/{id}"]["get"]["responses"]["200"]["content"] == {
        "application/json": {"schema": record}
    }
    assert doc["components"]["schemas"]["Item.Page"]["properties"]["data"] == {"type": "array", "items": record}
    assert doc["paths"]["/api/item/{id}"]["get"]["parameters"] == [
        {"$ref": "#/components/parameters/as_of"},
        {"$ref": "#/components/parameters/If-None-Match"},
    ]
    feed = ["after", "Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol"]
    assert doc["x-websocket-routes"]["/subscribe/item"]["get"]["parameters"] == [
        {"$ref": f"#/components/parameters/{name}"} for name in feed
    ]
    assert "Item._expand" not in doc["components"]["schemas"]
    assert "Item.Expanded" not in doc["components"]["schemas"]


def test_replication_on_is_said_on_the_replicate_route():
    described = _doc(PLAIN)["x-websocket-routes"]["/replicate"]["get"]["description"]
    assert described.endswith(
        "Replication is on in this schema (`[runtime].replication`); when off the route answers 404 "
        "`replication_disabled`."
    )


def test_a_schema_without_models_or_path_is_named_dbsvc():
    doc = build_openapi(ir.Schema(path="", models=()))  # the parser requires a model; the IR does not
    assert doc["info"]["title"] == "dbsvc"
    assert doc["info"]["description"].startswith(
        "Database service generated by dbsvc from `dbsvc`. Models: none. Errors are RFC 9457 problem details"
    )
    assert [tag["name"] for tag in doc["tags"]] == ["operations", "batch", "realtime"]
    assert doc["components"]["schemas"]["Batch"]["properties"]["ops"]["items"] == {"oneOf": []}


def test_a_model_whose_route_segment_is_its_name_is_named_once_in_a_batch_op():
    code = ir.Field(name="code", type=ir.FieldType.STR, is_id=True)
    doc = build_openapi(ir.Schema(path="x.dbs", models=(ir.Model(name="item", fields=(code,)),)))
    ops = doc["components"]["schemas"]["item.BatchOp"]["oneOf"]
    assert [op["properties"]["model"] for op in ops] == [{"type": "string", "enum": ["item"]}] * 4


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN  # a directory to write to instead
    (target / DOCUMENT.name).write_text(_comparable(build_openapi(load_schema(str(SCHEMA)))), encoding="utf-8")
    print(f"wrote {target / DOCUMENT.name} from the dbsvc in {Path(sys.modules['dbsvc'].__file__).parent}")
