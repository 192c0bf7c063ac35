"""Answers compared byte for byte that carry the Date header (dbsvc/http/message.py
`http_date`: the clock's second, as text).

Two answers made one after the other carry the same Date only when no second of the clock
began between them; at load a pair straddled one (``17:40:04`` against ``17:40:05``) and a
comparison of the fast path with h11 failed though both were right. Imports nothing of
dbsvc."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def within_one_second(make: Callable[[], T], attempts: int = 3) -> T:
    """`make()`, made again while a second of the clock (the one `http_date` reads) began
    during it; at most `attempts` times, then its last result as it is (a pair that takes a
    second or more is compared anyway, and a Date that differs for another reason still
    fails the comparison)."""
    for _ in range(attempts - 1):
        second = int(time.time())
        made = make()
        if int(time.time()) == second:
            return made
    return make()
