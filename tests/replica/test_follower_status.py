"""A replica's status (dbsvc/replica/status.py): the fields /metrics reports, the lag in seconds
and the readiness that waits for the first bootstrap.
"""

from __future__ import annotations

import time

from dbsvc.replica.status import ReplicaStatus


def test_the_status_reports_its_fields_in_order():
    status = ReplicaStatus(
        "http://p:1", state="following", primary_offset=7, bootstraps=2, compactions=4, reconnects=3, error="e"
    )
    assert list(status.report(7).items()) == [
        ("primary", "http://p:1"),
        ("state", "following"),
        ("primary_offset", 7),
        ("lag_offsets", 0),
        ("lag_seconds", 0.0),
        ("bootstraps", 2),
        ("compactions", 4),
        ("reconnects", 3),
        ("error", "e"),
    ]
    assert status.report(9)["primary_offset"] == 9  # our own head when it is past the primary's


def test_lag_seconds_count_from_when_the_replica_was_last_caught_up():
    status = ReplicaStatus("http://p:1", primary_offset=10, caught_up_at=time.monotonic() - 30.2506)
    report = status.report(4)
    assert report["lag_offsets"] == 6
    assert 30.25 <= report["lag_seconds"] < 60.0
    assert report["lag_seconds"] == round(report["lag_seconds"], 3)  # milliseconds
    assert ReplicaStatus("http://p:1", primary_offset=10).report(4)["lag_seconds"] == 0.0  # never caught up


def test_readiness_waits_for_the_first_bootstrap():
    status = ReplicaStatus("http://p:1")
    assert status.waiting_for() == "the first bootstrap from its primary http://p:1 (starting)"
    status.state, status.error = "reconnecting", "refused"
    assert status.waiting_for() == "the first bootstrap from its primary http://p:1 (reconnecting: refused)"
    assert list(status.health().items()) == [
        ("primary", "http://p:1"),
        ("state", "reconnecting"),
        ("ready", False),
        ("waiting_for", "the first bootstrap from its primary http://p:1 (reconnecting: refused)"),
        ("detail", "refused"),
    ]
    status.synced = True
    assert status.waiting_for() is None
    assert status.health()["ready"] is True
