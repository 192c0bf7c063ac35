"""A snapshot thread that reads a chunk while a write is between `note_write`'s two notes
(storage/online.py `TableCut.image_rows`): the record is noted, its version not yet, and
nothing has changed either. The image must hold the version the table still has, the
cut's, never None.

Only a thread caught in that window shows it (docs/mutation.md, session 24, wt-mpo15:
`image_rows` 19, 21 left open as a timing). Here the window is made, not waited for: the
writing thread runs under a line tracer (`sys.settrace`, its own thread only) that stops
it at `note_write`'s second note until the reading side has read; the package is not
patched and nothing sleeps.
"""

from __future__ import annotations

import linecache
import sys
import threading
from typing import Any

from dbsvc.storage import online
from support.storage import open_store, run, user

SECOND_NOTE = "self.versions_before[id_] ="  # note_write's second note, the line stopped before


class BetweenNotes:
    """Runs `note_write(id_)` in a thread of its own, stopped before its second note."""

    def __init__(self, cut: online.TableCut, id_: Any) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._write, args=(cut, id_), daemon=True)

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and "note_write" not in frame.f_code.co_name:
            return None  # only note_write's lines (its mutated copies' names hold it too)
        if event == "line" and SECOND_NOTE in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            self.reached.set()
            self.release.wait(30)  # bounded: a failed test frees the thread by itself
        return self._trace

    def _write(self, cut: online.TableCut, id_: Any) -> None:
        sys.settrace(self._trace)
        try:
            cut.note_write(id_)
        finally:
            sys.settrace(None)


def test_a_chunk_read_between_a_writes_two_notes_holds_the_cuts_version(tenant):
    s = open_store(tenant, sync="off", compact_bytes=1 << 40)
    ids = list(range(1, 41))

    async def fill() -> None:
        for i in ids:
            await s.insert("User", user(i))
        await s.replace("User", 7, user(7, name="twice"))  # its version: this write's offset

    run(fill())
    try:
        tables = dict(s.tables)
        versions = tables["User"].versions
        stamps = [versions.get(i) for i in ids]
        cut = online.take_cut(tables, s.applied_offset, 0)
        users = next(tc for tc in cut.tables if tc.table.name == "User")
        users.gather_ids()
        records = [users.records.get(i) for i in ids]  # as stored at the cut
        writer = BetweenNotes(users, 7)
        writer.thread.start()
        try:
            assert writer.reached.wait(30), "note_write never reached its second note"
            assert 7 in users.before and 7 not in users.versions_before  # the window itself
            got_records, got_versions = users.image_rows(ids)
        finally:
            writer.release.set()
            writer.thread.join(30)
        assert got_versions == stamps
        assert stamps[6] == s.applied_offset == len(ids) + 1
        assert got_records == records
        # and once both notes are made, the noted version is the one read
        assert users.image_rows(ids)[1] == stamps
        online.end_cut(tables)
    finally:
        s.close()
