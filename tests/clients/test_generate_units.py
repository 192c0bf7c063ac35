"""The client generators in process, fixture-free: the text they write for a small schema.

Pure code (dbsvc/clients: the IR in, text out), so these tests call `generate_client` on a
schema parsed from a literal and compare what it writes with an independent expectation: the
golden files of tests/clients/golden (blog.dbs in both languages, whole; odd.dbs's generated
part, from its `--- generated from` line) and literal snippets that say which line a change
broke (a type per model, a renamed clash, a keyword field, an enum, a nullable, a projection
without the id, an expand, TypeScript keys quoted or not). No fixture, so
bench/mutation_inprocess.py can run every mutant of dbsvc/clients against them
(docs/mutation.md).

Regenerate a golden file only when the client changes on purpose: write it with
`python dbsvc.py client SCHEMA --lang LANG` (and for all but blog's, cut it at its
`--- generated from` line; odd.dbs is ODD below).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dbsvc.clients import generate_client
from dbsvc.errors import ConfigError
from dbsvc.schema import load_schema, parse_schema
from support.client_kit import ODD

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
SCHEMAS = HERE.parent.parent / "schemas"


def odd(lang: str) -> str:
    return generate_client(parse_schema(ODD, "odd.dbs"), lang)


def generated_part(text: str, comment: str) -> str:
    return text[text.index(f"{comment} --- generated from") :]


def golden(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


def test_the_blog_clients_are_the_golden_files():
    blog = load_schema(SCHEMAS / "blog.dbs")
    assert generate_client(blog, "python") == golden("blog.py.golden")
    assert generate_client(blog, "typescript") == golden("blog.ts.golden")


def test_the_odd_schemas_generated_parts_are_the_golden_files():
    assert generated_part(odd("python"), "#") == golden("odd.py.golden")
    assert generated_part(odd("typescript"), "//") == golden("odd.ts.golden")


def test_a_language_not_built_in_is_a_config_error_naming_the_built_ones():
    with pytest.raises(ConfigError) as caught:
        generate_client(parse_schema(ODD, "odd.dbs"), "rust")
    assert str(caught.value) == "--lang 'rust': this dbsvc generates clients in python, typescript only"


def test_the_notes_and_inventory_generated_parts_are_the_golden_files():
    for name in ("notes", "inventory"):
        schema = load_schema(SCHEMAS / f"{name}.dbs")
        assert generated_part(generate_client(schema, "python"), "#") == golden(f"{name}.py.golden"), name
        assert generated_part(generate_client(schema, "typescript"), "//") == golden(f"{name}.ts.golden"), name


def test_python_a_keyword_field_is_sent_by_its_name_and_passed_with_an_underscore():
    text = odd("python")
    assert "PageRecord = TypedDict(\n    'PageRecord',\n    {\n        'id': str,\n        'from': str,\n" in text
    assert "        'handler': int | None,\n        'class': Literal['a', 'b'],\n" in text
    assert "    from_: str | Sequence[str]\n    handler_: int | Sequence[int | None]\n" in text
    assert "    renamed={'from_': 'from', 'handler_': 'handler', 'class_': 'class'},\n" in text
    assert "        'handler': NotRequired[int | None],\n" in text  # nullable: optional on create


def test_python_clashing_types_are_renamed_and_the_client_attribute_too():
    text = odd("python")
    assert "PageRecordSort = Literal['from', '-from']\nPageRecordId = str\n" in text
    assert "BatchRecordExpand = Literal['page', 'page:short', 'page:create']\n" in text
    assert "        self.page = PageRecordApi(self.transport)\n" in text
    assert "        self.batch_ = BatchRecordApi(self.transport)\n" in text
    assert "        self.batch_list = BatchListApi(self.transport)\n" in text
    assert "PageRecordCreateProjection = TypedDict(" in text  # the projection `create`


def test_typescript_keys_are_bare_when_identifiers_and_members_are_renamed_on_a_clash():
    text = odd("typescript")
    assert "export interface PageRecord {\n  id: string;\n  from: string;\n  handler: number | null;\n" in text
    assert '  class: "a" | "b";\n}\n' in text
    assert "export type PageRecordSort = \"from\" | \"-from\";\nexport type PageRecordId = string;\n" in text
    assert (
        '  readonly page: PageRecordApi;\n  readonly batchModel: BatchRecordApi;\n  readonly batchList: BatchListApi;\n'
        in text
    )
    assert 'BatchList: this.batchList, "batch-list": this.batchList };' in text
    assert (
        'export type BatchRecordExpand = "page" | "page:short" | "page:create";\nexport type BatchRecordId = number;\n'
        in text
    )


def test_both_languages_name_the_problem_classes_in_errors_order():
    for text, line in (
        (odd("python"), "class {}(ApiError):"),
        (odd("typescript"), "export class {} extends ApiError {{}}"),
    ):
        at = [
            text.index(line.format(name))
            for name in ("BadRequestError", "UniqueViolationError", "OffsetGoneError", "InternalError")
        ]
        assert at == sorted(at)


def test_a_schema_without_a_file_name_and_a_projection_of_two_words():
    schema = parse_schema("model Note {\n  id int @id\n  body str\n  @projection(short_list, body)\n}\n", "")
    text = generate_client(schema, "python")
    assert text.startswith('"""Python client of the dbsvc service of <schema> (schema fingerprint ')
    assert "class NoteShortList(TypedDict):\n" in text
    assert "        self.short_list: NoteReads[NoteShortList] = NoteReads(transport, Note_SPEC, 'short_list')\n" in text
    text = generate_client(schema, "typescript")
    assert text.startswith("// TypeScript client of the dbsvc service of <schema> (schema fingerprint ")
    assert "export interface NoteShortList {\n" in text
    assert '    this.shortList = new NoteReads<NoteShortList>(transport, Note_SPEC, "short_list");\n' in text


NAMES = ["get", "fetch", "list", "pages", "iterate", "subscribe", "live_query", "head", "create", "replace", "patch"]
NAMES += ["delete", "path", "spec", "class", "x_op", "_x", "plain"]
NAMED = (
    "model Class {\n  id int @id\n  b str\n"
    + "".join(f"  @projection({n}, b)\n" for n in NAMES)
    + "}\n\nmodel HTTPServer {\n  id int @id\n}\n\nmodel ABTestX {\n  id int @id\n}\n\nmodel ItemV2 {\n  id int @id\n}\n"
    + "\nmodel ItemAB {\n  id int @id\n}\n\nmodel ABc {\n  id int @id\n}\n"
)


def test_python_attributes_of_models_and_projections_step_around_keywords_and_methods():
    text = generate_client(parse_schema(NAMED, "names.dbs"), "python")
    for name in NAMES[:-1]:  # each clashes with a method, a keyword, a private or an op name
        assert f"        self.{name}_: ClassReads[" in text, name
    assert "        self.plain: ClassReads[ClassPlain] = ClassReads(transport, Class_SPEC, 'plain')\n" in text
    assert (
        "        self.create_: ClassReads[ClassCreateProjection] = ClassReads(transport, Class_SPEC, 'create')\n"
        in text
    )
    assert "        self.class_ = ClassApi(self.transport)\n" in text  # the model `Class`: a keyword
    assert "        self.http_server = HTTPServerApi(self.transport)\n" in text
    assert "        self.ab_test_x = ABTestXApi(self.transport)\n" in text
    assert "        self.item_v2 = ItemV2Api(self.transport)\n" in text
    assert "        self.item_ab = ItemABApi(self.transport)\n" in text
    assert "        self.a_bc = ABcApi(self.transport)\n" in text


def test_typescript_a_model_named_client_and_a_projection_named_by_a_digit():
    schema = "model Client {\n  id int @id\n  b str\n  @projection(_1, b)\n}\n"
    text = generate_client(parse_schema(schema, "c.dbs"), "typescript")
    assert "export interface ClientRecord {\n" in text and "export interface Client {" not in text
    assert "  readonly client: ClientRecordApi;\n" in text
    assert '    this._1 = new ClientRecordReads<ClientRecord1>(transport, ClientRecord_SPEC, "_1");\n' in text


def test_typescript_projections_whose_members_would_be_one_name_get_two():
    """`short_list` and `shortList` (or `_` and `__`) both camel-case to one member: the later
    one is renamed, where both used to define the same member (a client tsc refuses)."""
    schema = "model A {\n  id int @id\n  b str\n  @projection(short_list, b)\n  @projection(shortList, b)\n}\n"
    text = generate_client(parse_schema(schema, "a.dbs"), "typescript")
    assert '    this.shortList = new AReads<AShortList>(transport, A_SPEC, "short_list");\n' in text
    assert '    this.shortListProjection = new AReads<' in text and 'A_SPEC, "shortList");\n' in text
