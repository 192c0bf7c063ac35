"""The project points only at itself: no file names the documents the service was specified
in (`interface.md`, `contract.md`, their numbered sections) or the directory they lived in.
The user guide (docs/guide/) is where those promises are written down now, so a reference
to them becomes a reference to its chapter; and every `docs/guide/<chapter>.md#anchor`
named anywhere in the repository must lead to a heading that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.guide_kit import GUIDE, ROOT

SKIPPED_DIRS = {
    ".git",
    "mutants",
    ".hypothesis",
    ".mypy_cache",
    "__pycache__",
    "dbsvc.egg-info",
    ".pytest_cache",
    "node_modules",
}
THIS_FILE = Path(__file__).resolve()

OUTSIDE = re.compile(
    r"interface\.md|contract\.md"  # the documents themselves
    r"|\b(?:contract|interface)(?:'s)?\s+(?:sections?|§)"  # "contract section 3", "interface §5"
    r"|\bthe\s+contract\b"  # "as the contract says"
    r"|/work/shared",  # where they were kept
    re.IGNORECASE,
)
GUIDE_LINK = re.compile(r"docs/guide/([a-z-]+\.md)#([a-z0-9_-]+)|\]\(([a-z-]+\.md)#([a-z0-9_-]+)\)")


def project_text_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if any(part in SKIPPED_DIRS for part in relative.parts) or not path.is_file():
            continue
        if path.resolve() == THIS_FILE:
            continue
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary: images, corpora, zipapps
        files.append(path)
    return files


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(chapter: Path) -> set[str]:
    found = set()
    in_fence = False
    for line in chapter.read_text(encoding="utf-8").splitlines():
        if line.startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def test_no_file_points_at_the_outside_specification():
    hits = []
    for path in project_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "references outside the project (point at docs/guide/ instead):\n" + "\n".join(hits)


def test_the_pattern_catches_each_form():
    for text in (
        "see interface.md",
        "contract.md settles it",
        "(contract section 3)",
        "contract sections 3 and 5",
        "interface section 5",
        "contract §4",
        "as the contract says",
        "/work/shared/style.md",
    ):
        assert OUTSIDE.search(text), text
    for text in (
        "a public contract, like PostgREST's",
        "the service's contract",
        "docs/guide/errors.md",
        "test_events_in_contract_layout",
    ):
        assert not OUTSIDE.search(text), text


def test_every_guide_anchor_named_in_the_repository_exists():
    known = {chapter.name: anchors(chapter) for chapter in GUIDE.glob("*.md")}
    broken = []
    for path in project_text_files():
        in_guide = path.parent == GUIDE
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in GUIDE_LINK.finditer(line):
                chapter, anchor = (
                    (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
                )
                if match.group(3) and not in_guide:
                    continue  # a relative link elsewhere: not a guide chapter
                if chapter not in known or anchor not in known[chapter]:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {chapter}#{anchor}")
    assert not broken, "links to guide headings that do not exist:\n" + "\n".join(broken)
