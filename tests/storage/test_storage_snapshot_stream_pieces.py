"""write_snapshot_stream (storage/snapshot.py) over stored records in blocks of more than
one parse piece: the keys line holds every piece's keys, and the pause is called inside
each block's work, whichever way the block was cut. In process, a real file.

Session 24's mutation pass: the older streamed snapshots were a few rows, one piece a
block, so `_block`'s `parsed += ...` made `=` (the keys of the block's last piece alone)
survived, as did `_blocks` handing a block its work without the pause (a block of exactly
BLOCK_ROWS taken whole, one cut from gathered chunks, the last part). The pause is
counted, not timed: the file's size at each call tells which block's work it paused.
"""

from __future__ import annotations

import collections
import os

from dbsvc.storage.rows import pack
from dbsvc.storage.snapshot import (
    BLOCK_ROWS,
    PIECE_ROWS,
    ModelImage,
    ModelStream,
    SnapshotImage,
    encode_snapshot,
    write_snapshot_stream,
)

EPOCH = "0123456789abcdef0123456789abcdef"
HEAD = 9
FIELDS = ["id", "name"]


def test_a_streamed_snapshot_of_stored_records_is_the_encoded_one_and_pauses_in_every_block(tmp_path) -> None:
    rows = [[i, "n%05d" % (7919 * i % 10007)] for i in range(1, 2 * BLOCK_ROWS + 253)]
    stored = [pack(FIELDS, r) for r in rows]
    # a chunk of exactly BLOCK_ROWS (taken whole), then two that are gathered and cut
    cuts = [(0, BLOCK_ROWS), (BLOCK_ROWS, BLOCK_ROWS + 300), (BLOCK_ROWS + 300, len(rows))]
    chunks = [(stored[a:b], [HEAD] * (b - a)) for a, b in cuts]
    path = tmp_path / "snapshot.new"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    sizes: list[int] = []
    try:
        write_snapshot_stream(
            fd,
            EPOCH,
            HEAD,
            [ModelStream("User", FIELDS, len(rows), len(rows), chunks, FIELDS)],
            lambda: sizes.append(os.fstat(fd).st_size),
        )
    finally:
        os.close(fd)
    image = SnapshotImage(EPOCH, HEAD, [ModelImage("User", FIELDS, rows, len(rows), FIELDS)])
    data = b"".join(encode_snapshot(image))
    assert path.read_bytes() == data  # every piece's keys in each block's keys line
    # each block's work pauses at least once a parse piece and once a key column, all
    # while the file holds what came before the block
    paused = collections.Counter(sizes)
    lines = data.split(b"\n")
    before = len(lines[0]) + 1
    blocks = [BLOCK_ROWS, BLOCK_ROWS, len(rows) - 2 * BLOCK_ROWS]
    for n, count in enumerate(blocks):
        assert paused[before] >= -(-count // PIECE_ROWS) + len(FIELDS), (n, paused[before])
        before += sum(len(line) + 1 for line in lines[1 + 3 * n : 4 + 3 * n])
