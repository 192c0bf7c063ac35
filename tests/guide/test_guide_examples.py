"""The user guide (docs/guide/) runs as written, and covers everything it must.

One test per chapter runs every console example against real servers through a real
shell and `curl` (tests/support/guide_kit.py has the conventions). The coverage tests read
the code's own lists, so a route, an error code, a variable or a schema word added to the
code without a line in the guide fails here:

- every route of dbsvc/routes.py, and every method, is used by some example;
- every problem `code` of dbsvc/errors.py is in some example's output, and the errors
  chapter tables every (status, code) pair;
- every SERVICE_* variable the package reads is in the configuration chapter;
- every type, field attribute, model attribute and table key of the schema language is
  in the schema chapter, and every attribute and table gets a `dbsvc check` error example.
"""

from __future__ import annotations

import re
import shutil

import pytest

from dbsvc import errors, routes
from dbsvc.schema.checks import FIELD_ATTRIBUTES, MODEL_ATTRIBUTES
from dbsvc.schema.ir import FieldType
from dbsvc.schema.tables import TABLE_KEYS
from support import guide_kit
from support.guide_kit import ANY, GUIDE, ROOT, Command, GuideError, chapters, matches, parse_chapter

CHAPTERS = [
    "README.md",
    "schema.md",
    "rest.md",
    "queries.md",
    "errors.md",
    "configuration.md",
    "auth.md",
    "access.md",
    "realtime.md",
    "clients.md",
    "operations.md",
    "recipes.md",
]


def console_commands() -> list[tuple[str, Command]]:
    found = []
    for path in chapters():
        for step in parse_chapter(path):
            found.extend((path.name, command) for command in step.commands)
    return found


def guide_text(name: str | None = None) -> str:
    paths = [GUIDE / name] if name else chapters()
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def request_errors() -> list[type[errors.RequestError]]:
    found, todo = [], [errors.RequestError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


# -- the examples ----------------------------------------------------------------------


def test_guide_has_its_chapters():
    assert sorted(p.name for p in chapters()) == sorted(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_examples_print_what_the_guide_shows(chapter, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    if "\n$ tsc " in (GUIDE / chapter).read_text() and (not guide_kit.TSC.exists() or shutil.which("node") is None):
        pytest.skip("npm typescript is not installed (cd tests/clients/ts && npm ci; .ci/run does it)")
    ran = guide_kit.ChapterRun(GUIDE / chapter, tmp_path).run()
    assert ran > 0, f"{chapter} has no runnable example"


# -- the kit's own rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    "expected, actual, ok",
    [
        (['{"id":1}'], '{"id":1}', True),
        (['{"id":1}'], '{"id":2}', False),
        (['{"joined":"…"}'], '{"joined":"2026-01-01T00:00:00Z"}', True),
        (['{"joined":"…"}'], '{"joined":"a"}\nmore', False),
        (["HTTP/1.1 200 OK", ANY, "", "body"], "HTTP/1.1 200 OK\r\ndate: x\r\nserver: y\r\n\r\nbody", True),
        (["a", ANY, "b"], "a\nb\n", True),
        (["a", ANY], "a\nb\nc", True),
        ([], "", True),
        ([], "something", False),
        (["trailing  "], "trailing\n\n", True),
    ],
)
def test_output_wildcards(expected, actual, ok):
    assert matches(expected, actual) is ok


def test_a_block_that_does_not_run_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```sh\ncurl localhost:3000/health\n```\n")
    with pytest.raises(GuideError, match="does not run"):
        parse_chapter(page)


def test_a_wrong_output_names_the_chapter_line_and_the_difference(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```console\n$ echo one\ntwo\n```\n")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(GuideError, match=r"(?s)page.md:4: `echo one`.*-two.*\+one"):
        guide_kit.ChapterRun(page, work).run()


# -- coverage --------------------------------------------------------------------------------


def test_every_route_and_method_is_exercised():
    commands = "\n".join(c.text for _, c in console_commands())
    paths = [r.path for r in routes.OPERATIONAL] + [
        routes.REPLICATE_PATH,
        routes.REPLICATE_SNAPSHOT_PATH,
        routes.EXPLORER_PATH,
        f"/{routes.SUBSCRIBE}/",
        f"/{routes.LIVE_QUERY}/",
        routes.API_PREFIX,
    ]
    missing = [p for p in paths if f"localhost:3000{p}" not in commands]
    assert not missing, f"no guide example requests {missing}"
    item = re.compile(re.escape(routes.API_PREFIX) + r"[a-z-]+/[^?\s'\"/]+")
    assert item.search(commands), "no guide example reads one record"
    methods = set(routes.ALL_METHODS) - {"GET", "HEAD"}
    missing = [m for m in sorted(methods) if f"-X{m}" not in commands and f"-X {m}" not in commands]
    assert not missing, f"no curl example uses {missing}"
    assert re.search(r"curl -s?I", commands), "no HEAD example (curl -I)"


def test_every_error_code_is_shown_by_an_example():
    outputs = "\n".join("\n".join(c.expected) for _, c in console_commands())
    codes = sorted({cls.code for cls in request_errors()})
    never_on_purpose = {"internal"}  # a bug in dbsvc: no example can provoke it
    missing = [code for code in codes if code not in never_on_purpose and f'"code": "{code}"' not in outputs]
    assert not missing, f"no guide example shows the codes {missing}"
    table = guide_text("errors.md")
    for cls in request_errors():
        row = re.compile(rf"^\| {cls.status} \|[^\n]*`{cls.code}`", re.M)
        assert row.search(table), f"errors.md has no table row for {cls.status} `{cls.code}`"


def test_every_service_variable_is_in_the_configuration_chapter():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "dbsvc").rglob("*.py"))
    variables = set(re.findall(r"\b(SERVICE_[A-Z_]*[A-Z])\b", source)) | {"RUST_LOG"}
    variables.discard("SERVICE_JWT")  # a prefix named in prose (SERVICE_JWT_*)
    chapter = guide_text("configuration.md")
    missing = sorted(v for v in variables if f"`{v}`" not in chapter)
    assert not missing, f"configuration.md does not name {missing}"


def test_every_schema_word_is_in_the_schema_chapter():
    chapter = guide_text("schema.md")
    words = [f"`{t.value}" for t in FieldType]
    words += [f"`@{a}" for a in FIELD_ATTRIBUTES + MODEL_ATTRIBUTES]
    words += [f"`[{table}] {key}`" for table, keys in TABLE_KEYS.items() for key in keys]
    missing = [w for w in words if w not in chapter]
    assert not missing, f"schema.md does not describe {missing}"


def test_every_attribute_and_table_has_a_check_error_example():
    errors_shown = "\n".join(
        "\n".join(c.expected)
        for name, c in console_commands()
        if name == "schema.md" and c.text.startswith("dbsvc check")
    )
    missing = [
        f"@{a}" for a in FIELD_ATTRIBUTES + MODEL_ATTRIBUTES if not re.search(rf"error: [^\n]*@{a}\b", errors_shown)
    ]
    missing += [f"[{t}]" for t in TABLE_KEYS if not re.search(rf"error: [^\n]*\[{t}\]", errors_shown)]
    assert not missing, f"schema.md shows no `dbsvc check` error about {missing}"


def test_every_declared_file_is_used():
    for path in chapters():
        steps = parse_chapter(path)
        used = "\n".join(
            [c.text for s in steps for c in s.commands] + [" ".join(s.words) for s in steps if s.kind == "directive"]
        )
        unused = [s.name for s in steps if s.kind == "file" and s.name not in used]
        assert not unused, f"{path.name} declares files no example uses: {unused}"


def test_guide_links_resolve():
    for path in chapters():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            assert (path.parent / target).exists() or target.startswith("../../deploy/"), (
                f"{path.name} links to {target}, which does not exist"
            )


def test_readme_links_the_guide():
    assert "docs/guide/README.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_examples_name_only_the_guide_host():
    """Every example talks to `localhost:<port>`, the name the kit swaps for the real server."""
    for name, command in console_commands():
        assert "127.0.0.1" not in command.text, f"{name}:{command.line} names 127.0.0.1"
