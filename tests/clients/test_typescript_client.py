"""The generated TypeScript client (issue 37 item 1): generated, compiled, typed, and run.

- Every schema under `schemas/` gives the same bytes twice, with its fingerprint in the
  header, and compiles with `tsc --strict --noEmit` (npm `typescript`, pinned in
  tests/clients/ts/package.json; `.ci/run` installs it; without it these tests skip).
- A type test: a wrong filter name, a wrong value type, an undeclared sort key or projection
  and a missing required field each fail to compile (`@ts-expect-error` lines that would
  themselves fail if the line compiled), and the same lines without the directive give the
  compiler's own errors.
- Node and headless Chromium against a real server: CRUD, ETags, typed errors, a batch, cursor pages, then a
  subscription and a live query across a server restart mid-stream: every event of the log
  once, in order (checked against `/replicate`), and the live set equal to a fresh list.
"""

from __future__ import annotations

import contextlib
import io
import json
import select
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbsvc.cli import main as dbsvc_main
from support.client_kit import NODE, SCHEMAS, TS_DIR, TSC, TSC_FLAGS, log_events
from support.server import ROOT, start_server

needs_tsc = pytest.mark.skipif(
    not TSC.exists() or NODE is None,
    reason="npm typescript not installed (cd tests/clients/ts && npm ci; .ci/run does it)",
)


def generate(schema: Path, output: Path) -> str:
    with contextlib.redirect_stdout(io.StringIO()):
        status = dbsvc_main(["client", str(schema), "--lang", "typescript", "-o", str(output)])
    assert status == 0, f"dbsvc client {schema} --lang typescript exited {status}"
    return output.read_text(encoding="utf-8")


class TscMany:
    """tsc's command line run in one Node process for the whole file (ts/tsc_many.cjs): the
    compiler loaded and the libs parsed once, not once a compile; the same exit status and
    diagnostics as `tsc` (test_typescript_feed_state.py and the guide's example run `tsc`)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def run(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        if self.proc is None or self.proc.poll() is not None:
            assert NODE is not None
            script = str(TS_DIR / "tsc_many.cjs")
            self.proc = subprocess.Popen([NODE, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"cwd": str(cwd), "args": args}) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], 300)[0]:  # the bound `tsc` had
            self.close()
            pytest.fail(f"tsc {' '.join(args)} did not finish within 300 s")
        answer = json.loads(self.proc.stdout.readline())
        return subprocess.CompletedProcess(["tsc", *args], answer["status"], answer["output"], "")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


TSC_MANY = TscMany()


@pytest.fixture(scope="module", autouse=True)
def _tsc_many_closed() -> Iterator[None]:
    yield
    TSC_MANY.close()


def tsc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return TSC_MANY.run([*TSC_FLAGS, *args], cwd)


SHIPPED = sorted(SCHEMAS.glob("*.dbs")) + sorted((ROOT / "dbsvc" / "templates").glob("*.dbs"))


def test_every_schema_gives_the_same_bytes_twice_with_its_fingerprint(tmp_path):
    from dbsvc.schema import load_schema
    from dbsvc.schema.describe import describe_schema, schema_fingerprint

    for schema in SHIPPED:
        first = generate(schema, tmp_path / "a.ts")
        assert generate(schema, tmp_path / "b.ts") == first, schema.name
        fingerprint = schema_fingerprint(describe_schema(load_schema(str(schema))))
        assert first.startswith(
            f"// TypeScript client of the dbsvc service of {schema.name} (schema fingerprint {fingerprint}).\n"
        )
        assert f'export const SCHEMA_FINGERPRINT = "{fingerprint}";' in first


@needs_tsc
def test_the_fixed_parts_compile_strict_on_their_own():
    run = tsc("--noEmit", "ts_rest.ts", "ts_feeds.ts", cwd=ROOT / "dbsvc" / "clients")
    assert run.returncode == 0, run.stdout + run.stderr


@needs_tsc
def test_every_shipped_schemas_client_compiles_strict(tmp_path):
    names = []
    for schema in SHIPPED:
        folder = tmp_path / schema.stem  # each client a module of its own: they may share type names
        folder.mkdir()
        generate(schema, folder / "client.ts")
        names.append(f"{schema.stem}/client.ts")
    run = tsc("--noEmit", *names, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


TYPE_TEST = """\
import { Client, User, UserCard, BlogPost } from "./blog.js";

export async function usage(client: Client): Promise<void> {
  const page = await client.user.list({ role: "admin", age__gte: 18, name__prefix: "A", sort: ["-age", "name"], limit: 20 });
  const first: User | undefined = page.data[0];
  const cards: UserCard[] = (await client.user.card.list({ role: ["admin", "editor"] })).data;
  const posts: BlogPost[] = (await client.blogPost.list({ search: "two words", expand: "author_id:card" })).data;
  const id: number = await client.user.create({ email: "a@example.com", name: "A" });
  await client.user.patch(id, { age: null }, { ifMatch: '"3"' });
  client.subscribe("blog-post", { published: true }, (event) => event.record?.title);
  client.liveQuery("User", { age__null: false }).close();
  void first, cards, posts;
}

export async function mistakes(client: Client): Promise<void> {
  // @ts-expect-error a filter the schema does not declare
  await client.user.list({ nosuch: "x" });
  // @ts-expect-error a filter value of the wrong type (age is an int)
  await client.user.list({ age__gt: "old" });
  // @ts-expect-error a sort key that is not @sort (email)
  await client.user.list({ sort: "email" });
  // @ts-expect-error an enum member the schema does not list
  await client.user.list({ role: "owner" });
  // @ts-expect-error a projection the model does not have
  await client.user.summary.list();
  // @ts-expect-error a create without its required name
  await client.user.create({ email: "a@example.com" });
  // @ts-expect-error a record field of the wrong type
  await client.user.patch(1, { age: "31" });
  // @ts-expect-error a model the schema does not have
  client.subscribe("nosuch", {}, () => undefined);
}
"""


@needs_tsc
def test_a_wrong_filter_name_or_value_type_fails_to_compile(tmp_path):
    generate(SCHEMAS / "blog.dbs", tmp_path / "blog.ts")
    (tmp_path / "usage.ts").write_text(TYPE_TEST)
    run = tsc("--noEmit", "usage.ts", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr  # each @ts-expect-error met its error
    # Without the directives, the compiler names each mistake.
    (tmp_path / "usage.ts").write_text(TYPE_TEST.replace("// @ts-expect-error", "//"))
    run = tsc("--noEmit", "usage.ts", cwd=tmp_path)
    assert run.returncode != 0
    errors = [line for line in run.stdout.splitlines() if "error TS" in line]
    assert len(errors) == 8, run.stdout
    assert "'nosuch' does not exist in type 'UserQuery'" in run.stdout
    assert "Type 'string' is not assignable to type 'number'" in run.stdout
    assert "Property 'summary' does not exist on type 'UserApi'" in run.stdout
    assert "Property 'name' is missing" in run.stdout


@needs_tsc
def test_node_crud_errors_and_feeds_across_a_restart_mid_stream(tmp_path):
    generate(SCHEMAS / "blog.dbs", tmp_path / "blog.ts")
    shutil.copy(TS_DIR / "scenario.ts", tmp_path / "scenario.ts")
    (tmp_path / "package.json").write_text('{"type": "module"}\n')
    types = ["--types", "node", "--typeRoots", str(TS_DIR / "node_modules" / "@types")]  # node:assert, process
    run = tsc(*types, "--outDir", "out", "scenario.ts", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "out" / "package.json").write_text('{"type": "module"}\n')

    data = tmp_path / "data"
    server = start_server(SCHEMAS / "blog.dbs", data)
    port = server.port
    node = subprocess.Popen(
        [NODE, "--experimental-websocket", "--no-warnings", str(tmp_path / "out" / "scenario.js"), str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None and node.stdin is not None
        assert node.stdout.readline().strip() == "CRUD ok", node.stderr.read() if node.stderr else ""
        assert node.stdout.readline().strip() == "READY"
        write(port, "before")
        assert server.stop(signal.SIGTERM, timeout=30) == 0  # the feeds get 1001, or lose the socket
        server = start_server(SCHEMAS / "blog.dbs", data, {"SERVICE_PORT": str(port)})
        write(port, "after")
        head = int(server.get("/api/user?limit=0").headers["dbsvc-offset"])
        node.stdin.write(f"HEAD {head}\n")
        node.stdin.flush()
        out, err = node.communicate(timeout=120)
        assert node.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        logged = [e for e in log_events(port, head) if e["model"] == "User"]
    finally:
        if node.poll() is None:
            node.kill()
        server.stop()
    start = report["events"][0][0] if report["events"] else head
    expected = [[e["offset"], e["kind"], e["id"], e.get("record")] for e in logged if e["offset"] >= start]
    assert report["events"] == expected  # every event once, in order, records byte-equal
    assert len(report["events"]) >= 2 * 8
    assert report["live"] == report["fresh"]
    assert report["errors"] == ["null", "null"] and report["resets"] == 0
    assert min(report["connects"]) >= 2  # both feeds did reconnect


def write(port: int, prefix: str, headers: dict[str, str] | None = None) -> None:
    """Creates, a merge out of and into the live query's filter (role=admin), a delete, a batch."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(method: str, path: str, body: object | None = None) -> dict:
        sent = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, None if body is None else json.dumps(body), sent)
        reply = conn.getresponse()
        data = reply.read()
        assert reply.status < 300, (method, path, reply.status, data)
        return json.loads(data) if data else {}

    ids = [
        call(
            "POST",
            "/api/user",
            {"email": f"{prefix}{i}@example.com", "name": f"{prefix}{i}", "role": "admin" if i % 2 else "reader"},
        )["id"]
        for i in range(6)
    ]
    call("PATCH", f"/api/user/{ids[0]}", {"role": "admin"})
    call("PATCH", f"/api/user/{ids[1]}", {"role": "editor"})
    call("DELETE", f"/api/user/{ids[2]}")
    ops = [
        {
            "op": "create",
            "model": "user",
            "record": {"email": f"{prefix}b{i}@example.com", "name": "B", "role": "admin"},
        }
        for i in range(3)
    ]
    call("POST", "/batch", {"ops": ops})
    conn.close()


@needs_tsc
def test_in_headless_chromium_across_a_restart_through_cors_and_the_bearer_subprotocol(tmp_path):
    """A page of another origin: REST through CORS, the feeds' token as the `bearer.<JWT>`
    subprotocol (a browser cannot set Authorization on a WebSocket); the server restarted
    mid-stream, the subscription hands over every event of the log once, in order, and the
    live set equals a fresh list."""
    import functools
    import http.server
    import socket
    import threading
    from urllib.parse import urlencode

    from selenium.webdriver.common.by import By

    from support.explorer_kit import open_driver, wait_for
    from support.idp import TestIdp

    generate(SCHEMAS / "blog.dbs", tmp_path / "blog.ts")
    for name in ("browser.ts", "browser.html"):
        shutil.copy(TS_DIR / name, tmp_path / name)
    run = tsc("--outDir", "out", "browser.ts", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    shutil.copy(tmp_path / "browser.html", tmp_path / "out" / "browser.html")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    static = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "out"))
    )
    threading.Thread(target=static.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{static.server_address[1]}"
    with socket.socket() as probe:  # a fixed port: the restarted server is the same origin
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    idp = TestIdp(tmp_path / "idp")
    data = idp.data_dir()
    env = idp.server_env(SERVICE_CORS_ORIGINS=origin, SERVICE_PORT=str(port))
    auth = {"Authorization": f"Bearer {idp.token()}"}
    server = start_server(SCHEMAS / "blog.dbs", data, env)
    driver = open_driver()
    try:
        query = urlencode({"server": f"http://127.0.0.1:{port}", "token": idp.token()})
        driver.get(f"{origin}/browser.html?{query}")
        phase = driver.find_element(By.ID, "phase")
        result = driver.find_element(By.ID, "result")
        wait_for(driver, lambda: phase.text == "ready" or result.text != "running", "the page's feeds", timeout=90)
        assert result.text == "running", result.text
        write(port, "before", auth)
        assert server.stop(signal.SIGTERM, timeout=30) == 0
        server = start_server(SCHEMAS / "blog.dbs", data, env)
        write(port, "after", auth)
        head = int(server.get("/api/user?limit=0", headers=auth).headers["dbsvc-offset"])
        driver.execute_script("window.finish(arguments[0])", head)
        wait_for(driver, lambda: result.text != "running", "the page's result", timeout=120)
        text = result.text
        assert not text.startswith("error"), text
        report = json.loads(text)
        logged = [e for e in log_events(port, head, token=idp.token()) if e["model"] == "User"]
    finally:
        driver.quit()
        static.shutdown()
        server.stop()
    assert report["listed"] == [report["id"]]
    assert report["refusal"] == "422 constraint_violation name"
    assert report["reached"] is True and report["liveEqual"] is True
    start = report["events"][0][0]
    assert report["events"] == [
        [e["offset"], e["kind"], e["id"], e.get("record")] for e in logged if e["offset"] >= start
    ]
    assert len(report["events"]) >= 2 * 8
    assert report["errors"] == ["null", "null"]
    assert min(report["connects"]) >= 2  # both feeds did reconnect


def test_a_built_app_writes_the_same_typescript_client(tmp_path):
    """The zipapp carries ts_rest.ts and ts_feeds.ts (package data): `client` works from it too."""
    import sys

    app = tmp_path / "blog.pyz"
    with contextlib.redirect_stdout(io.StringIO()):
        assert dbsvc_main(["build", str(SCHEMAS / "blog.dbs"), "-o", str(app)]) == 0
    run = subprocess.run(
        [sys.executable, str(app), "client", "--lang", "typescript", "-o", str(tmp_path / "from_app.ts")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "from_app.ts").read_text(encoding="utf-8") == generate(SCHEMAS / "blog.dbs", tmp_path / "a.ts")


def node_scripts(directory: Path, schema: str, *scripts: str) -> dict[str, Path]:
    """`scripts` (tests/clients/ts) compiled in one tsc run beside the client of `schema`
    (tsc is the slow part): each script's .js to run, by its name."""
    generate(SCHEMAS / f"{schema}.dbs", directory / f"{schema}.ts")
    for script in scripts:
        shutil.copy(TS_DIR / script, directory / script)
    types = ["--types", "node", "--typeRoots", str(TS_DIR / "node_modules" / "@types")]
    run = tsc(*types, "--outDir", "out", *scripts, cwd=directory)
    assert run.returncode == 0, run.stdout + run.stderr
    (directory / "out" / "package.json").write_text('{"type": "module"}\n')
    return {script: directory / "out" / script.replace(".ts", ".js") for script in scripts}


@pytest.fixture(scope="module")
def blog_scripts(tmp_path_factory) -> dict[str, Path]:
    return node_scripts(tmp_path_factory.mktemp("blog-scripts"), "blog", "token_expiry.ts", "fixed_token.ts")


@pytest.fixture(scope="module")
def inventory_scripts(tmp_path_factory) -> dict[str, Path]:
    return node_scripts(tmp_path_factory.mktemp("inventory-scripts"), "inventory", "offset_gone.ts", "read_after.ts")


def run_node(script: Path, *args: str) -> dict:
    run = subprocess.run(
        [NODE, "--experimental-websocket", "--no-warnings", str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@needs_tsc
def test_node_a_feed_whose_token_expires_asks_for_a_new_one_and_misses_nothing(tmp_path, blog_scripts):
    import time

    from support.idp import TestIdp

    script = blog_scripts["token_expiry.ts"]
    idp = TestIdp(tmp_path / "idp")
    server = start_server(SCHEMAS / "blog.dbs", idp.data_dir(), idp.server_env(SERVICE_JWT_LEEWAY="0"))
    node = subprocess.Popen(
        [NODE, "--experimental-websocket", "--no-warnings", str(script), str(server.port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdin is not None and node.stdout is not None
        deadline, asked = time.monotonic() + 120, 0
        while select.select([node.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            line = node.stdout.readline()
            if line != "TOKEN\n":
                break
            # minted when asked, not before Node starts (a 3 s token minted up front had
            # expired before the first create at load 15): the first two, the subscription's
            # first read and socket, live 3 s, so the server closes that socket with 4401
            node.stdin.write((idp.token(exp=int(time.time()) + 3) if asked < 2 else idp.token()) + "\n")
            node.stdin.flush()
            asked += 1
        else:
            pytest.fail("token_expiry.js did not finish within 120 s")
        assert node.wait(timeout=30) == 0, node.stderr.read() if node.stderr else ""
        report = json.loads(line)
    finally:
        if node.poll() is None:
            node.kill()
        server.stop()
    assert report["reached"] is True and report["error"] == "null"
    assert report["connects"] >= 2
    assert report["ids"] == report["expected"]


@needs_tsc
def test_node_an_offset_the_server_no_longer_holds_resets_the_feed_and_says_so(tmp_path, inventory_scripts):
    script = inventory_scripts["offset_gone.ts"]
    server = start_server(SCHEMAS / "inventory.dbs", tmp_path / "data")  # no broker: a ring of 256
    try:
        report = run_node(script, str(server.port))
    finally:
        server.stop()
    assert report == {"reached": True, "resets": ["true 410 offset_gone"], "ids": ["LAST"], "error": "null"}


@needs_tsc
def test_node_a_refused_fixed_token_ends_the_feed_and_says_so(tmp_path, blog_scripts):
    """No token function to ask: the 401 of the handshake (read over HTTP, as a browser
    must) ends the feed, with `onError` called once."""
    import time

    from support.idp import TestIdp

    script = blog_scripts["fixed_token.ts"]
    idp = TestIdp(tmp_path / "idp")
    server = start_server(SCHEMAS / "blog.dbs", idp.data_dir(), idp.server_env(SERVICE_JWT_LEEWAY="0"))
    try:
        expired = idp.token(exp=int(time.time()) - 60)
        report = run_node(script, str(server.port), idp.token(), expired)
    finally:
        server.stop()
    assert report["ended"] is True
    assert report["errors"] == ["401 unauthorized"]
    assert report["error"].startswith("UnauthorizedError: HTTP 401 unauthorized: ")
    assert report["connects"] == 0


@needs_tsc
def test_node_reads_carry_the_offset_of_the_clients_last_write(tmp_path, inventory_scripts):
    """`Dbsvc-After` (docs/guide/clients.md): none before the first write; after it, every
    read carries the highest offset a write was answered with; a refused write changes
    nothing; writes carry none. The header reaches a real server (which, one process,
    ignores it)."""
    script = inventory_scripts["read_after.ts"]
    server = start_server(SCHEMAS / "inventory.dbs", tmp_path / "data")
    try:
        report = run_node(script, str(server.port))
    finally:
        server.stop()
    created, patched = 1, 2  # the offsets of the create and the patch: the tenant's first two rows
    assert [(s["method"], s["path"], s["after"]) for s in report["seen"]] == [
        ("GET", "/api/warehouse", None),
        ("POST", "/api/warehouse", None),
        ("GET", "/api/warehouse/W1", str(created)),
        ("POST", "/api/warehouse", None),
        ("GET", "/api/warehouse/W1", str(created)),
        ("PATCH", "/api/warehouse/W1", None),
        ("GET", "/api/warehouse", str(patched)),
    ]
    assert report["total"] == [0, 1] and report["city"] == "Oslo" and report["head"] == patched
    assert report["refused"].startswith("409 ")
