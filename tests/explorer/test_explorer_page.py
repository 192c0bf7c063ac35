"""The explorer's page as the server serves it: where it is on, its headers, its size, and what
it may load. Real servers on port 0; the page's files are read from the package like the
server reads them."""

from __future__ import annotations

import ast
import configparser
import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dbsvc.explorer import explorer_enabled
from dbsvc.explorer.page import ASSETS
from support.idp import TestIdp
from support.server import ROOT, server_pool

EXPLORER_DIR = ROOT / "dbsvc" / "explorer"
BLOG = ROOT / "schemas" / "blog.dbs"
# docs/explorer.md's text, not the module's constant: widening the constant must fail here.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def asset_bytes(name: str) -> bytes:
    return (EXPLORER_DIR / ASSETS[name][0]).read_bytes()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One default server (loopback, no guard: the explorer on) for the module's tests that
    only read the page, its assets, its refusals and the OpenAPI document: none writes
    (the refused POST included), so none sees another's traces."""
    with server_pool(tmp_path_factory.mktemp("served") / "data") as pool:
        yield pool()


def test_page_and_assets_are_served_with_a_strict_policy(served):
    server = served
    for name, (filename, content_type) in ASSETS.items():
        reply = server.get(f"/_/{name}")
        assert reply.status == 200, (name, reply)
        assert reply.body == (EXPLORER_DIR / filename).read_bytes()
        assert reply.headers["content-type"] == content_type
        assert reply.headers["content-security-policy"] == CSP
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
        assert reply.headers["cache-control"] == "no-cache"
    head = server.request("HEAD", "/_/")
    assert head.status == 200 and head.body == b""


def test_the_documented_headers_are_the_ones_served():
    # docs/explorer.md is what operators read; the literal CSP above (and in
    # test_explorer_answers.py, which checks every header's exact value and order) is its text.
    text = (ROOT / "docs" / "explorer.md").read_text()
    for header in (
        f"Content-Security-Policy: {CSP}",
        "X-Content-Type-Options: nosniff",
        "Referrer-Policy: no-referrer",
        "Cache-Control: no-cache",
    ):
        assert f"`{header}`" in text, header


def test_explorer_paths_answer_redirect_405_and_404(served):
    server = served
    redirect = server.get("/_")
    assert redirect.status == 308 and redirect.headers["location"] == "/_/"
    refused = server.request("POST", "/_/", body={"a": 1})
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD"
    missing = server.get("/_/secret.txt")
    assert missing.status == 404
    assert missing.json["code"] == "not_found" and "/_/explorer.js" in missing.json["detail"]
    assert server.get("/_/../api/user").status == 404  # a name lookup: no path walks
    assert server.get("/_/page.py").status == 404  # only the listed files
    assert server.get("/api/user").status == 200  # the API is untouched


def test_the_openapi_document_does_not_describe_the_explorer(served):
    paths = served.get("/openapi.json").json["paths"]
    assert not [p for p in paths if p.startswith("/_")]


@pytest.mark.parametrize(
    ("setting", "host", "guarded", "expected"),
    [
        (None, "127.0.0.1", False, True),
        (None, "127.0.0.53", False, True),
        (None, "::1", False, True),
        (None, "localhost", False, True),
        (None, "0.0.0.0", False, False),
        (None, "192.168.1.10", False, False),
        (None, "db.example.com", False, False),
        (None, "127.0.0.1", True, False),
        (True, "0.0.0.0", True, True),
        (False, "127.0.0.1", False, False),
    ],
)
def test_explorer_default_is_loopback_without_guard(setting, host, guarded, expected):
    assert explorer_enabled(setting, host, guarded) is expected


def test_service_explorer_off_makes_the_page_an_unknown_route(serve):
    server = serve(env={"SERVICE_EXPLORER": "off"})
    assert server.get("/_/").status == 404
    assert server.get("/_/explorer.js").status == 404
    assert server.get("/health").status == 200


def test_a_wildcard_bind_has_no_explorer_unless_asked(serve, tmp_path):
    server = serve(env={"SERVICE_HOST": "0.0.0.0"})
    assert server.get("/_/").status == 404
    server = serve(env={"SERVICE_HOST": "0.0.0.0", "SERVICE_EXPLORER": "ON"}, data_dir=tmp_path / "other")
    assert server.get("/_/").status == 200


def test_a_guarded_service_has_no_explorer_by_default_and_the_page_needs_no_token(serve, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    server = serve(env=idp.server_env(), data_dir=idp.data_dir())
    assert server.get("/_/").status == 404
    idp2 = TestIdp(tmp_path / "idp2")
    server = serve(env=idp2.server_env(SERVICE_EXPLORER="on"), data_dir=idp2.data_dir())
    assert server.get("/_/").status == 200  # static: no token needed
    assert server.get("/api/user").status == 401  # the data still is guarded
    assert server.get("/api/user", headers={"Authorization": f"Bearer {idp2.token()}"}).status == 200


def test_a_bad_service_explorer_value_exits_2_and_leaves_the_tenant_intact(serve, tmp_path):
    data = tmp_path / "data"
    server = serve(data_dir=data)
    assert server.post("/api/user", {"email": "keep@example.com", "name": "Keep"}).status == 201
    assert server.stop() == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_")}
    env.update(SERVICE_DATA=str(data), SERVICE_PORT="0", SERVICE_EXPLORER="maybe")
    run = subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == ("dbsvc: error: SERVICE_EXPLORER='maybe' is not valid: expected one of on, off")
    again = serve(data_dir=data)
    assert [r["email"] for r in again.get("/api/user").json["data"]] == ["keep@example.com"]


# ---------------------------------------------------------------- the files themselves


def test_page_and_assets_stay_under_100_kb_together():
    total = sum(len(asset_bytes(name)) for name in ASSETS)
    assert total < 100 * 1024, f"the explorer's files weigh {total} bytes"


def test_the_page_loads_nothing_from_elsewhere_and_has_no_inline_code():
    html = asset_bytes("").decode()
    for name in ASSETS:
        text = asset_bytes(name).decode()
        assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", text), name  # no CDN
        assert not re.search(r"\b(?:fetch|WebSocket)\(\s*[\"'`](?:https?|wss?):", text), name
    css = asset_bytes("explorer.css").decode()
    assert "@import" not in css and "url(" not in css  # no fonts, no images
    referenced = set(re.findall(r'(?:src|href)="([^"#?]+)"', html)) - {"../openapi.json"}
    assert referenced == {
        "favicon.svg",
        "explorer.css",
        "explorer-query.js",
        "explorer-edit.js",
        "explorer-record.js",
        "explorer-live.js",
        "explorer.js",
    }
    # the query form, the record form and pane first: explorer.js reads them (deferred scripts run in document order)
    assert re.findall(r"<script\b[^>]*>", html) == [
        '<script src="explorer-query.js" defer>',
        '<script src="explorer-edit.js" defer>',
        '<script src="explorer-record.js" defer>',
        '<script src="explorer-live.js" defer>',
        '<script src="explorer.js" defer>',
    ]
    assert not re.search(r"\son[a-z]+\s*=", html)  # no inline handlers
    assert "style=" not in html and "<style" not in html


def test_the_script_never_builds_html_or_code_from_strings():
    script = "".join(asset_bytes(name).decode() for name in ASSETS if name.endswith(".js"))
    for forbidden in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setTimeout(\"",
        "setInterval(\"",
    ):
        assert forbidden not in script, forbidden


def test_the_explorer_adds_no_runtime_dependency():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    required = [line.strip() for line in config["options"]["install_requires"].splitlines() if line.strip()]
    assert [re.split(r"[<>=!~ ]", r)[0] for r in required] == ["h11", "wsproto"]
    stdlib = set(sys.stdlib_module_names)
    for module in EXPLORER_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.partition(".")[0]
                assert top == "__future__" or top in stdlib or top == "dbsvc", (module.name, name)


def test_the_files_are_package_data_for_pip_and_the_zipapp():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    globs = [g.strip() for g in config["options.package_data"]["dbsvc.explorer"].split(",")]
    for filename, _kind in ASSETS.values():
        assert any(fnmatch.fnmatch(filename, g) for g in globs), filename
    template = config["options.package_data"]["dbsvc"].strip()
    assert fnmatch.fnmatch("templates/starter.dbs", template)
    assert Path(ROOT / "dbsvc" / "templates" / "starter.dbs").is_file()
