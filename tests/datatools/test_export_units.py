"""dbsvc/datatools/export.py in-process (issue 33): model names as users spell them (the
declared name, the route form, a wrong one) in MODEL and in `--as-of`, watermarks, the
file's exact bytes and the summary, over a real tenant in tmp_path.
"""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from dbsvc.datatools import export
from dbsvc.datatools.export import ExportReport, export_records, export_to_path, parse_as_of, select_models
from dbsvc.errors import ConfigError
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG, open_store, post, user

USER, POST, COMMENT = BLOG.MODELS


def seed(directory: str) -> None:
    """Users 1-3 (watermarks 1-3), posts 1-2, then user 2 renamed (User's watermark 4)."""
    store = open_store(directory)

    async def go() -> None:
        for i in (1, 2, 3):
            await store.insert("User", user(i))
        for i in (1, 2):
            await store.insert("BlogPost", post(i, author=i))
        await store.replace("User", 2, user(2, name="second"))

    asyncio.run(go())
    store.close()


@pytest.fixture
def tenant(data) -> str:
    directory = create_tenant(str(data), "t")
    seed(directory)
    return directory


def line(model: str, record: dict) -> str:
    from dbsvc.runtime import compact_json

    return '{"model":"%s","record":%s}\n' % (model, compact_json(record))


# -- model names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names, chosen",
    [
        ((), ["User", "BlogPost", "Comment"]),
        (("BlogPost",), ["BlogPost"]),
        (("blog-post",), ["BlogPost"]),
        (("comment", "User"), ["User", "Comment"]),  # declaration order, not the order given
        (("user", "User"), ["User"]),  # one model named twice is exported once
    ],
)
def test_models_are_chosen_by_declared_name_or_route_form(names, chosen):
    assert [m.name for m in select_models(BLOG, names)] == chosen


@pytest.mark.parametrize("wrong", ["blogpost", "Blog-Post", "blog_post", "Users", ""])
def test_a_model_spelled_otherwise_is_refused_naming_the_models(wrong):
    with pytest.raises(ConfigError) as caught:
        select_models(BLOG, ["User", wrong])
    assert str(caught.value) == f"unknown model {wrong!r}: expected one of User, BlogPost, Comment"


@pytest.mark.parametrize(
    "specs, models, watermarks",
    [
        (["User=3"], [USER], {"User": 3}),
        (["user=3"], [USER], {"User": 3}),
        (["blog-post=1"], [USER, POST], {"BlogPost": 1}),
        (["BlogPost=1", "user=0"], [USER, POST], {"BlogPost": 1, "User": 0}),
        (["7"], [POST], {"BlogPost": 7}),
        (["User=2", "User=5"], [USER], {"User": 5}),  # the last one given wins
    ],
)
def test_as_of_takes_the_declared_name_the_route_form_or_a_bare_watermark(specs, models, watermarks):
    assert parse_as_of(specs, models) == watermarks


@pytest.mark.parametrize(
    "spec, models, message",
    [
        ("3", [USER, POST], "--as-of '3': a bare watermark needs exactly one MODEL; write MODEL=N for each model"),
        ("3", [], "--as-of '3': a bare watermark needs exactly one MODEL; write MODEL=N for each model"),
        (
            "blogpost=1",
            [USER, POST],
            "--as-of 'blogpost=1': 'blogpost' is not one of the exported models (User, BlogPost)",
        ),
        ("Comment=1", [USER], "--as-of 'Comment=1': 'Comment' is not one of the exported models (User)"),
        ("=1", [USER], "--as-of '=1': '' is not one of the exported models (User)"),
        ("User=1=2", [USER], "--as-of 'User=1=2': 'User=1' is not one of the exported models (User)"),
        ("User=", [USER], "--as-of 'User=': '' is not a watermark: expected an integer >= 0"),
        ("User=-1", [USER], "--as-of 'User=-1': '-1' is not a watermark: expected an integer >= 0"),
        ("user=x", [USER], "--as-of 'user=x': 'x' is not a watermark: expected an integer >= 0"),
        ("1.5", [USER], "--as-of '1.5': '1.5' is not a watermark: expected an integer >= 0"),
        ("\u0663", [USER], "--as-of '\u0663': '\u0663' is not a watermark: expected an integer >= 0"),
    ],
)
def test_a_bad_as_of_is_refused_naming_what_is_allowed(spec, models, message):
    with pytest.raises(ConfigError) as caught:
        parse_as_of([spec], models)
    assert str(caught.value) == message


# -- what is written -----------------------------------------------------------------------------


def test_export_writes_exact_lines_in_declaration_and_id_order(tenant):
    out = io.StringIO()
    report = export_records(tenant, BLOG, out, BLOG.MODELS, {}, quiet=True)
    assert out.getvalue() == "".join(
        [
            line("User", {**user(1)}),
            line("User", {**user(2, name="second")}),
            line("User", {**user(3)}),
            line("BlogPost", post(1, author=1)),
            line("BlogPost", post(2, author=2)),
        ]
    )
    assert report.counts == {"User": 3, "BlogPost": 2, "Comment": 0}
    assert report.watermarks == {"User": 4, "BlogPost": 2, "Comment": 0}
    assert report.records == 5


def test_as_of_in_route_form_exports_the_model_as_it_was(tenant):
    """`--as-of user=3` (kebab): user 2 before its rename; `blog-post=1`: post 1 only."""
    models = select_models(BLOG, ["user", "blog-post"])
    out = io.StringIO()
    report = export_records(tenant, BLOG, out, models, parse_as_of(["user=3", "blog-post=1"], models), quiet=True)
    assert out.getvalue() == line("User", user(1)) + line("User", user(2)) + line("User", user(3)) + line(
        "BlogPost", post(1, author=1)
    )
    assert report.watermarks == {"User": 3, "BlogPost": 1}


def test_as_of_at_the_current_watermark_is_allowed_and_one_past_it_is_refused(tenant):
    out = io.StringIO()
    report = export_records(tenant, BLOG, out, [USER], {"User": 4}, quiet=True)
    assert report.counts == {"User": 3}
    with pytest.raises(ConfigError) as caught:
        export_records(tenant, BLOG, io.StringIO(), [USER, POST], {"BlogPost": 3}, quiet=True)
    assert str(caught.value) == "--as-of BlogPost=3 is ahead of BlogPost's current watermark 2"


def test_lines_come_in_batches_of_write_batch(tenant, monkeypatch):
    monkeypatch.setattr(export, "WRITE_BATCH", 2)
    writes: list[str] = []

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    export_records(tenant, BLOG, Out(), [USER], {}, quiet=True)
    assert [w.count("\n") for w in writes] == [2, 1]


def test_export_to_a_path_writes_the_same_bytes_and_leaves_no_tmp(tenant, tmp_path):
    out = io.StringIO()
    export_records(tenant, BLOG, out, BLOG.MODELS, {}, quiet=True)
    path = tmp_path / "out.jsonl"
    export_to_path(tenant, BLOG, str(path), BLOG.MODELS, {}, quiet=True)
    assert path.read_bytes() == out.getvalue().encode("utf-8")
    assert sorted(os.listdir(tmp_path)) == ["data", "out.jsonl"]


def test_a_refused_export_to_a_path_leaves_no_file(tenant, tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(ConfigError):
        export_to_path(tenant, BLOG, str(path), [USER], {"User": 9}, quiet=True)
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_export_progress_ends_without_a_line_of_its_own(tenant):
    stream = io.StringIO()
    export_records(tenant, BLOG, io.StringIO(), BLOG.MODELS, {}, progress_stream=stream)
    assert stream.getvalue() == ""
    stream = io.StringIO()
    stream.isatty = lambda: True  # type: ignore[method-assign]
    export_records(tenant, BLOG, io.StringIO(), BLOG.MODELS, {}, progress_stream=stream)
    assert stream.getvalue().startswith("\rexport  [##########################] 100%  5 records  ")
    assert stream.getvalue().endswith("/s \n")


def test_export_leaves_the_tenant_unlocked_and_unchanged(tenant):
    from support.tree import dir_image

    before = {k: v for k, v in dir_image(tenant).items() if k != "LOCK"}
    export_records(tenant, BLOG, io.StringIO(), BLOG.MODELS, {}, quiet=True)
    assert {k: v for k, v in dir_image(tenant).items() if k != "LOCK"} == before
    store = open_store(tenant)  # the lock was released: a writer opens it
    store.close()


def test_summary_names_each_model_its_watermark_and_the_epoch():
    report = ExportReport({"User": 3, "Comment": 0}, {"User": 4, "Comment": 0}, "ab" * 16, 2.0, 0.5)
    assert report.summary() == (
        "exported 3 records in 2.0 s (2/s; opening the tenant 0.5 s): User 3 (watermark 4), "
        f"Comment 0 (watermark 0); epoch {'ab' * 16}"
    )
    assert ExportReport({}, {}, "e", 0.0, 0.0).summary() == (
        "exported 0 records in 0.0 s (0/s; opening the tenant 0.0 s): ; epoch e"
    )


def test_every_record_is_exported_past_any_page_limit(data):
    """An export is not a page: 1,100 records (past the API's default and largest page) are
    all written."""
    directory = create_tenant(str(data), "many")
    store = open_store(directory)

    async def go() -> None:
        for i in range(1, 1101):
            await store.insert("User", user(i))

    asyncio.run(go())
    store.close()
    out = io.StringIO()
    report = export_records(directory, BLOG, out, [USER], {}, quiet=True)
    assert report.counts == {"User": 1100}
    assert out.getvalue().count("\n") == 1100


def test_quiet_draws_nothing_even_on_a_terminal(tenant):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    export_records(tenant, BLOG, io.StringIO(), BLOG.MODELS, {}, progress_stream=stream, quiet=True)
    assert stream.getvalue() == ""


def test_the_report_times_the_run_and_the_open_within_it(tenant):
    report = export_records(tenant, BLOG, io.StringIO(), BLOG.MODELS, {}, quiet=True)
    assert 0 <= report.open_seconds <= report.seconds < 60


def test_the_rate_is_counted_for_a_run_under_a_second():
    report = ExportReport({"User": 3}, {"User": 3}, "e", 0.5, 0.25)
    assert (
        report.summary() == "exported 3 records in 0.5 s (6/s; opening the tenant 0.2 s): User 3 (watermark 3); epoch e"
    )
