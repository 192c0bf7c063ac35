"""Progress of a long data tool run: a bar on a terminal, plain lines otherwise.

On a terminal (the stream's `isatty()`), one line is redrawn in place at most ten times a
second::

    import: reading  [#########.................]  34%  340,112 lines  81,200/s

Anywhere else (a pipe, a CI log) a redrawn line would be noise, so a plain line is written
at most every `PLAIN_INTERVAL` seconds, plus one when each phase ends::

    import: reading: 340112 lines (34%)
    import: reading: done, 1000000 lines in 12.3 s

A run of one phase (export) ends with its own summary line instead (`finish(line=False)`),
so its standard error ends in exactly one line saying what was done.

Callers report work in chunks (`advance(n)` every few thousand records), so the cost per
record is nothing; the clock is read once per call.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

TTY_INTERVAL = 0.1
PLAIN_INTERVAL = 5.0
BAR_WIDTH = 26


class Progress:
    """One phase of work: `done` out of `total` (units of the caller's choice), shown as
    `count` `noun` (the count may be lines while the total is bytes)."""

    def __init__(
        self,
        label: str,
        total: int,
        noun: str,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.quiet = quiet
        self.label = label
        self.total = max(total, 0)
        self.noun = noun
        self.done = 0
        self.count = 0
        self.started = time.monotonic()
        self._shown = self.started
        self._drawn = False

    def advance(self, done: int, count: int) -> None:
        """Add `done` units of work covering `count` items."""
        self.done += done
        self.count += count
        now = time.monotonic()
        if self.quiet or now - self._shown < (TTY_INTERVAL if self.tty else PLAIN_INTERVAL):
            return
        self._shown = now
        self._show(now)

    def show(self) -> None:
        """Draw the current state now (a phase that reports no steps shows it has begun)."""
        if not self.quiet:
            self._show(time.monotonic())

    def _percent(self) -> int:
        return min(100, self.done * 100 // self.total) if self.total else 100

    def _show(self, now: float) -> None:
        percent = self._percent()
        if self.tty:
            filled = percent * BAR_WIDTH // 100
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            rate = self.count / max(now - self.started, 1e-9)
            self.stream.write(f"\r{self.label}  [{bar}] {percent:3d}%  {self.count:,} {self.noun}  {rate:,.0f}/s ")
            self._drawn = True
        else:
            self.stream.write(f"{self.label}: {self.count} {self.noun} ({percent}%)\n")
        self.stream.flush()

    def finish(self, line: bool = True) -> float:
        """End the phase with one line; returns its duration in seconds. `line=False`: the
        caller's summary line follows at once (a one-phase run such as export), so a plain
        stream gets nothing here and a terminal's bar is ended, not repeated."""
        elapsed = time.monotonic() - self.started
        if not self.quiet:
            self.done = self.total
            if self.tty:
                self._show(time.monotonic())
                self.stream.write("\n")
            elif line:
                self.stream.write(f"{self.label}: done, {self.count} {self.noun} in {elapsed:.1f} s\n")
            self.stream.flush()
        return elapsed
