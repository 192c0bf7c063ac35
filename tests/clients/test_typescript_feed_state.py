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
from support.client_kit import SCHEMAS

TS_DIR = Path(__file__).resolve().parent / "ts"
TSC = TS_DIR / "node_modules" / ".bin" / "tsc"
NODE = shutil.which("node")
FLAGS = ["--strict", "--target", "es2022", "--module", "es2022", "--moduleResolution", "bundler", "--lib", "es2022,dom"]


@pytest.mark.skipif(
    not TSC.exists() or NODE is None, reason="npm typescript not installed (cd tests/clients/ts && npm ci)"
)
def test_the_typescript_feed_states_resume_hold_batches_and_keep_a_whole_set(tmp_path):
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            dbsvc_main(["client", str(SCHEMAS / "blog.dbs"), "--lang", "typescript", "-o", str(tmp_path / "blog.ts")])
            == 0
        )
    shutil.copy(TS_DIR / "feed_state.ts", tmp_path / "feed_state.ts")
    types = ["--types", "node", "--typeRoots", str(TS_DIR / "node_modules" / "@types")]
    built = subprocess.run(
        [str(TSC), *FLAGS, *types, "--outDir", "out", "feed_state.ts"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (tmp_path / "out" / "package.json").write_text('{"type": "module"}\n')
    run = subprocess.run([NODE, str(tmp_path / "out" / "feed_state.js")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
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
