"""The second half of the default power-loss seeds (test_storage_powerloss.py has the
first, the simulator's own tests and the slow run): a file of its own so that the suite's
two workers (`--dist loadfile`) share the seeds. A failing seed replays alone:
`DBSVC_POWERLOSS_SEED=1234 python -m pytest tests/storage/test_storage_powerloss_more.py -k seed`.
"""

from __future__ import annotations

from support.powerloss_run import DEFAULT_SEEDS, run_seeds


def test_power_loss_seeds_second_half(scratch):
    run_seeds(DEFAULT_SEEDS // 2, DEFAULT_SEEDS, scratch)
