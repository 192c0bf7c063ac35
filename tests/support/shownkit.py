"""Records of a two-field model (`id`, `name`) written out by hand for storage/shown.py's
unit tests, and a decode that counts its calls: what a page decodes is what it pays for."""

from __future__ import annotations

from dbsvc.storage.rows import pack

FIELDS = ("id", "name")


def decoded(values) -> dict:
    return {"id": values[0], "name": values[1]}


def stored(id_: int, name: str = "") -> bytes:
    """A record as the store keeps it (rows.pack of its values)."""
    return pack(FIELDS, (id_, name or f"r{id_}"))


def json_of(id_: int, name: str = "") -> bytes:
    """The JSON a page with texts hands out for `stored(id_, name)`."""
    return b'{"id":%d,"name":"%s"}' % (id_, (name or f"r{id_}").encode())


class Counted:
    """A decode that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, values) -> dict:
        self.calls += 1
        return decoded(values)
