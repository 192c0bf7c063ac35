"""The explorer's answers at the unit where they are decided (`ExplorerPage.answer`, `owns`,
`is_loopback`, `explorer_enabled`), in this process: the status, the exact headers and the
exact refusal texts, each against a literal written here or the text docs/explorer.md
promises, never against the module's own constants (a widened policy must fail here).

In process on purpose: mutmut (docs/mutation.md) sees only the calls its own process makes,
and test_explorer_page.py's servers run in child processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dbsvc.errors import MethodNotAllowed, NotFound
from dbsvc.explorer import ExplorerPage, explorer_enabled
from dbsvc.explorer.page import is_loopback
from dbsvc.http.types import Request

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "dbsvc" / "explorer"

# The policy as docs/explorer.md states it ("A strict policy"), byte for byte
# (test_explorer_page.py holds the document to this text: mutmut's copy has no docs/).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


def get(path: str, method: str = "GET") -> Request:
    return Request(method, path, path, [], [])


@pytest.fixture(scope="module")
def page() -> ExplorerPage:
    return ExplorerPage()


@pytest.mark.parametrize(
    ("path", "filename", "content_type"),
    [
        ("/_/", "index.html", "text/html; charset=utf-8"),
        ("/_/explorer.css", "explorer.css", "text/css; charset=utf-8"),
        ("/_/explorer.js", "explorer.js", "text/javascript; charset=utf-8"),
        ("/_/explorer-query.js", "explorer-query.js", "text/javascript; charset=utf-8"),
        ("/_/explorer-edit.js", "explorer-edit.js", "text/javascript; charset=utf-8"),
        ("/_/explorer-record.js", "explorer-record.js", "text/javascript; charset=utf-8"),
        ("/_/explorer-live.js", "explorer-live.js", "text/javascript; charset=utf-8"),
        ("/_/favicon.svg", "favicon.svg", "image/svg+xml"),
    ],
)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_each_file_is_answered_with_its_bytes_type_and_the_documented_headers(
    page, path, filename, content_type, method
):
    response = page.answer(get(path, method))
    assert response.status == 200
    assert response.body == (FILES / filename).read_bytes()
    assert response.content_type == content_type
    assert response.headers == HEADERS  # names, values and order, exactly


def test_each_answer_has_its_own_header_list(page):
    # A caller (CORS, the protocol layer) may add to a response's headers: that must not
    # reach the next answer.
    first = page.answer(get("/_/"))
    first.headers.append(("Access-Control-Allow-Origin", "*"))
    assert page.answer(get("/_/explorer.js")).headers == HEADERS


def test_the_bare_prefix_redirects_to_the_page_with_its_slash(page):
    response = page.answer(get("/_"))
    assert (response.status, response.body, response.headers, response.content_type) == (
        308,
        b"",
        [("Location", "/_/")],
        None,
    )


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get"])
def test_other_methods_are_refused_with_405_naming_the_method_and_path(page, method):
    with pytest.raises(MethodNotAllowed) as refused:
        page.answer(get("/_/explorer.js", method))
    assert refused.value.detail == f"method {method!r} is not allowed on '/_/explorer.js'"
    assert refused.value.allow == ["GET", "HEAD"]
    assert refused.value.headers == [("Allow", "GET, HEAD")]


def test_a_405_is_decided_before_the_redirect(page):
    with pytest.raises(MethodNotAllowed):
        page.answer(get("/_", "POST"))


@pytest.mark.parametrize(
    "path",
    ["/_/secret.txt", "/_/page.py", "/_/index.html", "/_/../api/user", "/_//", "/_/explorer.js/", "/_/Explorer.js"],
)
def test_an_unlisted_path_is_404_naming_it_and_the_files_there_are(page, path):
    with pytest.raises(NotFound) as missing:
        page.answer(get(path))
    assert missing.value.detail == (
        f"no explorer file at {path!r}: expected one of /_/, /_/explorer.css, /_/explorer.js, /_/explorer-query.js, "
        "/_/explorer-edit.js, /_/explorer-record.js, /_/explorer-live.js, "
        "/_/favicon.svg"
    )


@pytest.mark.parametrize(
    ("path", "owned"),
    [
        ("/_", True),
        ("/_/", True),
        ("/_/explorer.js", True),
        ("/_/anything/below", True),
        ("/_x", False),
        ("/__", False),
        ("/", False),
        ("", False),
        ("/api/_/", False),
        ("/_x/", False),
    ],
)
def test_owns_the_bare_prefix_and_everything_under_it_only(path, owned):
    assert ExplorerPage.owns(path) is owned


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LocalHost", True),
        ("127.0.0.1", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("128.0.0.1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("10.0.0.1", False),
        ("localhost.example.com", False),
        ("db.example.com", False),
        ("X::1X", False),  # only the brackets of "[::1]" come off, no other character
        ("", False),
    ],
)
def test_is_loopback_only_for_addresses_that_stay_on_this_machine(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("setting", "host", "guarded", "enabled"),
    [
        (None, "127.0.0.1", False, True),
        (None, "[::1]", False, True),
        (None, "127.0.0.1", True, False),
        (None, "0.0.0.0", False, False),
        (None, "0.0.0.0", True, False),
        (True, "0.0.0.0", True, True),
        (True, "127.0.0.1", False, True),
        (False, "127.0.0.1", False, False),
        (False, "0.0.0.0", True, False),
    ],
)
def test_the_setting_decides_when_given_else_a_loopback_bind_without_the_guard(setting, host, guarded, enabled):
    assert explorer_enabled(setting, host, guarded) is enabled
