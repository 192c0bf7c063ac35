"""How long the supervisor asks its selector to wait (dbsvc/supervisor.py rules 3 and 4): a
worker's restart that is due is waited for no longer than the time left to it, and a stop
looks at its workers every tenth of a second. The values handed to `select` are read, not
the clock: a wait of a whole second while a restart was due 0.1 s later is a wrong value
whatever the load, where the restart's lateness (bench/mutation_lateness.py) is a time.

Why: supervisor.py `_next_due` 1, 2, 4 and 10 (docs/mutation.md, sessions 21-23) make the
supervisor do every right thing, a second late; tests/workers/test_supervisor_loop.py checks
times from below only, so none of them failed it. Its fixture runs the supervisor in this
process over tests/support/plan_worker.py's workers (tests/support/supervisor_kit.py, shared
with test_supervisor_loop.py); the selector here is the real one with
each `select` call's timeout noted."""

from __future__ import annotations

import selectors
import time

from dbsvc.supervisor import FIRST_BACKOFF
from support.supervisor_kit import SERVING, ready


class NotedSelector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
    """The default selector, noting (time.monotonic(), timeout) of each `select` call."""

    calls: list[tuple[float, float | None]] = []

    def select(self, timeout: float | None = None):  # type: ignore[no-untyped-def]
        NotedSelector.calls.append((time.monotonic(), timeout))
        return super().select(timeout)


def test_a_due_restart_and_a_stop_are_waited_for_no_longer_than_their_time(supervisor, monkeypatch):
    """reader-1 exits once (a restart due FIRST_BACKOFF later) and is ready again; then the
    stop. Before the stop the supervisor waits the idle tick (1 s) or, once the exit is
    reaped, at most FIRST_BACKOFF; after it, the stop's 0.1 s."""
    NotedSelector.calls = []
    monkeypatch.setattr(selectors, "DefaultSelector", NotedSelector)
    plan = {"writer": SERVING, "reader-1": [["ready", "exit:3"], ["ready", "serve"]]}
    run = supervisor(plan, stop_when=ready("reader-1", 2))
    assert run.status == 0 and len(run.of("reader-1", "start")) == 2
    waits = [timeout for _at, timeout in NotedSelector.calls]
    assert waits and all(w is not None and (w == 1.0 or 0.0 <= w <= FIRST_BACKOFF) for w in waits), waits
    # The restart was due while the loop waited before the stop was sent: at most the backoff.
    before = [timeout for at, timeout in NotedSelector.calls if at < run.signalled[0]]
    assert any(w is not None and w <= FIRST_BACKOFF for w in before), before
    # The stop's own waits: the workers are looked at every tenth of a second until they exit.
    after = [timeout for at, timeout in NotedSelector.calls if at > run.signalled[0]]
    assert 0.1 in after, after
