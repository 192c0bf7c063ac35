"""dbsvc/datatools/progress.py (issue 33): when a line is drawn, what it says, to the byte.

The clock is a list of readings the test hands out (`time.monotonic` of the module), so
every interval is exact: 0.1 s on a terminal, 5 s on a plain stream.
"""

from __future__ import annotations

import io

import pytest

from dbsvc.datatools import progress
from dbsvc.datatools.progress import Progress


class Clock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress.time, "monotonic", c)
    return c


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_plain_stream_gets_a_line_every_five_seconds_and_one_at_the_end(clock):
    out = io.StringIO()
    p = Progress("import: reading", 1000, "lines", stream=out)
    assert p.tty is False
    clock.now = 4.999
    p.advance(100, 10)
    assert out.getvalue() == ""
    clock.now = 5.0  # 5 s since the start
    p.advance(240, 24)
    assert out.getvalue() == "import: reading: 34 lines (34%)\n"
    clock.now = 9.999
    p.advance(1, 1)
    clock.now = 10.0  # 5 s since the last line
    p.advance(0, 0)
    clock.now = 12.375
    assert p.finish() == 12.375
    assert out.getvalue() == (
        "import: reading: 34 lines (34%)\nimport: reading: 35 lines (34%)\nimport: reading: done, 35 lines in 12.4 s\n"
    )
    assert p.done == 1000


def test_a_terminal_gets_a_bar_redrawn_at_most_ten_times_a_second(clock):
    out = Tty()
    p = Progress("export", 200, "records", stream=out)
    assert p.tty is True
    clock.now = 0.0999
    p.advance(50, 50)
    assert out.getvalue() == ""
    clock.now = 0.1
    p.advance(1, 1)
    clock.now = 0.19
    p.advance(0, 0)
    clock.now = 0.2
    p.advance(149, 1949)
    clock.now = 1.0
    p.finish()
    bar1 = "\rexport  [######....................]  25%  51 records  510/s "
    bar2 = "\rexport  [##########################] 100%  2,000 records  10,000/s "
    bar3 = "\rexport  [##########################] 100%  2,000 records  2,000/s "
    assert out.getvalue() == bar1 + bar2 + bar3 + "\n"


def test_quiet_draws_nothing_and_still_times_the_phase(clock):
    out = Tty()
    p = Progress("x", 10, "lines", stream=out, quiet=True)
    clock.now = 10.0
    p.advance(10, 10)
    p.show()
    clock.now = 11.5
    assert p.finish() == 11.5
    assert out.getvalue() == ""
    assert p.done == 10  # finish leaves a quiet phase's count as reported


def test_show_draws_at_once_whatever_the_interval(clock):
    out = io.StringIO()
    p = Progress("import: writing", 7, "records", stream=out)
    p.show()
    assert out.getvalue() == "import: writing: 0 records (0%)\n"


def test_finish_without_a_line_leaves_a_plain_stream_empty_and_ends_a_bar(clock):
    out = io.StringIO()
    p = Progress("export", 5, "records", stream=out)
    p.advance(5, 5)
    p.finish(line=False)
    assert out.getvalue() == ""
    out = Tty()
    p = Progress("export", 5, "records", stream=out)
    clock.now = 1.0
    p.finish(line=False)
    assert out.getvalue() == "\rexport  [##########################] 100%  0 records  0/s \n"


@pytest.mark.parametrize(
    "total, done, percent, bar",
    [
        (0, 0, "100", "##########################"),
        (-5, 3, "100", "##########################"),
        (3, 1, " 33", "########.................."),
        (3, 2, " 66", "#################........."),
        (100, 250, "100", "##########################"),
        (1000, 999, " 99", "#########################."),
    ],
)
def test_the_percentage_and_bar_are_floored_and_capped(clock, total, done, percent, bar):
    out = Tty()
    p = Progress("t", total, "u", stream=out)
    p.done = done
    p.show()
    assert out.getvalue().startswith(f"\rt  [{bar}] {percent}%  0 u  ")


def test_an_explicit_tty_flag_overrides_the_stream(clock):
    out = Tty()
    p = Progress("t", 4, "u", stream=out, tty=False)
    p.show()
    assert out.getvalue() == "t: 0 u (0%)\n"


def test_the_default_stream_is_standard_error(clock, capsys):
    p = Progress("t", 2, "u")
    p.show()
    assert capsys.readouterr().err == "t: 0 u (0%)\n"
