"""The TypeScript client's feed decisions in Node, sans-IO (tests/clients/ts/feed_state.ts):
the EventState and LiveState of a generated client fed frames shaped as the server sends
them, what each case saw compared with literals. The same cases as test_feed_state.py for
the Python client; the hand mutations of docs/mutation.md ("dbsvc/clients/...", session 6)
showed the Node tests against a server missed a subscription resuming at its offset rather
than one early. Skips without npm typescript, like test_typescript_client.py."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dbsvc.cli import main as dbsvc_main
from support.client_kit import NODE, SCHEMAS, TS_DIR, TSC, TSC_FLAGS

SCRIPTS = ["feed_state.ts", "feed_runner.ts"]

needs_tsc = pytest.mark.skipif(
    not TSC.exists() or NODE is None, reason="npm typescript not installed (cd tests/clients/ts && npm ci)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The blog client and both Node scripts, compiled once (tsc is the slow part)."""
    out = tmp_path_factory.mktemp("ts_feeds")
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            dbsvc_main(["client", str(SCHEMAS / "blog.dbs"), "--lang", "typescript", "-o", str(out / "blog.ts")]) == 0
        )
    for script in SCRIPTS:
        shutil.copy(TS_DIR / script, out / script)
    types = ["--types", "node", "--typeRoots", str(TS_DIR / "node_modules" / "@types")]
    run = subprocess.run(
        [str(TSC), *TSC_FLAGS, *types, "--outDir", "out", *SCRIPTS],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (out / "out" / "package.json").write_text('{"type": "module"}\n')
    return out / "out"


def run_node(script: Path) -> dict:
    run = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@needs_tsc
def test_the_typescript_feed_states_resume_hold_batches_and_keep_a_whole_set(built):
    report = run_node(built / "feed_state.js")
    assert report["resume"] == {
        "seen": ["insert:1:1", "insert:2:2"],
        "resume": 1,
        "replay": ["link:2:9", "insert:3:3"],
        "offset": 3,
        "next": 2,
    }
    assert report["batch"] == {
        "held": [],
        "afterDrop": 4,
        "first": [],
        "whole": ["insert:5:5", "insert:7:7"],
        "offset": 7,
    }
    assert report["restart"] == {"fresh": 7, "offset": 12, "resume": 12, "again": ["insert:12:12"]}
    assert report["live"] == {
        "before": None,
        "half": False,
        "halfSize": 0,
        "whole": True,
        "initIds": [1, 2],
        "added": True,
        "replayed": False,
        "open": False,
        "openIds": [1, 2, 3],
        "closed": True,
        "records": [[2, {"id": 2, "v": 1}], [3, {"id": 3}]],
        "resume": 6,
        "gone": None,
    }
    assert report["halfInit"] == {"resume": None, "ids": [2]}


@needs_tsc
def test_the_typescript_feed_backoff_doubles_to_five_seconds_and_starts_over_after_frames(built):
    """FeedRunner.run over scripted sockets (ts/feed_runner.ts): each drop waits 50 ms doubled
    up to 5 s, and a connection that brought frames starts the next wait at 50 ms again (the
    planted bug "the backoff is not reset after frames arrive" waits 400 ms there); each
    reconnect resumes one offset before the last event handed over."""
    report = run_node(built / "feed_runner.js")
    assert report["waits"] == [50, 100, 200, 50, 100, 200, 400, 800, 1600, 3200, 5000, 5000]
    assert report["afters"] == ["4", "4", "4", "4", "5", "5", "5", "5", "5", "5", "5", "5", "5"]
    assert report["handed"] == ["insert:5", "insert:6"]
    assert report["connects"] == 12
    assert report["error"] == "null"
    assert report["fetched"] == []
