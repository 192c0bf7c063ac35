"""A run of plain inserts (storage/followrun.py) holds every value exactly as its record
held it, whatever its text: commas, quotes, backslashes, control characters, non-ASCII,
the cut marks of a stored run ("],[") and of joined records ("},{"), nested json. A run
whose records share a known shape and one whose records mix known shapes both end as
their frames applied one at a time end. A run whose keys only add up (one record short
its last field, the next opening with one more, the values' types lined up with the
fields) is refused as one frame at a time refuses it: `_whole_records` reads the run's
keys in one flat tuple, and only their order tells these records from whole ones.

Units against `model.row` first (in process, no store), then real stores in temporary
directories (tests/replica/test_replica_apply_plain_runs.py's harness)."""

from __future__ import annotations

import json
from typing import Any

from replica.test_followrun_units import frame as item_frame
from replica.test_followrun_units import fresh, item, payload, taught
from replica.test_replica_apply_plain_runs import _both_ways, _event, _users

from dbsvc.storage.followrun import insert_run
from support.storage import user

TEXTS = [
    "a, b, c",
    'a "quoted" word, a \\ backslash',
    "é ü 中文 🙂 \u2028",
    "line\nbreak\ttab \x01 end",
    "],[ and },{ and ,",
    '{"not": "an object"}',
]
NESTED: list[Any] = [
    {"k": [1, {"x": "y,z"}], "s": "],[", "u": "é"},
    [1, "two, three", [3.5, None, {"a": "}"}]],
    "a json string, with a comma",
]


def _awkward(first: int, count: int, **over: Any) -> list[dict]:
    """`count` items from id `first` whose texts and nested json are the awkward ones."""
    return [
        item(i, name=TEXTS[i % len(TEXTS)] + f" {i}", extra=NESTED[i % len(NESTED)]) | over
        for i in range(first, first + count)
    ]


def test_a_run_of_awkward_values_is_model_row_of_each_record():
    model, table = fresh()
    records = json.loads(json.dumps(_awkward(3, 12)))  # as a payload's scan makes them
    for record in records[:3]:  # each nested shape known good (dict, list, str)
        taught(model, table, record)
    fields = [payload("insert", 5 + n, r, 1 + n) for n, r in enumerate(records)]
    run = insert_run(table, [item_frame(f) for f in fields], fields, 5, 0, 2, set())
    assert run is not None
    assert run.values == [model.row(r) for r in records]
    assert run.columns == list(zip(*run.values))
    assert [dict(zip(model.fields, v)) for v in run.values] == records


def test_a_run_with_one_record_short_and_the_next_long_is_refused():
    # The run's keys are as many as its fields times its records, and its values' types
    # the known shape repeated (the record short its last null, the next one opening with
    # a null of its own): only the keys in order tell these records from whole ones.
    model, table = fresh()
    taught(model, table, item(1))
    records = [item(3), {k: v for k, v in item(4).items() if k != "extra"}, {"more": None} | item(5)]
    assert sum(map(len, records)) == len(model.fields) * len(records)
    fields = [payload("insert", 5 + n, r, 1 + n) for n, r in enumerate(records)]
    assert insert_run(table, [item_frame(f) for f in fields], fields, 5, 0, 2, set()) is None


def test_a_run_whose_later_record_has_another_shape_needs_that_shape_known():
    model, table = fresh()
    taught(model, table, item(1))
    records = [item(3), item(4), item(5, n=None)]  # the first two share the known shape
    fields = [payload("insert", 5 + n, r, 1 + n) for n, r in enumerate(records)]
    frames = [item_frame(f) for f in fields]
    assert insert_run(table, frames, fields, 5, 0, 2, set()) is None
    taught(model, table, item(1, n=None))
    run = insert_run(table, frames, fields, 5, 0, 2, set())
    assert run is not None and run.values == [model.row(r) for r in records]


def _users_awkward(first: int, count: int, shapes: int) -> list[dict]:
    """Users with awkward names and emails; `shapes` > 1 mixes a null age and nested
    profiles of several kinds into the run (else every record has the warm users' shape)."""
    out = []
    for n in range(first, first + count):
        text = TEXTS[n % len(TEXTS)]
        over: dict[str, Any] = {"name": f"{text} {n}", "email": f"{text} <u{n}@example.com>"}
        if shapes > 1:
            over["profile"] = [None, *NESTED][n % shapes]
            over["age"] = None if n % 3 == 0 else n % 7
        else:
            over["age"] = n % 7
        out.append(user(n, joined=f"2026-01-01T00:00:{n % 60:02d}.{n:06d}Z", **over))
    return out


def test_groups_of_awkward_values_end_as_their_frames_one_at_a_time_end(tmp_path):
    # The first group teaches each shape (its run is refused for new types and its frames
    # go one at a time through the model's validator); the second shares one shape with
    # the warm users (the flat type check); the third mixes the known shapes (the per-field
    # sets). Every record comes back as it was sent.
    teach = [_event(n, r) for n, r in enumerate(_users_awkward(11, 4, shapes=len(NESTED) + 1), start=11)]
    one_shape = _users_awkward(15, 30, shapes=1)
    mixed = _users_awkward(45, 30, shapes=len(NESTED) + 1)
    frames = [_event(n, r) for n, r in enumerate(one_shape + mixed, start=15)]
    results = _both_ways(tmp_path, frames[:30], reopened=True, teach=teach)
    assert results["grouped"][0] is None
    assert results["grouped"] == results["one at a time"]
    assert results["grouped reopened"] == results["one at a time reopened"] == results["grouped"][1]
    sent = _users(1, 10) + _users_awkward(11, 4, shapes=len(NESTED) + 1) + one_shape
    assert [u for u, _version in results["grouped"][1]["users"]] == json.loads(json.dumps(sent))
    both = _both_ways(tmp_path / "mixed", frames, reopened=True, teach=teach)
    assert both["grouped"][0] is None
    assert both["grouped"] == both["one at a time"]
    assert [u for u, _version in both["grouped"][1]["users"]] == json.loads(json.dumps(sent + mixed))


def test_a_group_with_one_record_short_and_the_next_long_fails_as_one_at_a_time(tmp_path):
    records = _users(11, 6)
    records[2] = {k: v for k, v in records[2].items() if k != "profile"}
    records[3] = {"more": None} | records[3]  # the values' types line up with the fields
    frames = [_event(n, r) for n, r in enumerate(records, start=11)]
    results = _both_ways(tmp_path, frames, reopened=True)
    assert results["grouped"][0] == results["one at a time"][0]
    assert results["grouped"][0] is not None and "record has fields" in results["grouped"][0]
    assert results["grouped"] == results["one at a time"]
