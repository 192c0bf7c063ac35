"""The data tools' mutation survivors (docs/mutation.md, "dbsvc/datatools/*"), each killed at
the unit where its decision is made, with a literal expectation.
"""

from __future__ import annotations

import pytest

from dbsvc.datatools import load
from dbsvc.datatools.load import ImportReport, import_file
from dbsvc.errors import ImportRejected
from dbsvc.storage.tenants import create_tenant
from support.storage import BLOG


def test_every_violation_of_one_record_is_named_on_its_line(data, tmp_path):
    """`_violations`: the validator's messages for one record, joined by "; "."""
    tenant = create_tenant(str(data), "t")
    path = tmp_path / "f.jsonl"
    path.write_text('{"model": "User", "record": {"id": 1, "email": "a@x", "name": "", "age": 200}}\n')
    with pytest.raises(ImportRejected) as caught:
        import_file(tenant, BLOG, str(path), quiet=True)
    assert caught.value.problems == [
        f"{path}:1: User: 'name' must be at least 1 character long, got 0 characters: \"\"; "
        "'age' must be at most 150, got 200"
    ]


def test_the_import_rate_is_counted_for_a_run_under_a_second():
    report = ImportReport({"User": 3}, 3, 0.25, 0.125, 0.125)
    assert report.summary() == (
        "imported 3 records in 0.5 s (6/s; read and validate 0.2 s, check 0.1 s, write 0.1 s): User 3"
    )


def test_problems_past_the_twentieth_are_counted_not_shown():
    problems = load._Problems("f")
    for line in range(1, 22):
        problems.add(line, "bad")
    assert (problems.count, len(problems.shown), problems.shown[-1]) == (21, 20, "f:20: bad")
