"""`dbsvc replicate` stopped by SIGTERM in the middle of a long backoff (consumer.py rule 5):
the backoff sleeps in steps of at most 0.1 s, so the signal ends the run within a step, not
at the backoff's end and not a second later. Run in this process against the scripted
primary of support/replica_kit.py, as test_consumer_runs.py runs it (session 18, wt-mpo8:
consumer.py `_follow` 185, a step of 1.1 s, open since session 17)."""

from __future__ import annotations

import time

import pytest
from replica.test_consumer_runs import run, terminate_when

pytestmark = pytest.mark.timeout(60)

# The third refusal's backoff is drawn from [1, 2] s (0.5 s doubled twice, halved at most by
# the jitter). The signal is sent INTO_BACKOFF after the third connection arrived (sooner, it
# may land before the backoff and end the run at the loop's test); a run that slept in steps
# of 1.1 s would then notice it about 0.9 s later, a 0.1 s step plus this machine's
# scheduling well under NOTICED_WITHIN.
INTO_BACKOFF = 0.2
NOTICED_WITHIN = 0.6


def test_a_sigterm_in_a_long_backoff_ends_the_run_within_a_step(primary, tmp_path):
    p = primary(lambda attempt, after: 503)
    sent: list[float] = []

    def third_refused() -> bool:
        if len(p.paths) < 3:
            return False
        time.sleep(INTO_BACKOFF)
        sent.append(time.monotonic())
        return True

    terminate_when(third_refused)
    status, err = run(p.base, out=str(tmp_path / "r.log"))
    ended = time.monotonic()
    assert status == 0, err
    assert len(p.paths) == 3
    assert err.splitlines()[-1] == "dbsvc replicate: stopped by SIGTERM at offset 0"
    assert ended - sent[0] < NOTICED_WITHIN, f"the run ended {ended - sent[0]:.2f} s after the signal"
