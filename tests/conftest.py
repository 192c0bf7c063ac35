"""Makes the shared test kit importable as `support` (tests/support/) from every test file.

pytest runs with `--import-mode=importlib` (setup.cfg): test files are imported without
touching sys.path, so they may share basenames across folders. This puts `tests/` itself on
sys.path, once, so `from support.server import start_server` works from any folder.

It also puts this checkout first on PYTHONPATH for every child process a test starts (servers,
CLI runs, crash children): a child imports the dbsvc beside these tests, never whichever tree
an editable install last pointed at (a git worktree's tests would otherwise run main's code in
their children, or fail when nothing is installed). Tests that need a bare environment (the
zipapp and first-contact ones) pass their own env or `python -I`.

Children also find compiled bytecode: under PYTHONDONTWRITEBYTECODE (set on some hosts to keep
trees free of `__pycache__`) every server and CLI child compiled dbsvc's ~140 modules from
source, about 0.4 s of CPU of a server's 0.9 s start, some thousand times a run. They write
and read it under PYTHONPYCACHEPREFIX instead, a directory outside the checkout (one tree per
source path, checked against each source's mtime and size as `__pycache__` is), unless the
environment names one already.

It orders the files for `--dist loadfile` (the longest first) and leaves the files that
start no server out of the h11 pass (PARSER_FREE and LONGEST_FIRST below say why).

It runs every Hypothesis test without a per-example deadline (HYPOTHESIS_PROFILE below).

Last, it draws the seed of schemathesis's at-length run (SCHEMATHESIS_SEED below), once in
the process that starts the workers, and names it at the end of every run that selects slow
tests, so a failure found at random can be replayed.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

CHECKOUT = str(Path(TESTS).parent)
_inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != CHECKOUT]
os.environ["PYTHONPATH"] = os.pathsep.join([CHECKOUT, *_inherited])

if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"dbsvc-tests-pycache-{os.getuid()}")

# Hypothesis's default deadline (200 ms an example) is a wall-clock assert, and on this 2-core
# host shared by several runs (load 15-25) an example waits for the CPU longer than it runs.
# It also sets the bound of the `too_slow` health check: 5 x the deadline, at least 1 s, summed
# over the first ten inputs' draws. tests/storage/test_storage_events.py's draws take ~76 ms
# of a quiet core and failed that check at load 16 ("1 valid inputs after 1.81 seconds", one
# core shared by 15 spinners: bench/README.md, wt-suite10). Without a deadline the bound is
# 30 s: the check stays on for a strategy gone badly wrong (400 x today's draws), no test
# asserts a time, and speed is measured in bench/. A file's own @settings still wins; a
# `--hypothesis-profile` on the command line too. The parent is the profile already loaded
# (Hypothesis's own "ci" one when it detects CI), so only the deadline changes.
HYPOTHESIS_PROFILE = "dbsvc-shared-host"
settings.register_profile(
    HYPOTHESIS_PROFILE, parent=settings.get_profile(settings.get_current_profile_name()), deadline=None
)
settings.load_profile(HYPOTHESIS_PROFILE)

# The xdist workers split the assertion rewrite of a cold cache (tests/support/rewriteshare.py);
# the `stores` fixture of every folder (tests/support/store_fixtures.py);
# per-file CPU of the tests and their children (tests/support/filecpu.py), when asked for.
pytest_plugins = ["support.rewriteshare", "support.store_fixtures"]
if os.environ.get("DBSVC_TEST_FILE_CPU"):
    pytest_plugins.append("support.filecpu")


# The h11 pass (.ci/run: DBSVC_TEST_HTTP_PARSER=h11 over tests/http and tests/app) proves that
# every test that speaks HTTP to a server passes on either parser. These files start no
# server: they drive wires, caches and stores in the test process (the differential runs both
# parsers side by side itself), so a second run under h11 runs the same code again. The
# pass leaves them out; the default run and the in-process pass (which mutation runs rely
# on) still run them.
PARSER_FREE = frozenset(
    {
        "tests/http/test_http_fastpath_differential.py",
        "tests/http/test_http_response_encoding.py",
        "tests/http/test_http_message.py",
        "tests/http/test_http_completion.py",
        "tests/http/test_http_log_escaping.py",
        "tests/app/test_batch_result_ids.py",
        "tests/app/test_readcache_units.py",
        "tests/app/test_many_pages.py",
        "tests/app/test_present_pages_mutants.py",
        "tests/app/test_access_start.py",
    }
)

# `--dist loadfile` hands out whole files, by default those with the most tests first
# (xdist's --loadscope-reorder), so a file of one long test (a hypothesis machine, a kill
# loop, a run of power-loss seeds) was handed out last and ran alone at the end while the
# other worker idled. The longest files by CPU (seconds, own + children, from the per-file
# table of tests/support/filecpu.py) go first instead, then the rest as xdist ordered them:
# most tests first. The figures only rank; a file missing here keeps its place by count.
LONGEST_FIRST = {
    "tests/app/test_app_schemathesis.py": 22,  # 83 before its coverage phase went slow (session 16)
    "tests/guide/test_guide_examples.py": 66,
    "tests/replica/test_replica_history.py": 28,
    "tests/http/test_http_fastpath_differential.py": 20,
    "tests/app/test_realtime_live_query.py": 19,
    "tests/app/test_access_machine.py": 15,
    "tests/test_typing.py": 11,
    "tests/auth/test_jwks_inputs.py": 8,
    "tests/storage/test_storage_crash.py": 9,
    "tests/storage/test_storage_powerloss.py": 6,
    "tests/storage/test_storage_powerloss_more.py": 6,
    # Files of one to four tests, which the count put at the very end of the queue, where one
    # of them ran while the other worker had nothing left (session 19: CPU of each, or the
    # rehearsal's wall where children the plugin does not see dominate). The files of one to
    # four tests left out cost under 2 s of CPU each, so the run now ends on those.
    "tests/app/test_app_record_size.py": 11,
    "tests/test_rewrite_share.py": 9,  # 2.1 s of CPU, 8.7 s of wall in the rehearsal: pytest children
    "tests/datatools/test_datatools_record_size.py": 5,
    "tests/datatools/test_datatools_size_bound.py": 5,
    "tests/app/test_app_degraded.py": 5,  # 2.4 s of CPU and waits of its own (a full disk, an fsync error)
    "tests/explorer/test_explorer_queries.py": 4,
    "tests/app/test_realtime_docs.py": 4,
    "tests/app/test_query_oracle.py": 3,
    "tests/replica/test_replica_batch.py": 3,
    "tests/realtime/test_live_match_oracle.py": 3,
    "tests/storage/test_storage_as_of.py": 3,
    "tests/storage/test_storage_seek.py": 3,
    "tests/clients/test_feeds_resume.py": 3,
    "tests/app/test_browser_realtime.py": 2,
    "tests/app/test_realtime_lag.py": 2,
    # Session 26's whole run at load (junit times over ~4, the load's inflation of that run):
    # files of one to three tests the count put in the last hundred of the queue, each one
    # test of 5-7 s quiet that could end the run alone on one worker.
    "tests/storage/test_storage_cursor_alone.py": 7,
    "tests/storage/test_storage_descending_cursor_pages.py": 5,
    "tests/clients/test_typescript_feed_state.py": 5,
    "tests/storage/test_storage_few_valued_served.py": 5,
    "tests/replica/test_replica_same_files.py": 5,
}


# The slow tests run in CI too (.ci/run's last step). A slow test without a limit of its own
# gets this one rather than setup.cfg's 300 s, which fits the default suite's tests: the long
# access machine ("about two minutes" quiet) and the 10,000 power-loss seeds both met 300 s
# at load 15-20 (session 16), and a limit met under load is a failure no code caused.
SLOW_TIMEOUT = 1800


# The at-length schemathesis run (tests/app/test_app_schemathesis.py) draws 500 random examples
# an operation, new ones each run: its seed is drawn here unless the environment names one,
# and the xdist workers inherit it with the environment, so the worker that runs the file
# uses the seed the controller prints. Replay a failure with the printed line.
SCHEMATHESIS_SEED = "DBSVC_SCHEMATHESIS_SEED"
os.environ.setdefault(SCHEMATHESIS_SEED, str(random.SystemRandom().getrandbits(32)))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    markexpr = config.option.markexpr or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        seed = os.environ[SCHEMATHESIS_SEED]
        terminalreporter.write_line(
            f"schemathesis at length: seed {seed} (replay: {SCHEMATHESIS_SEED}={seed} "
            "python -m pytest -m slow -k at_length tests/app/test_app_schemathesis.py)"
        )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # xdist's option; absent under -p no:xdist
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DBSVC_TEST_HTTP_PARSER") == "h11":
        gone = sorted(name for name in PARSER_FREE if not os.path.exists(os.path.join(CHECKOUT, name)))
        assert not gone, f"tests/conftest.py's PARSER_FREE names files that are gone: {gone}"
        dropped = [item for item in items if _file(item) in PARSER_FREE]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if _file(item) not in PARSER_FREE]
    counts: dict[str, int] = {}
    for item in items:
        if item.get_closest_marker("slow") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
        counts[_file(item)] = counts.get(_file(item), 0) + 1
    items.sort(key=lambda item: (-LONGEST_FIRST.get(_file(item), 0), -counts[_file(item)]))


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
