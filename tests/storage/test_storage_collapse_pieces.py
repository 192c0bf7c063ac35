"""heap.py `collapse_in_pieces` on a range that is not a whole number of pieces: each piece
is COLLAPSE_BYTES from where the last one ended, the last one only what is left of the
range (never past its end), and each pause is handed that piece's own wall time.

Why: test_storage_compaction_collapse.py's range is five whole pieces, so a last piece
reaching past the range (`collapse_in_pieces` 19) or of a negative length (20) asked the
same calls there; and it held the pause's seconds from below only, so a pause handed the
clock's reading plus the piece's start (25: every pause then the longest) passed it
(docs/mutation.md, session 23). The calls are read by wrapping `advise_huge_pages`, which
still runs: a private anonymous mapping of this test's, advised for real."""

from __future__ import annotations

import time

from dbsvc.storage import heap
from dbsvc.storage.heap import HUGE_PAGE, collapse_in_pieces
from support.heapkit import huge_mapping, noted_advice


def test_the_last_piece_is_what_is_left_and_each_pause_gets_its_pieces_time(monkeypatch):
    monkeypatch.setattr(heap, "COLLAPSE_BYTES", 2 * HUGE_PAGE)
    asked = noted_advice(monkeypatch).calls
    with huge_mapping(8 * HUGE_PAGE) as start:
        took: list[float] = []
        began = time.perf_counter()
        pieces = collapse_in_pieces([(start, 5 * HUGE_PAGE + 4096)], lambda s: took.append(s) is not None)
        whole = time.perf_counter() - began
    huge = HUGE_PAGE
    assert pieces == 3
    assert asked == [
        ([(start, 2 * huge)], heap.MADV_COLLAPSE),
        ([(start + 2 * huge, 2 * huge)], heap.MADV_COLLAPSE),
        ([(start + 4 * huge, huge + 4096)], heap.MADV_COLLAPSE),  # what is left, not a whole piece
    ]
    # Each pause is handed its piece's time: together at most the whole call's (by construction).
    assert len(took) == 3 and all(t >= 0 for t in took) and sum(took) <= whole
