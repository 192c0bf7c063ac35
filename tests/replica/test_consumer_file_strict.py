"""`dbsvc replicate --out FILE` resuming from a FILE whose frame holds what no server writes
under a good CRC: `NaN`, `Infinity`, a number past the doubles (`1e400`), or no JSON at all
(a hand edit, a foreign writer). The open (dbsvc/replica/sinks.py `scan_frames`, consumer.py
rule 3) parses every good frame strictly and refuses FILE with `CorruptLog` naming FILE, the
byte and the frame's offset, status 1 from the command line, before the server is asked
anything: FILE is left byte for byte as it was (a torn tail after the damage is not cut) and
no FILE.history appears.

Before, only the CRC was checked: such a frame in the middle was kept and resumed after, and
at FILE's end it reached the head-frame check (rule 7), which said "history divergence",
exit 3 (tests/replica/test_replica_non_finite.py holds those two cases now).

The consumer runs in process against the scripted loopback primary (support/replica_kit.py),
and once as the real command line in a child process.
"""

from __future__ import annotations

import pytest

from dbsvc.errors import CorruptLog
from support.cli import run_dbsvc
from support.replica_kit import frame, payload
from support.replica_kit import run_replicate as run

pytestmark = pytest.mark.timeout(120)

F1, F2, F3 = frame(1), frame(2), frame(3)
WORDS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"]


def spoiled(at: int, word: bytes) -> bytes:
    """The frame of a User insert at `at` whose record's score is the text `word`, its length
    and CRC good."""
    return frame(at, payload(at, record={"id": at, "score": 0.5}).replace(b"0.5", word))


def reason(offset: int, why: str) -> str:
    return (
        f"the frame at offset {offset} is not JSON ({why}), expected strict JSON as a server writes; "
        "its CRC is good, so this is damage, not a torn tail: nothing was cut"
    )


def refusal(word: bytes) -> str:
    """The strict decoder's words for `word` (dbsvc/strictjson.py)."""
    text = word.decode()
    if text.lstrip("-") in ("NaN", "Infinity"):
        return f"{text} is not valid JSON (RFC 8259 §6: numbers are finite)"
    return f"the number {text} is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"


def never_asked(attempt: int, after: int) -> int:
    return 403  # ends a run that asks at once (the test then finds the path it asked)


def assert_refused_untouched(primary, tmp_path, data: bytes, at: int, message: str) -> None:
    out = tmp_path / "r.log"
    out.write_bytes(data)
    p = primary(never_asked)
    status, err = run(p.base, out=str(out))
    assert isinstance(status, CorruptLog), (status, err)
    assert str(status) == f"{out}: corrupt at byte {at}: {message}"
    assert err == ""  # nothing cut, nothing said about a tail
    assert out.read_bytes() == data
    assert sorted(f.name for f in tmp_path.iterdir()) == ["r.log"]  # no r.log.history
    assert (p.paths, p.snapshot_paths) == ([], [])


@pytest.mark.parametrize("word", WORDS, ids=lambda w: w.decode())
@pytest.mark.parametrize("where", [1, 2, 3], ids=["first", "middle", "last"])
def test_a_frame_of_file_holding_a_non_finite_number_refuses_the_open(primary, tmp_path, word, where):
    frames = [spoiled(at, word) if at == where else frame(at) for at in (1, 2, 3)]
    at = sum(len(f) for f in frames[: where - 1])
    assert_refused_untouched(primary, tmp_path, b"".join(frames), at, reason(where, refusal(word)))


def test_a_frame_of_file_that_is_not_json_under_a_good_crc_refuses_the_open(primary, tmp_path):
    bad = frame(2, b'{"kind":"insert","model":"User","offset":2,')
    assert_refused_untouched(
        primary,
        tmp_path,
        F1 + bad + F3,
        len(F1),
        reason(2, "Expecting property name enclosed in double quotes: line 1 column 44 (char 43)"),
    )


def test_a_torn_tail_after_a_spoiled_frame_is_not_cut(primary, tmp_path):
    # A torn tail alone is cut and reported; here FILE is refused first, so not a byte goes.
    assert_refused_untouched(primary, tmp_path, F1 + spoiled(2, b"NaN") + F3[:7], len(F1), reason(2, refusal(b"NaN")))


def test_a_file_with_good_frames_only_still_resumes_after_its_last(primary, tmp_path):
    out = tmp_path / "r.log"
    out.write_bytes(F1 + F2 + spoiled(3, b"0.25"))
    p = primary(lambda attempt, after: [spoiled(3, b"0.25"), frame(4), ("close", 1000)] if attempt == 0 else 403)
    status, _err = run(p.base, out=str(out))
    assert out.read_bytes() == F1 + F2 + spoiled(3, b"0.25") + frame(4)
    assert p.paths[0] == "/replicate?after=2"  # the head frame 3 compared, then 4 appended
    assert not isinstance(status, CorruptLog)


def test_the_command_line_says_one_line_and_exits_1_file_untouched(primary, tmp_path):
    out = tmp_path / "r.log"
    data = F1 + spoiled(2, b"1e400") + F3
    out.write_bytes(data)
    p = primary(never_asked)
    done = run_dbsvc("replicate", p.base, "--out", str(out), timeout=60)
    assert done.returncode == 1, done.stderr
    message = f"{out}: corrupt at byte {len(F1)}: {reason(2, refusal(b'1e400'))}"
    assert done.stderr == f"dbsvc: error: {message}\n"
    assert done.stdout == ""
    assert out.read_bytes() == data
    assert sorted(f.name for f in tmp_path.iterdir()) == ["r.log"]
    assert (p.paths, p.snapshot_paths) == ([], [])
