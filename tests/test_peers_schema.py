"""The peers' blog schema of the write figures (bench/peers_blog.dbs, issue 36 item 3) is
schemas/blog.dbs without `@search`, and nothing else: the issue's figures were filed on the
blog schema before text search, and the bench must measure that schema, not a lighter one."""

from __future__ import annotations

from pathlib import Path

from dbsvc.schema import load_schema

ROOT = Path(__file__).resolve().parent.parent
BLOG = ROOT / "schemas" / "blog.dbs"
PEERS = ROOT / "bench" / "peers_blog.dbs"


def _code_lines(path: Path) -> list[str]:
    """The file's lines less its leading comment block, trailing spaces cut."""
    lines = [line.rstrip() for line in path.read_text().splitlines()]
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def test_peers_schema_is_blog_without_search() -> None:
    blog = [line.replace(" @search", "").rstrip() for line in _code_lines(BLOG)]
    assert _code_lines(PEERS) == blog


def test_peers_schema_has_the_same_models_and_no_search_field() -> None:
    blog, peers = load_schema(str(BLOG)), load_schema(str(PEERS))
    assert [m.name for m in peers.models] == [m.name for m in blog.models]
    for theirs, ours in zip(peers.models, blog.models, strict=True):
        assert [f.name for f in theirs.fields] == [f.name for f in ours.fields]
        assert not any(f.searchable for f in theirs.fields)
    assert any(f.searchable for m in blog.models for f in m.fields)
