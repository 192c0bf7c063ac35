"""bench/write_tail.py's run with each compaction step's thread CPU printed beside its
phase line (issue 36 item 3 of session 28: the snapshot step's CPU inside the write tail).

    python bench/snapshot_tail.py [write_tail.py's arguments: --code DIR --duration 16 ...]

write_tail.py prints a line a phase (a step over 50 ms among them) from the server's marks,
which hold each step's thread CPU too (served_tail.py `Marks`); this runs its `main` with
its `phase` wrapped so that a step's line ends with "thread CPU N ms". Nothing else differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import write_tail  # noqa: E402

_phase = write_tail.phase


def phase(name: str, a: float, b: float, answers: list[float], marks: write_tail.Marks) -> str:
    """write_tail's phase line, and the CPU of the step that spans exactly [a, b]."""
    line = _phase(name, a, b, answers, marks)
    cpu = [m[3] for m in marks if m[1] == a and m[2] == b and m[0] in write_tail.LETTERS]
    return line + (f"; thread CPU {cpu[0] * 1e3:.0f} ms" if cpu else "")


write_tail.phase = phase

if __name__ == "__main__":
    write_tail.main()
