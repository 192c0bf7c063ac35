"""Access rules, the whole of issue 31's "Show": a hypothesis state machine over one real
server with real tokens (an ES256 key made here, tokens signed by PyJWT), REST and
WebSockets together, every answer and every frame held to a model of the rules.

The schema (SCHEMA) has four ruled models, one rule shape each: `Note` an owner rule on an
`@filter` field (indexed); `Doc` an organisation rule with a list claim (`record.org in
token.orgs`, indexed with `record.org == token.org`); `Post` public-read, owner-write, its
read rule an OR that no index answers, its update rule reading `new`; `Comment` an `@ref`
to `Post` (so `link` events reach Post's feeds) readable by its author or an admin. Every
model has a token default; an admin role reads everything. Five tokens: `anon` carries no
`sub` (its creates of owned records are refused, its Note and Comment sockets see nothing).

The machine writes (POST, PUT, PATCH, DELETE, ownership changes) as random users, reads
(GET, lists with random filters, sort, limit and offset, `as_of`), and opens `/subscribe`
(with and without a filter, with a projection) and `/live-query` sockets for random users
at random times, some resuming with `after=`. `Model` (tests/support/access_model.py)
evaluates the rules by hand and keeps every record's history. Invariants:
- every REST answer is the model's (status, body, `total`, page, `Dbsvc-Offset`);
- a refused write leaves `/snapshot` (offset and watermarks) as it was;
- each socket's frames are exactly the model's sequence for its token, model, filter,
  projection and start (so no frame carries a record or `previous` the token may not see,
  and every visible change arrives once, in order): checked by waiting (a condition and a
  deadline, no sleeps) for the expected frames, then a ping barrier for strays;
- a live query's result set, rebuilt from its frames, is the model's visible matches;
- a derandomized run meets every kind of answer (200, 201, 204, 403, 404, 409, a refused
  socket) and frame (insert, update, delete, link, Init, Added, Updated, Removed).

A link's parent is read by the server when it sends the link (docs/realtime.md), so a link
whose parent came into or left view between its event and the check may or may not come:
the model counts it optional, every other frame is required.

One server for the module; each example starts from an empty tenant (an admin's DELETE
sweep), its ids and offsets new, so nothing of an earlier example can be mistaken for its own.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from support.access_model import FIELDS, FILLED, FILTERS, USERS, Model, Watch, align, query_string, sorted_page
from support.accesskit import Bearer, LiveSocket, SocketHub, keypair, start_ruled_server

SCHEMA = """
@allow(replicate, token.role == "replicator")

model Note {
  id     int  @id
  owner  str  @filter @default(token.sub)
  title  str  @sort
  @allow(all, record.owner == token.sub)
  @allow(all, token.role == "admin")
}

model Doc {
  id     int  @id
  org    str  @filter @default(token.org)
  title  str  @sort
  level  int  @filter @sort @default(0)
  @allow(read, record.org == token.org or record.org in token.orgs)
  @allow(write, record.org == token.org and token.role in ["editor", "admin"])
  @allow(all, token.role == "admin")
}

model Post {
  id         int   @id
  author     str   @filter @default(token.sub)
  published  bool  @filter @default(false)
  title      str   @sort
  @allow(read, record.published or record.author == token.sub)
  @allow(create delete, record.author == token.sub)
  @allow(update, record.author == token.sub and new.author == record.author)
  @allow(all, token.role == "admin")
  @projection(brief, id, title, published)
}

model Comment {
  id      int  @id
  post    int  @ref(Post) @filter
  author  str  @filter @default(token.sub)
  text    str  @sort
  @allow(read, record.author == token.sub or token.role == "admin")
  @allow(create, record.author == token.sub)
  @allow(update delete, record.author == token.sub or token.role == "admin")
}
"""

MODELS = ("Note", "Doc", "Post", "Comment")
FEEDS = (*MODELS, "Post")  # Post's feeds twice as often: they are the ones with links
CREATED = (*MODELS, "Post", "Comment")  # and posts and comments (which make the links) too
WHO = tuple(USERS)
KEBAB = {"Note": "note", "Doc": "doc", "Post": "post", "Comment": "comment"}
VALUES = {
    "owner": st.sampled_from(("ann", "bob", "eve", "root")),
    "author": st.sampled_from(("ann", "bob", "eve", "root")),
    "org": st.sampled_from(("a", "b", "c")),
    "title": st.sampled_from(("a", "b", "c")),
    "text": st.sampled_from(("x", "y")),
    "level": st.integers(0, 2),
    "published": st.booleans(),
}
SEEN: Counter = Counter()  # what a run exercised (the test asserts it did not stay trivial)
SORTS = {"Note": ("title",), "Doc": ("title", "level"), "Post": ("title",), "Comment": ("text",)}


@pytest.fixture(scope="module")
def ruled(tmp_path_factory):
    root = tmp_path_factory.mktemp("machine")
    private, key_path = keypair(root)
    schema = root / "machine.dbs"
    schema.write_text(SCHEMA)
    server = start_ruled_server(schema, key_path, root / "data")
    users = {who: Bearer(server, private, **claims) for who, claims in USERS.items()}
    hub = SocketHub()
    yield server, users, hub
    hub.stop()
    server.stop()


def guarded(step: Callable) -> Callable:
    """A step that marks its machine broken when it fails: the teardown then skips its
    final checks (a model that missed the failed step's write would wait on every socket)."""

    @functools.wraps(step)
    def run(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return step(self, *args, **kwargs)
        except BaseException:
            self.broken = True
            raise

    return run


def fields_of(name: str, leave_out: str) -> st.SearchStrategy[dict]:
    """Some of a model's fields with drawn values, never `post` nor `leave_out`."""
    return st.fixed_dictionaries({}, optional={f: VALUES[f] for f in FIELDS[name] if f not in ("post", leave_out)})


class AccessRulesMachine(RuleBasedStateMachine):
    server: Any = None
    users: dict[str, Bearer] = {}
    hub: Any = None
    broken = False

    @initialize(data=st.data(), count=st.integers(2, 12))
    @guarded
    def start(self, data, count: int) -> None:
        """An empty tenant (an admin deletes everything), then a few random creates
        (allowed and refused), so the first writes find records."""
        root = self.users["root"]
        for name in ("Comment", "Post", "Note", "Doc"):  # children first: a post with comments is referenced
            for record in root("GET", f"/api/{KEBAB[name]}?limit=1000").json["data"]:
                assert root("DELETE", f"/api/{KEBAB[name]}/{record['id']}").status == 204
        snapshot = self.server.get("/snapshot").json
        self.model = Model(snapshot["offset"], snapshot["watermarks"])
        self.watches: list[Watch] = []
        for _ in range(data.draw(st.integers(1, 3))):  # sockets open before the first write
            who, name = data.draw(st.sampled_from(WHO)), data.draw(st.sampled_from(FEEDS))
            self.open_socket(who, name, data, data.draw(st.booleans()))
        for _ in range(count):
            self.create(data.draw(st.sampled_from(WHO)), data.draw(st.sampled_from(CREATED)), data)

    def teardown(self) -> None:
        try:
            if hasattr(self, "model") and not self.broken:
                for watch in self.watches:
                    self.check_watch(watch)
                for who in WHO:
                    for name in MODELS:
                        self.check_list(who, name, {}, None, 1000, 0, None)
        finally:
            self.hub.close_all()

    # -- helpers ------------------------------------------------------------------------

    def target(self, name: str, position: int) -> int:
        """One of the model's ids, or one no record has (draws never depend on server ids)."""
        ids = sorted(self.model.records[name])
        return ids[position % len(ids)] if ids and position < 12 else 10**6 + position

    def pick(self, data) -> tuple[str, int]:
        """(model, id) of a write: mostly any record of any model, now and then an id no
        record has (by position, so draws never depend on server ids)."""
        every = [(name, key) for name in MODELS for key in sorted(self.model.records[name])]
        position = data.draw(st.integers(0, 99))
        if every and position < 90:
            return every[position % len(every)]
        return MODELS[position % 4], 10**6 + position

    @staticmethod
    def resolve(who: str, name: str, record: dict | None) -> str:
        """`owner`: the user owning `record` (its owner, author, or a member of its org), so
        writes by the owner are drawn as often as by anyone else."""
        if who != "owner":
            return who
        if record is None:
            return "ann"
        if name == "Doc":
            return {"a": "ann", "b": "anon"}.get(record["org"], "root")
        return record["owner" if name == "Note" else "author"]

    def settled(self, reply, status: int) -> None:
        """The answer's status, and the server's head and watermarks the model's; a refusal
        is a problem body, which never carries a record."""
        assert reply.status == status, (reply, status)
        if status >= 400:
            assert set(reply.json) <= {"type", "title", "status", "code", "detail", "request_id", "field", "count"}, (
                reply
            )
        SEEN[f"write {status}"] += 1
        snapshot = self.server.get("/snapshot").json
        assert (snapshot["offset"], snapshot["watermarks"]) == (self.model.head, self.model.watermarks)

    def missing(self, reply, name: str, key: int) -> None:
        self.settled(reply, 404)
        assert reply.json["detail"] == f"{name} {key} does not exist"

    def forbidden(self, reply, operation: str, name: str) -> None:
        self.settled(reply, 403)
        assert reply.json["code"] == "forbidden"
        if operation != "fill":
            detail = f"{operation} of {name} is not allowed by the model's access rules for this token"
            assert reply.json["detail"] == detail

    def conflict(self, reply, code: str) -> None:
        self.settled(reply, 409)
        assert reply.json["code"] == code, reply

    def written(self, reply, status: int) -> None:
        self.settled(reply, status)
        assert reply.headers["dbsvc-offset"] == str(self.model.head)

    # -- writes -------------------------------------------------------------------------

    @rule(who=st.sampled_from(WHO), name=st.sampled_from(CREATED), data=st.data())
    @guarded
    def create(self, who: str, name: str, data) -> None:
        model = self.model
        filled = FILLED[name][0]
        body = data.draw(fields_of(name, filled))
        given = data.draw(st.sampled_from(("absent", "absent", "own", "other")))
        if given == "own" and FILLED[name][1] in USERS[who]:  # the claim's own value: allowed
            body[filled] = USERS[who][FILLED[name][1]]
        elif given == "other":  # forged, unless drawn equal to the claim
            body[filled] = data.draw(VALUES[filled])
        if name == "Comment":
            body["post"] = self.target("Post", data.draw(st.integers(0, 13)))
            body.setdefault("text", "x")
        body.setdefault("title" if name != "Comment" else "text", "a")
        reply = self.users[who]("POST", f"/api/{KEBAB[name]}", body)
        record = model.filled(name, who, body)
        if record is None:
            return self.forbidden(reply, "fill", name)
        if not model.may_create(name, who, record):
            return self.forbidden(reply, "create", name)
        if name == "Comment" and record["post"] not in model.records["Post"]:
            return self.conflict(reply, "foreign_key_violation")
        assert reply.status == 201, reply
        model.insert(name, {"id": reply.json["id"], **record})
        self.written(reply, 201)
        assert reply.headers["location"] == f"/api/{KEBAB[name]}/{reply.json['id']}"

    @rule(who=st.sampled_from(WHO + ("owner", "owner", "owner")), data=st.data(), put=st.booleans())
    @guarded
    def change(self, who: str, data, put: bool) -> None:
        model = self.model
        name, key = self.pick(data)
        before = model.records[name].get(key)
        who = self.resolve(who, name, before)
        owned = FILLED[name][0]
        fields = data.draw(fields_of(name, owned))
        if data.draw(st.integers(0, 3)) == 0:  # an ownership change (or the same owner) now and then
            fields[owned] = data.draw(VALUES[owned])
        if name == "Comment" and data.draw(st.booleans()):
            fields["post"] = self.target("Post", data.draw(st.integers(0, 13)))
        if put:
            base = before or model.blank(name, who)
            body = {**{f: base[f] for f in FIELDS[name]}, **fields}
        else:
            body = fields
        reply = self.users[who]("PUT" if put else "PATCH", f"/api/{KEBAB[name]}/{key}", body)
        if before is None or not model.readable(name, who, before):
            return self.missing(reply, name, key)
        after = {**before, **body}
        if not model.may_update(name, who, before, after):
            return self.forbidden(reply, "update", name)
        if name == "Comment" and after["post"] not in model.records["Post"]:
            return self.conflict(reply, "foreign_key_violation")
        model.update(name, after)
        self.written(reply, 200)
        assert reply.json == after

    @rule(who=st.sampled_from(WHO + ("owner", "owner", "owner")), data=st.data())
    @guarded
    def delete(self, who: str, data) -> None:
        model = self.model
        name, key = self.pick(data)
        before = model.records[name].get(key)
        who = self.resolve(who, name, before)
        reply = self.users[who]("DELETE", f"/api/{KEBAB[name]}/{key}")
        if before is None or not model.readable(name, who, before):
            return self.missing(reply, name, key)
        if not model.may_delete(name, who, before):
            return self.forbidden(reply, "delete", name)
        if name == "Post" and any(c["post"] == key for c in model.records["Comment"].values()):
            return self.conflict(reply, "referenced")
        model.delete(name, key)
        self.written(reply, 204)

    # -- reads --------------------------------------------------------------------------

    @rule(who=st.sampled_from(WHO), name=st.sampled_from(MODELS), data=st.data())
    @guarded
    def get(self, who: str, name: str, data) -> None:
        model = self.model
        key = self.target(name, data.draw(st.integers(0, 13)))
        as_of = self.draw_as_of(name, data)
        suffix = "" if as_of is None else f"?as_of={as_of}"
        reply = self.users[who]("GET", f"/api/{KEBAB[name]}/{key}{suffix}")
        record = model.at(name, as_of).get(key)
        if record is None or not model.readable(name, who, record):
            assert (reply.status, reply.json["detail"]) == (404, f"{name} {key} does not exist"), reply
        else:
            assert (reply.status, reply.json) == (200, record), reply
            if as_of is None:
                assert reply.headers["dbsvc-offset"] == str(model.head)

    def draw_as_of(self, name: str, data) -> int | None:
        if not data.draw(st.booleans()):
            return None
        return self.model.base_watermarks[name] + data.draw(st.integers(0, len(self.model.history[name]) - 1))

    @rule(who=st.sampled_from(WHO), name=st.sampled_from(MODELS), data=st.data())
    @guarded
    def list(self, who: str, name: str, data) -> None:
        values = {
            f: st.lists(st.sampled_from(v), min_size=1, max_size=2, unique=True) for f, v in FILTERS[name].items()
        }
        filters = data.draw(st.fixed_dictionaries({}, optional=values))
        sort = data.draw(st.none() | st.sampled_from(SORTS[name]).flatmap(lambda f: st.sampled_from((f, "-" + f))))
        limit = data.draw(st.sampled_from((1, 2, 5, 1000)))
        offset = data.draw(st.sampled_from((0, 1, 3)))
        self.check_list(who, name, filters, sort, limit, offset, self.draw_as_of(name, data))

    def check_list(self, who: str, name: str, filters: dict, sort: str | None, limit: int, offset: int, as_of) -> None:
        model = self.model
        query = query_string(filters, sort=sort, limit=limit, offset=offset, as_of=as_of)
        reply = self.users[who]("GET", f"/api/{KEBAB[name]}?{query}")
        assert reply.status == 200, reply
        matches = sorted_page(model.visible(name, who, filters, model.at(name, as_of)), sort)
        page = matches[offset : offset + limit]
        listed = reply.json
        got = (listed["data"], listed["total"], listed["limit"], listed["offset"])
        assert got == (page, len(matches), limit, offset), (who, name, query)
        if as_of is None:
            assert reply.headers["dbsvc-offset"] == str(model.head)

    # -- sockets ------------------------------------------------------------------------

    @rule(who=st.sampled_from(WHO), name=st.sampled_from(FEEDS), data=st.data(), live=st.booleans())
    @guarded
    def open_socket(self, who: str, name: str, data, live: bool) -> None:
        model = self.model
        filters = data.draw(st.sampled_from([{}] + [{f: [v]} for f, vs in FILTERS[name].items() for v in vs[:2]]))
        projection = "brief" if name == "Post" and data.draw(st.booleans()) else None
        after = None
        if data.draw(st.booleans()):
            after = model.base_offset + data.draw(st.integers(0, model.head - model.base_offset))
        query = query_string(filters, projection=projection, after=after)
        path = f"/{'live-query' if live else 'subscribe'}/{KEBAB[name]}" + (f"?{query}" if query else "")
        opened = self.hub.open(self.server, path, self.users[who].auth)
        if model.sees_nothing(name, who):
            SEEN["socket 403"] += 1
            assert isinstance(opened, tuple), (path, who)
            assert (opened[0], opened[1]["code"]) == (403, "forbidden"), (path, who, opened)
            return
        assert isinstance(opened, LiveSocket), (path, who, opened)
        start = model.head if after is None else after
        watch = Watch(opened, who, name, filters, projection, live, start, init=live and after is None)
        if watch.init:
            watch.init_frame = model.init_frame(watch)
        self.watches.append(watch)

    @rule(data=st.data())
    @guarded
    def check_socket(self, data) -> None:
        """Check one socket; now and then close it after its check."""
        if self.watches:
            watch = data.draw(st.sampled_from(self.watches))
            self.check_watch(watch)
            if data.draw(st.integers(0, 3)) == 0:
                watch.socket.close()
                self.watches.remove(watch)

    def check_watch(self, watch: Watch) -> None:
        """The socket's frames are the model's sequence for it (after the head reached the
        last write), nothing more after a ping barrier, and a live query's set is the model's."""
        model = self.model
        expected = model.expected(watch)
        socket = watch.socket

        def complete(frames: list[dict]) -> bool:
            try:
                return align(frames, expected)
            except AssertionError:
                return True  # a stray frame: stop waiting, the assert below names it

        socket.wait_until(complete, timeout=10)
        socket.barrier()
        assert socket.closed is None, (watch.path, socket.closed)
        assert align(list(socket.frames), expected), (watch.path, watch.who, socket.frames, expected)
        for frame in socket.frames:
            model.assert_may_see(watch, frame)
            SEEN[f"frame {frame.get('kind') or frame.get('type')}"] += 1
        if watch.live:
            held = {}  # what the client holds: its Init's records, or what it held at `after`
            if not watch.init:
                held = {r["id"]: model.project(watch, r) for r in model.in_view_at(watch, watch.start)}
            for frame in socket.frames:
                if frame["type"] == "Init":
                    held.update((r["id"], r) for r in frame["records"])
                elif frame["type"] == "Removed":
                    del held[frame["id"]]
                else:
                    held[frame["record"]["id"]] = frame["record"]
            want = model.visible(watch.model, watch.who, watch.filters, model.records[watch.model])
            assert held == {r["id"]: model.project(watch, r) for r in want}, watch.path

    @invariant()
    @guarded
    def head_is_the_models(self) -> None:
        if hasattr(self, "model"):
            assert self.server.get("/snapshot").json["offset"] == self.model.head


def run_machine(ruled, max_examples: int, steps: int, derandomize: bool) -> None:
    """Run the machine; a derandomized run (the same draws each time) must also have met
    every kind of answer and frame, so it cannot pass by staying trivial."""
    AccessRulesMachine.server, AccessRulesMachine.users, AccessRulesMachine.hub = ruled
    runner = AccessRulesMachine.TestCase
    runner.settings = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck),
    )
    SEEN.clear()
    runner().runTest()
    kinds = {f"write {status}" for status in (200, 201, 204, 403, 404, 409)} | {"socket 403"}
    kinds |= {f"frame {kind}" for kind in ("insert", "update", "delete", "link", "Init", "Added", "Updated", "Removed")}
    assert not derandomize or kinds <= set(SEEN), f"the run never met {sorted(kinds - set(SEEN))}: {dict(SEEN)}"


def test_rest_and_sockets_follow_a_model_of_the_rules(ruled):
    """20 derandomized examples of up to 120 steps, which meet every kind of answer and
    frame (run_machine checks it); the slow run adds 300 examples of new draws each run."""
    run_machine(ruled, max_examples=20, steps=120, derandomize=True)


@pytest.mark.slow
def test_rest_and_sockets_follow_a_model_of_the_rules_long(ruled):
    """New draws on every run: 300 examples of up to 120 steps (about two minutes)."""
    run_machine(ruled, max_examples=300, steps=120, derandomize=False)
