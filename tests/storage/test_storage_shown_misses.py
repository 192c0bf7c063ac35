"""A page with texts takes its misses in one frame (storage/shown.py `ShownDicts._jsons`),
the admission's first part (the cache below its floor or its share) read once and again
after each record kept: the same answers, the same records kept in the same order, the
same weight and the same refusals as each record taken by `_json` alone, which asks
`admits` whole for every miss (the code before, kept here as the twin's). Pages of 20 at
random over 400 records, with a floor of 8 and a share that lets the cache grow past it
and then holds it there, updates and deletes inside the pages, dicts asked alone between
them, and the table's count moving, so the share's edge is crossed both ways (issue 36
item 2, wt-filt2). It passes before the change too (the twin is that code); a cut that
reads the admission once a page and not again after a record kept, or that counts no
refusal, fails it."""

from __future__ import annotations

import random
from typing import Any

from dbsvc.storage.shown import SentRecord, ShownDicts
from support.shownkit import FIELDS, decoded, json_of, stored


class PerRecord(ShownDicts):
    """The page's misses taken one by one by `_json`, as before `_jsons`."""

    __slots__ = ()

    def _jsons(self, ids: list[Any], page: list[bytes], found: list[Any]) -> list[Any]:
        return list(map(self._json, ids, page, found))


def _texts(out: list[Any]) -> list[Any]:
    """A page's answer as plain values: bytes, a SentRecord's id and text, a dict."""
    return [(dict(r), r.text) if type(r) is SentRecord else r for r in out]


def test_a_page_s_misses_are_kept_and_refused_as_one_by_one():
    rng = random.Random(2)
    count = [400]  # the table's live records, as `sized` reads it
    twins = [
        kind(decoded, capacity=8, window=32, fields=FIELDS, id_field="id", sized=lambda: count[0])
        for kind in (ShownDicts, PerRecord)
    ]
    records = {i: stored(i) for i in range(1, 401)}
    for step in range(600):
        if step % 5 == 1:  # an update: the kept entry of the old version is stale
            i = rng.randrange(1, 401)
            records[i] = stored(i, f"u{step}")
        if step % 17 == 3:  # a delete, and the table's count with it
            i = rng.randrange(1, 401)
            for dicts in twins:
                dicts.forget(i)
            count[0] = max(1, count[0] - 7)
        if step % 23 == 11:  # the table grows: the share lets more in
            count[0] += 11
        if step % 7 == 2:  # a dict asked alone (a GET's), kept by its own rule
            i = rng.randrange(1, 401)
            assert twins[0].one(i, records[i]) == twins[1].one(i, records[i])
        ids = sorted(rng.sample(range(1, 401), 20))
        page = [records[i] for i in ids]
        keyed = step % 3 == 0
        answers = [_texts(dicts.page(ids, page, texts=True, keyed=keyed)) for dicts in twins]
        assert answers[0] == answers[1], step
        # every record its own JSON, the last one's id (or dict) its own
        want = [json_of(i, records[i][len(str(i)) + 3 : -2].decode()) for i in ids]
        assert [a if type(a) is bytes else a[1] for a in answers[0]] == want
        assert list(twins[0].ids) == list(twins[1].ids), step
        assert twins[0].weighs == twins[1].weighs and twins[0].refused == twins[1].refused, step
    kept, refused = len(twins[0].ids), twins[0].refused
    assert kept > 8 and refused > 100  # the cache grew past its floor, and misses were refused
