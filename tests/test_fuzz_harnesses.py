"""The fuzz harnesses (fuzz/): every seed replays clean, and (slow) each survives atheris.

Default run: each harness's `TestOneInput` is called on every file of its seed corpus
(`fuzz/corpus/<harness>/`), in process and without atheris. That proves the harness
works against today's code and that each seed, several of them former crashes, still
passes its invariants.

`-m slow`: each harness runs under atheris (`python -m fuzz`) for DBSVC_FUZZ_SECONDS
(default 60) in a child process, new inputs going to a temporary directory; any crash,
leak or timeout fails the test with libFuzzer's report. Needs `pip install '.[fuzz]'`.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz import HARNESSES  # noqa: E402

CORPUS = ROOT / "fuzz" / "corpus"
SEED_LIMIT = 4096  # seeds stay small: the mutator grows them
SECONDS = int(os.environ.get("DBSVC_FUZZ_SECONDS", "60"))


def seeds() -> list[tuple[str, Path]]:
    return [(harness, path) for harness in HARNESSES for path in sorted((CORPUS / harness).iterdir())]


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_harness_has_a_small_seed_corpus(harness):
    files = sorted((CORPUS / harness).iterdir())
    assert len(files) >= 3, f"{harness}: {len(files)} seeds"
    assert all(path.stat().st_size <= SEED_LIMIT for path in files), [p.name for p in files]


@pytest.mark.parametrize(("harness", "seed"), seeds(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_seed_passes_its_harness(harness, seed):
    module = importlib.import_module(f"fuzz.{harness}")
    module.TestOneInput(seed.read_bytes())


def test_runner_refuses_an_unknown_harness():
    result = subprocess.run(
        [sys.executable, "-m", "fuzz", "no_such_harness"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "schema_parser" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("harness", HARNESSES)
def test_harness_survives_atheris(harness, tmp_path):
    pytest.importorskip("atheris")
    found = tmp_path / "found"
    found.mkdir()
    command = [
        sys.executable,
        "-m",
        "fuzz",
        harness,
        f"-max_total_time={SECONDS}",
        "-timeout=60",
        "-rss_limit_mb=3072",
        f"-artifact_prefix={tmp_path}/",
        str(found),
        str(CORPUS / harness),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 600)
    artifacts = [p.name for p in tmp_path.iterdir() if p.name != "found"]
    assert result.returncode == 0 and not artifacts, (artifacts, result.stderr[-6000:])
    assert "Done" in result.stderr, result.stderr[-2000:]
