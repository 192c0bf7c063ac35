"""app.py's reads behind the token guard, answered in process over a real store: a list of a
model with access rules answered per token (the scope kept per token, asked once), and
`expand=` of a ruled model from an unruled one (a list never kept for the next token, a
read that embeds only what the token may read).

The guard is the real one (dbsvc/auth), verifying ES256 tokens minted by PyJWT with a key
written to a file, as `SERVICE_JWT_PUBKEY` names it; the requests carry `Authorization`.
In process so that mutants of app.py are the app answering (docs/mutation.md, "... session
12, wt-mpo2"); the same rules over a server are tests/app/test_access_*.py's."""

from __future__ import annotations

import cProfile
import json
import pstats
import time

import jwt
import pytest

from dbsvc.app import Application
from dbsvc.auth import Guard
from dbsvc.auth.settings import load_auth_config
from dbsvc.compiler import compile_schema
from dbsvc.errors import NotFound
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from dbsvc.schema import parse_schema
from dbsvc.schema.ir import AuthSettings
from dbsvc.storage import Store
from support.accesskit import TENANT, guard_env, keypair
from support.storage import run

SCHEMA = """
model Person {
  id    int  @id
  name  str  @sort
  team  str  @filter
  @allow(read, record.team == token.team)
  @allow(write, token.role == "admin")
}

model Task {
  id     int  @id
  owner  int  @ref(Person) @filter
  title  str  @sort
}
"""


@pytest.fixture
def guarded(tmp_path):
    """(app, module, a token maker): persons 1, 2 of team a and 3 of team b; tasks 1 (owner
    1) and 2 (owner 3); the app's guard verifies the tokens the maker signs."""
    module = compile_schema(parse_schema(SCHEMA, "people.dbs"))
    private, key_path = keypair(tmp_path)
    config = load_auth_config(guard_env(key_path), AuthSettings(), str(tmp_path))
    assert config is not None
    (tmp_path / "data").mkdir()
    store = Store.open(str(tmp_path / "data"), module.MODELS, module.DESCRIPTION, sync="off")

    async def fill() -> None:
        for i, team in ((1, "a"), (2, "a"), (3, "b")):
            await store.insert("Person", {"id": i, "name": f"p{i}", "team": team})
        await store.insert("Task", {"id": 1, "owner": 1, "title": "t1"})
        await store.insert("Task", {"id": 2, "owner": 3, "title": "t2"})

    run(fill())

    def token(team: str) -> str:
        claims = {"exp": int(time.time()) + 900, "tenant": TENANT, "team": team}
        return "Bearer " + jwt.encode(claims, private, algorithm="ES256")

    app = Application(module, store, Broker(store, module.BY_NAME, 64), guard=Guard(config))
    yield app, module, token
    store.close()


def get(app: Application, target: str, authorization: str):
    path, pairs = split_target(target)
    response = app(Request("GET", target, path, pairs, [("authorization", authorization)]))
    return response.status, json.loads(response.body)


def ids(body: dict) -> list[int]:
    return [r["id"] for r in body["data"]]


def test_a_guarded_ruled_list_answers_each_token_its_own_records(guarded):
    app, _module, token = guarded
    a, b = token("a"), token("b")
    for _ in range(2):  # the second round is answered from each token's kept scope
        assert get(app, "/api/person?sort=name", a)[1]["data"] == [
            {"id": 1, "name": "p1", "team": "a"},
            {"id": 2, "name": "p2", "team": "a"},
        ]
        status, body = get(app, "/api/person?sort=name", b)
        assert (status, ids(body), body["total"]) == (200, [3], 1)
    assert get(app, "/api/person?team=b", a)[1] == {"data": [], "total": 0, "limit": 100, "offset": 0}


def test_a_tokens_scope_is_asked_once_per_token_and_list(guarded):
    # access.py keeps the scope a token's rules give a parsed list, keyed by the token's
    # Authorization value (which the guard verified): a token polling a list costs its rules
    # once. Counted with cProfile over the generated rule, the one call it makes per scope.
    app, module, token = guarded
    scope_of = module.BY_NAME["Person"].rules.list
    a, b = token("a"), token("b")
    profile = cProfile.Profile()
    profile.enable()
    for authorization in (a, a, a, b, b):
        get(app, "/api/person?sort=name&limit=5", authorization)
    profile.disable()
    code = scope_of.__code__
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    assert stats[code.co_filename, code.co_firstlineno, code.co_name][0] == 2  # once for a, once for b


def test_a_list_embedding_a_ruled_model_is_never_kept_for_the_next_token(guarded):
    app, _module, token = guarded
    target = "/api/task?expand=owner&sort=title"
    expanded = [[r["_expand"] for r in get(app, target, token(team))[1]["data"]] for team in ("a", "b", "a")]
    team_a = [{"owner": {"id": 1, "name": "p1", "team": "a"}}, {}]
    assert expanded == [team_a, [{}, {"owner": {"id": 3, "name": "p3", "team": "b"}}], team_a]


def test_a_read_embeds_only_the_ruled_record_the_token_may_read(guarded):
    app, _module, token = guarded
    assert get(app, "/api/task/1?expand=owner", token("a"))[1]["_expand"] == {
        "owner": {"id": 1, "name": "p1", "team": "a"}
    }
    assert get(app, "/api/task/1?expand=owner", token("b"))[1]["_expand"] == {}
    with pytest.raises(NotFound, match="^Person 1 does not exist$"):
        get(app, "/api/person/1", token("b"))


def test_in_a_schema_with_rules_an_unruled_models_lists_are_kept_unless_they_embed(guarded):
    # app.py `list`: only an answer that depends on the token is never kept (readcache.py);
    # a list of Task depends on it only through `expand=owner` (a ruled Person).
    app, _module, token = guarded
    a = token("a")
    get(app, "/api/task?sort=title", a)
    get(app, "/api/task?sort=title&as_of=1", a)
    assert (len(app.present), len(app.past)) == (1, 1)
    get(app, "/api/task?sort=title&expand=owner", a)
    get(app, "/api/task?sort=title&expand=owner&as_of=1", a)
    get(app, "/api/person?sort=name", a)
    get(app, "/api/person?sort=name&as_of=1", a)
    assert (len(app.present), len(app.past)) == (1, 1)
