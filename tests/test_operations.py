"""Operations (issue 32 items 4, 7, 9, 10, 11): what an operator meets once a server runs.

Each case runs real server processes on loopback ports they choose and reads what they
write (standard output, standard error) and answer:

- a read replica is not ready (`/ready` 503, saying what it waits for) until its first
  bootstrap, and its banner and `/health` name its primary (item 9);
- `/metrics` in the Prometheus text format on `Accept: text/plain` or `?format=prometheus`,
  read back with prometheus_client's own parser; JSON stays the default (item 11);
- `/api/` lists the models, their routes and the documents; `/` redirects to the
  explorer or the index; a 0.0.0.0 bind prints a reachable address (item 4);
- with `SERVICE_LOG_FORMAT=json` every line the process writes is one JSON object (item 7);
- `dbsvc export` against a running server takes the consistent copy itself, and export
  and import read the tenant's own schema when none is given (item 10).

Every wait is a poll with a deadline.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.ports import free_port
from support.server import LISTENING, ROOT, Server, service_env, wait_for_port

BLOG = ROOT / "schemas" / "blog.dbs"


class Process(Server):
    """A server whose standard output is kept too (`out`: its lines, read by a thread)."""

    out: list[str]


def start(schema: Path, data: Path, env: dict | None = None, args: tuple[str, ...] = ()) -> Process:
    """`dbsvc serve SCHEMA`, stdout and stderr both read: stderr up to its `listening on`."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(schema), *args],
        cwd=ROOT,
        env=service_env(data, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    port = wait_for_port(proc, proc.stderr, LISTENING, log, 60)
    out: list[str] = []

    def drain(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    readers = tuple(
        threading.Thread(target=drain, args=(stream, lines), daemon=True)
        for stream, lines in ((proc.stderr, log), (proc.stdout, out))
    )
    for reader in readers:
        reader.start()
    server = Process(proc, port, data, log, readers)
    server.out = out
    return server


@pytest.fixture
def servers() -> Iterator[list[Process]]:
    """The servers a test started, killed when it ends."""
    started: list[Process] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


def poll(check, timeout: float = 60, what: str = "condition"):
    """`check()`'s first truthy answer, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout} s")


# -- item 9: a replica is ready once it has bootstrapped ---------------------------------------


def test_replica_is_not_ready_until_its_first_bootstrap_and_names_its_primary(tmp_path, servers):
    port = free_port()  # the primary is not there yet
    primary_url = f"http://127.0.0.1:{port}"
    replica = start(BLOG, tmp_path / "replica", args=("--follow", primary_url))
    servers.append(replica)

    ready = replica.get("/ready")
    assert ready.status == 503, ready
    assert ready.json["code"] == "unavailable"
    assert "first bootstrap" in ready.json["detail"] and primary_url in ready.json["detail"], ready.json
    health = replica.get("/health")
    assert health.status == 200  # alive all the same
    assert health.json["replica"]["primary"] == primary_url
    assert health.json["replica"]["ready"] is False
    assert "first bootstrap" in health.json["replica"]["waiting_for"]
    poll(lambda: any(primary_url in line for line in replica.out), 10, "the banner's replica line")
    banner = "".join(replica.out)
    assert f"Replica   of {primary_url}" in banner, banner

    primary = start(BLOG, tmp_path / "primary", env={"SERVICE_PORT": str(port)})
    servers.append(primary)
    assert primary.post("/api/user", {"email": "ann@example.com", "name": "Ann"}).status == 201
    poll(lambda: replica.get("/ready").status == 200, 60, "the replica's readiness")
    assert replica.get("/ready").json == {"status": "ready"}
    health = poll(lambda: (h := replica.get("/health").json["replica"])["state"] == "following" and h, 30, "following")
    assert health["ready"] is True and health["waiting_for"] is None
    poll(lambda: replica.get("/api/user").json["total"] == 1, 30, "the replica's copy")
    families = scrape(replica)  # item 11: the replica's state and lag in the text format too
    assert sample(families, "dbsvc_replica_ready", primary=primary_url) == 1
    assert sample(families, "dbsvc_replica_state", primary=primary_url, state="following") == 1
    assert sample(families, "dbsvc_replica_lag_offsets", primary=primary_url) >= 0


# -- item 11: /metrics in the Prometheus text format -------------------------------------------


def scrape(server: Server, path: str = "/metrics", accept: str | None = "text/plain") -> dict:
    """`path` read with prometheus_client's own parser: {family name: family}."""
    from prometheus_client.parser import text_string_to_metric_families

    reply = server.get(path, headers={"Accept": accept} if accept else None)
    assert reply.status == 200, reply
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4"), reply.headers
    return {family.name: family for family in text_string_to_metric_families(reply.body.decode("utf-8"))}


def sample(families: dict, name: str, suffix: str = "", **labels) -> float:
    """The value of the one sample `name + suffix` whose labels include `labels`."""
    found = [
        s.value
        for s in families[name].samples
        if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, suffix, labels, families[name].samples)
    return found[0]


def test_metrics_speak_prometheus_text_on_accept_and_stay_json_by_default(tmp_path, servers):
    server = start(BLOG, tmp_path / "data")
    servers.append(server)
    for i in range(3):
        assert server.post("/api/user", {"email": f"u{i}@example.com", "name": "U"}).status == 201
    assert server.get("/api/user/1").status == 200
    assert server.get("/api/user/99").status == 404
    assert server.get("/nowhere").status == 404

    plain = server.get("/metrics")  # curl's */*: JSON, as the interface says
    assert plain.headers["content-type"] == "application/json" and plain.json["total_rows"] == 3

    prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    families = scrape(server, accept=prometheus)  # what a Prometheus scrape sends
    assert families["dbsvc_http_requests"].type == "counter"
    assert sample(families, "dbsvc_http_requests", "_total", route="/api/user", method="POST", status="201") == 3
    assert sample(families, "dbsvc_http_requests", "_total", route="/api/user/{id}", method="GET", status="200") == 1
    assert sample(families, "dbsvc_http_requests", "_total", route="/api/user/{id}", method="GET", status="404") == 1
    assert sample(families, "dbsvc_http_requests", "_total", route="unmatched", method="GET", status="404") == 1
    assert families["dbsvc_http_request_duration_seconds"].type == "histogram"
    assert sample(families, "dbsvc_http_request_duration_seconds", "_count", route="/api/user") == 3
    assert sample(families, "dbsvc_http_request_duration_seconds", "_bucket", route="/api/user", le="+Inf") == 3
    assert sample(families, "dbsvc_writes", "_total") == 3
    assert 1 <= sample(families, "dbsvc_fsyncs", "_total") <= 3
    assert sample(families, "dbsvc_commit_batch_size", "_count") == sample(families, "dbsvc_fsyncs", "_total")
    assert sample(families, "dbsvc_commit_batch_size", "_sum") == 3
    assert sample(families, "dbsvc_log_bytes") > 0
    assert sample(families, "dbsvc_snapshot_bytes") == 0  # never compacted
    assert sample(families, "dbsvc_compactions", "_total") == 0
    assert sample(families, "dbsvc_rows", model="User") == 3
    assert sample(families, "dbsvc_http_connections_open") >= 1  # this scrape's own
    assert sample(families, "dbsvc_websockets_open") == 0
    assert sample(families, "dbsvc_lagged_closes", "_total") == 0
    assert "dbsvc_replica_lag_offsets" not in families and "dbsvc_access_refusals" not in families
    # The list answers kept of the present (SERVICE_LIST_CACHE_BYTES): none until a list is asked
    assert sample(families, "dbsvc_list_cache_entries") == 0 and sample(families, "dbsvc_list_cache_bytes") == 0
    listed = server.get("/api/user?limit=2")
    kept = scrape(server, accept=prometheus)
    assert sample(kept, "dbsvc_list_cache_entries") == 1
    link = len(listed.headers["link"])  # a next page follows: its Link is kept with the body
    assert sample(kept, "dbsvc_list_cache_bytes") == len(listed.body) + link

    by_query = scrape(server, "/metrics?format=prometheus", accept=None)
    assert sample(by_query, "dbsvc_writes", "_total") == 3
    bad = server.get("/metrics?format=xml")
    assert bad.status == 400 and "expected one of json, prometheus" in bad.json["detail"], bad
    assert server.get("/metrics?format=json").json["total_rows"] == 3


# -- item 4: the printed URLs answer ------------------------------------------------------------


def banner_urls(server: Process) -> dict[str, str]:
    """The ready banner's `NAME  URL` lines (waiting for its last line, the explorer's)."""
    poll(lambda: any(line.startswith("  Explorer") for line in server.out), 10, "the banner")
    return {line.split()[0]: line.split()[1] for line in server.out if line.startswith("  ")}


def test_api_index_lists_models_routes_and_documents_and_root_redirects(tmp_path, servers):
    server = start(BLOG, tmp_path / "data", env={"SERVICE_EXPLORER": "off"})
    servers.append(server)
    api = banner_urls(server)["API"]
    assert api == f"http://127.0.0.1:{server.port}/api/"

    index = server.get("/api/")
    assert index.status == 200, index
    body = index.json
    assert [m["name"] for m in body["models"]] == ["User", "BlogPost", "Comment"]
    post = body["models"][1]
    assert post["collection"] == {"path": "/api/blog-post", "methods": ["GET", "HEAD", "POST"]}
    assert post["item"]["path"] == "/api/blog-post/{id}" and "PATCH" in post["item"]["methods"]
    assert post["id"] == {"field": "id", "type": "int"} and "summary" in post["projections"]
    assert post["subscribe"] == "/subscribe/blog-post" and "title" in post["fields"]
    assert body["documents"] == {"openapi": "/openapi.json", "asyncapi": "/asyncapi.json", "explorer": None}
    assert "/health" in body["operations"] and body["replicate"] == "/replicate"
    assert body["batch"] == "/batch"
    for model in body["models"]:  # every route the index names answers
        assert server.get(model["collection"]["path"]).status == 200
    assert server.get(body["documents"]["openapi"]).status == 200
    assert "/api/" in server.get("/openapi.json").json["paths"]

    root = server.get("/")
    assert root.status == 302 and root.headers["location"] == "/api/", root
    assert server.request("POST", "/", body={}).status == 405
    assert server.request("DELETE", "/api/").status == 405


def test_root_redirects_to_the_explorer_when_it_is_on(tmp_path, servers):
    server = start(BLOG, tmp_path / "data", env={"SERVICE_EXPLORER": "on"})
    servers.append(server)
    root = server.get("/")
    assert root.status == 302 and root.headers["location"] == "/_/", root
    assert server.get("/api/").json["documents"]["explorer"] == "/_/"
    assert banner_urls(server)["Explorer"] == f"http://127.0.0.1:{server.port}/_/"


def test_a_wildcard_bind_prints_a_reachable_address(tmp_path, servers):
    server = start(BLOG, tmp_path / "data", env={"SERVICE_HOST": "0.0.0.0"})
    servers.append(server)
    api = banner_urls(server)["API"]
    assert "0.0.0.0" not in api, api
    import urllib.request

    with urllib.request.urlopen(api.replace("/api/", "/health"), timeout=10) as reply:  # the printed address answers
        assert json.loads(reply.read())["status"] == "ok"


# -- item 7: JSON logs are JSON, every line ----------------------------------------------------


def all_json(lines: list[str]) -> list[dict]:
    """Every line parsed as one JSON object (the assertion names the first that is not)."""
    objects = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(value, dict), line
        objects.append(value)
    return objects


def test_json_log_format_writes_only_json_lines_on_both_streams(tmp_path, servers):
    env = {"SERVICE_LOG_FORMAT": "json"}
    server = start(BLOG, tmp_path / "data", env=env)  # a fresh tenant: `default` is created
    servers.append(server)
    assert server.post("/api/user", {"email": "ann@example.com", "name": "Ann"}).status == 201
    assert server.get("/api/nope").status == 404
    poll(lambda: server.out, 10, "the banner")
    assert server.stop() == 0
    out = all_json(server.out)
    assert [o["message"] for o in out] == ["ready"]
    assert out[0]["api"] == f"http://127.0.0.1:{server.port}/api/" and out[0]["level"] == "INFO"
    err = all_json(server.log)
    assert any(o["message"] == "request" and o.get("status") == 201 for o in err), err
    assert any("stopped" in o["message"] for o in err), err

    # a start that fails (the port is taken) ends in one JSON error line, exit 2
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        failed = subprocess.run(
            [sys.executable, str(ROOT / "dbsvc.py"), "serve", str(BLOG)],
            cwd=ROOT,
            env=service_env(tmp_path / "other", {**env, "SERVICE_PORT": str(port)}),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert failed.returncode == 2, failed
    assert failed.stdout == ""
    (error,) = all_json(failed.stderr.splitlines())
    assert error["level"] == "ERROR" and f"port {port} is in use" in error["message"], error


def test_json_log_format_covers_a_replica_waiting_for_its_primary(tmp_path, servers):
    primary_url = f"http://127.0.0.1:{free_port()}"
    replica = start(BLOG, tmp_path / "replica", env={"SERVICE_LOG_FORMAT": "json"}, args=("--follow", primary_url))
    servers.append(replica)
    assert replica.get("/ready").status == 503
    poll(lambda: replica.out, 10, "the banner")
    assert replica.stop() == 0
    (banner,) = all_json(replica.out)
    assert banner["replica_of"] == primary_url
    all_json(replica.log)


# -- item 10: export beside a running server, the tenant's own schema --------------------------


def dbsvc(*args: str, data: Path, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """`python dbsvc.py ARGS` with SERVICE_DATA=`data`, to completion."""
    return subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), *args],
        cwd=ROOT,
        env=service_env(data, env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_export_beside_a_running_server_takes_its_own_consistent_copy(tmp_path, servers):
    data = tmp_path / "data"
    server = start(BLOG, data)
    servers.append(server)
    for i in range(5):
        assert server.post("/api/user", {"email": f"u{i}@example.com", "name": f"U{i}"}).status == 201

    done = dbsvc("export", str(BLOG), "-o", str(tmp_path / "all.jsonl"), "-q", data=data)
    assert done.returncode == 0, done.stderr
    assert "a consistent copy taken beside the running server" in done.stderr, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert [line["record"]["email"] for line in lines] == [f"u{i}@example.com" for i in range(5)]
    # the server never paused, and still takes writes
    assert server.post("/api/user", {"email": "late@example.com", "name": "Late"}).status == 201

    # no SCHEMA: the tenant's own (stored) schema, the same records; MODEL still works
    bare = dbsvc("export", "-o", str(tmp_path / "bare.jsonl"), "-q", data=data)
    assert bare.returncode == 0, bare.stderr
    assert len((tmp_path / "bare.jsonl").read_text().splitlines()) == 6
    users = dbsvc("export", "User", "-q", data=data)
    assert users.returncode == 0, users.stderr
    assert len(users.stdout.splitlines()) == 6


def test_import_reads_the_schema_the_tenant_holds(tmp_path, servers):
    source = tmp_path / "records.jsonl"
    source.write_text(
        '{"model":"User","record":{"id":1,"email":"ann@example.com","name":"Ann"}}\n'
        '{"model":"BlogPost","record":{"id":1,"author_id":1,"title":"Hi","body":"x","score":1}}\n'
    )
    fresh = dbsvc("import", str(source), data=tmp_path / "empty")  # nothing holds a schema yet
    assert fresh.returncode == 2, fresh
    assert "holds no schema" in fresh.stderr and "SCHEMA" in fresh.stderr, fresh.stderr

    data = tmp_path / "data"
    server = start(BLOG, data)  # the tenant now holds the blog schema
    assert server.stop() == 0
    done = dbsvc("import", str(source), data=data)
    assert done.returncode == 0, done.stderr
    assert "imported 2 records" in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"model":"User","record":{"id":2,"email":"bo@example.com","name":""}}\n')
    refused = dbsvc("import", str(bad), data=data)
    assert refused.returncode == 1 and "'name' must be at least 1 character" in refused.stderr, refused.stderr
    exported = dbsvc("export", "-q", data=data)
    assert [json.loads(line)["model"] for line in exported.stdout.splitlines()] == ["User", "BlogPost"]


# -- units: content negotiation and bounded series ---------------------------------------------


@pytest.mark.parametrize(
    ("query", "accept", "text"),
    [
        ([], None, False),
        ([], "*/*", False),  # curl
        ([], "text/html,application/xhtml+xml,*/*;q=0.8", False),  # a browser
        ([], "application/json", False),
        ([], "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", True),  # Prometheus before OpenMetrics
        ([], "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", True),
        ([], "application/json, text/plain", False),  # JSON named first
        ([("format", "prometheus")], "application/json", True),
        ([("format", "json")], "text/plain", False),
    ],
)
def test_metrics_format_follows_the_query_then_accept(query, accept, text):
    from dbsvc.metrics import wants_text

    assert wants_text(query, accept) is text


def test_metrics_format_refuses_an_unknown_format_by_name():
    from dbsvc.errors import BadQuery
    from dbsvc.metrics import wants_text

    with pytest.raises(BadQuery, match=r"format='xml' is not a metrics format: expected one of json, prometheus"):
        wants_text([("format", "xml")], None)


def test_a_route_meter_counts_unknown_methods_as_other():
    from dbsvc.metrics import RouteMeter

    meter = RouteMeter("/api/user")
    for method in ("GET", "BREW", "PROPFIND", "GET"):
        meter.observe(method, 200, 0.002)
    assert meter.counts == {"GET": {200: 2}, "OTHER": {200: 2}}
    assert sum(meter.buckets) == 4 and meter.sum == pytest.approx(0.008)
