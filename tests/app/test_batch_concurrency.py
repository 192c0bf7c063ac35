"""Concurrent batches and single writes from 32 clients against a real server, checked
against a model (hypothesis, bounded): the accepted writes, replayed in the server's offset
order, are exactly what a sequential model accepts, their offsets tile the log with no gap
(a refused batch wrote nothing), and the server's final state is the model's."""

from __future__ import annotations

import http.client
import itertools
import json
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CLIENTS = 32
_run = itertools.count()

# An op as (kind, model, key, value): key is an index into the ids known at the start plus a
# few new ones; value an email index (users) or an author index (posts).
op = st.one_of(
    st.tuples(st.just("create"), st.just("user"), st.none(), st.integers(0, 7)),
    st.tuples(st.just("create"), st.just("blog-post"), st.none(), st.integers(0, 9)),
    st.tuples(st.just("patch"), st.just("user"), st.integers(0, 9), st.integers(0, 7)),
    st.tuples(st.just("delete"), st.sampled_from(["user", "blog-post"]), st.integers(0, 9), st.none()),
)
action = st.one_of(st.tuples(st.just("single"), op), st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=5)))
plan = st.lists(st.lists(action, min_size=1, max_size=3), min_size=CLIENTS, max_size=CLIENTS)


def state(server) -> dict[str, dict[int, dict]]:
    return {m: {r["id"]: r for r in server.get(f"/api/{m}?limit=1000").json["data"]} for m in ("user", "blog-post")}


def wire_op(o, ids, emails) -> dict:
    kind, model, key, value = o
    if kind == "create" and model == "user":
        return {"op": "create", "model": "user", "record": {"email": emails[value], "name": "n"}}
    if kind == "create":
        return {
            "op": "create",
            "model": "blog-post",
            "record": {"author_id": ids[value], "title": "t", "body": "b", "score": 1},
        }
    if kind == "patch":
        return {"op": "patch", "model": "user", "id": ids[key], "record": {"email": emails[value]}}
    return {"op": "delete", "model": model, "id": ids[key]}


def client(port: int, actions, ids, emails, start: threading.Barrier, out: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start.wait()
    try:
        _send(conn, actions, ids, emails, out)
    except BaseException as exc:  # noqa: BLE001 - the test reports it
        out.append(("error", [], 0, None, repr(exc)))
    finally:
        conn.close()


def _send(conn: http.client.HTTPConnection, actions, ids, emails, out: list) -> None:
    for kind, what in actions:
        ops = [wire_op(o, ids, emails) for o in (what if kind == "batch" else [what])]
        if kind == "batch":
            conn.request("POST", "/batch", json.dumps({"ops": ops}), {"Content-Type": "application/json"})
        else:
            o = ops[0]
            path = f"/api/{o['model']}" + ("" if o["op"] == "create" else f"/{o['id']}")
            method = {"create": "POST", "patch": "PATCH", "delete": "DELETE"}[o["op"]]
            conn.request(
                method, path, json.dumps(o["record"]) if "record" in o else None, {"Content-Type": "application/json"}
            )
        reply = conn.getresponse()
        body = reply.read()
        out.append((kind, ops, reply.status, reply.getheader("Dbsvc-Offset"), json.loads(body) if body else None))


def replay(model: dict[str, dict[int, dict]], max_ids: dict[str, int], ops: list[dict], ids: list) -> None:
    """Apply accepted ops to the model, asserting each is what a sequential store accepts."""
    users, posts = model["user"], model["blog-post"]
    for o, id_ in zip(ops, ids):
        if o["op"] == "create":
            rec = o["record"]
            assert id_ > max_ids[o["model"]], (o, id_)  # automatic ids only grow
            max_ids[o["model"]] = id_
            if o["model"] == "user":
                assert all(u["email"] != rec["email"] for u in users.values()), ("unique accepted", o)
                users[id_] = {"email": rec["email"]}
            else:
                assert rec["author_id"] in users, ("foreign key accepted", o)
                posts[id_] = {"author_id": rec["author_id"]}
        elif o["op"] == "patch":
            assert id_ in users
            assert all(u["email"] != o["record"]["email"] for k, u in users.items() if k != id_), ("unique", o)
            users[id_] = {"email": o["record"]["email"]}
        else:
            table = users if o["model"] == "user" else posts
            assert id_ in table, ("missing accepted", o)
            if o["model"] == "user":
                assert all(p["author_id"] != id_ for p in posts.values()), ("referenced accepted", o)
            del table[id_]


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(plan=plan)
def test_32_clients_of_batches_and_single_writes_keep_every_invariant(blog, plan):
    before = state(blog)
    head = blog.get("/snapshot").json["offset"]
    max_ids = {m: max(before[m], default=0) for m in before}
    known = sorted(set(before["user"]) | set(before["blog-post"]))[-5:]
    ids = known + [max(max_ids.values()) + k for k in range(1, 11 - len(known))]
    run = next(_run)
    emails = [f"c{run}-{k}@x.io" for k in range(8)]
    start = threading.Barrier(CLIENTS)
    outs: list[list] = [[] for _ in range(CLIENTS)]
    threads = [
        threading.Thread(target=client, args=(blog.port, plan[i], ids, emails, start, outs[i])) for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    accepted = []
    for kind, ops, status, offset, body in itertools.chain.from_iterable(outs):
        assert kind != "error" and status in (200, 201, 204, 404, 409), (kind, status, body)
        if status >= 400:
            continue
        if kind == "batch":
            assert int(offset) == body["last"] == body["first"] + len(ops) - 1
            accepted.append((body["first"], body["last"], ops, [r["id"] for r in body["results"]]))
        else:
            id_ = body["id"] if ops[0]["op"] == "create" else ops[0]["id"]
            accepted.append((int(offset), int(offset), ops, [id_]))
    accepted.sort()
    expected = head + 1
    model = {
        m: {k: ({"email": r["email"]} if m == "user" else {"author_id": r["author_id"]}) for k, r in recs.items()}
        for m, recs in before.items()
    }
    for first, last, ops, op_ids in accepted:
        assert first == expected, f"offsets {first}..{last} after {expected - 1}: a gap or an overlap"
        replay(model, max_ids, ops, op_ids)
        expected = last + 1
    after = state(blog)
    assert blog.get("/snapshot").json["offset"] == expected - 1
    assert {k: {"email": r["email"]} for k, r in after["user"].items()} == model["user"]
    assert {k: {"author_id": r["author_id"]} for k, r in after["blog-post"].items()} == model["blog-post"]
