"""A model of access rules for tests/app/test_access_machine.py: its schema's rules written
again by hand in plain Python (no dbsvc code), the records and their history, and what each
socket must receive.

`Model` holds every record of the example, each model's history (the state after each of
its rows, for `as_of`), the event stream (offset, watermark, kind, record, previous) and the
head; `expected(watch)` is the frame sequence a socket must get (docs/realtime.md, "Access
rules"): a change feed's insert / update / delete (an update whose one side is invisible
shown as the delete or insert of the other), a live query's Init and deltas, and `link`
frames on Post's feeds for Comment changes. A link's parent is read by the server when it
delivers the link, so a link whose parent came into or left view between the event and the
check may or may not be sent: it is *optional* in the sequence (`align`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

MODELS = ("Note", "Doc", "Post", "Comment")
MISSING: Any = object()

USERS: dict[str, dict[str, Any]] = {
    "ann": {"sub": "ann", "role": "editor", "org": "a"},
    "bob": {"sub": "bob", "role": "writer", "orgs": ["a", "b"]},
    "eve": {"sub": "eve", "org": "b"},
    "root": {"sub": "root", "role": "admin"},
    "anon": {"role": "editor", "org": "b", "orgs": ["c"]},  # no `sub`
}
FIELDS = {
    "Note": ("owner", "title"),
    "Doc": ("org", "title", "level"),
    "Post": ("author", "published", "title"),
    "Comment": ("post", "author", "text"),
}
FILLED = {"Note": ("owner", "sub"), "Doc": ("org", "org"), "Post": ("author", "sub"), "Comment": ("author", "sub")}
DEFAULTS: dict[str, dict[str, Any]] = {"Doc": {"level": 0}, "Post": {"published": False}}
FILTERS: dict[str, dict[str, tuple]] = {
    "Note": {"owner": ("ann", "bob", "eve")},
    "Doc": {"org": ("a", "b", "c"), "level": (0, 1, 2)},
    "Post": {"author": ("ann", "bob", "root"), "published": (True, False)},
    "Comment": {"author": ("ann", "bob", "root")},
}
PROJECTIONS = {"brief": ("id", "title", "published")}


# -- the rules of the schema, by hand --------------------------------------------------------


def claim(who: str, name: str) -> Any:
    return USERS[who].get(name, MISSING)


def same(value: Any, other: Any) -> bool:
    return other is not MISSING and type(value) is type(other) and value == other


def admin(who: str) -> bool:
    return claim(who, "role") == "admin"


def owns(name: str, who: str, record: dict) -> bool:
    return same(record["owner" if name == "Note" else "author"], claim(who, "sub"))


def doc_writer(who: str, record: dict) -> bool:
    return same(record["org"], claim(who, "org")) and claim(who, "role") in ("editor", "admin")


def readable(name: str, who: str, record: dict | None) -> bool:
    if record is None:
        return False
    if admin(who):
        return True
    if name == "Doc":
        orgs = claim(who, "orgs")
        return same(record["org"], claim(who, "org")) or (isinstance(orgs, list) and record["org"] in orgs)
    if name == "Post":
        return record["published"] is True or owns(name, who, record)
    return owns(name, who, record)


def may_create(name: str, who: str, record: dict) -> bool:
    if name == "Doc":
        return admin(who) or doc_writer(who, record)
    if name == "Comment":
        return owns(name, who, record)
    return admin(who) or owns(name, who, record)


def may_update(name: str, who: str, before: dict, after: dict) -> bool:
    if admin(who):
        return True
    if name == "Doc":
        return doc_writer(who, before) and doc_writer(who, after)
    if name == "Post":  # the rule reads `new`: tested once
        return owns(name, who, before) and after["author"] == before["author"]
    return owns(name, who, before) and owns(name, who, after)


def may_delete(name: str, who: str, record: dict) -> bool:
    if admin(who):
        return True
    return doc_writer(who, record) if name == "Doc" else owns(name, who, record)


def sees_nothing(name: str, who: str) -> bool:
    """The token's `subscribe` Scope is NOTHING: its sockets are refused 403."""
    if admin(who) or name == "Post":
        return False
    if name == "Doc":
        orgs = claim(who, "orgs")
        return claim(who, "org") is MISSING and not (isinstance(orgs, list) and orgs)
    return claim(who, "sub") is MISSING


def matches(filters: dict, record: dict | None) -> bool:
    return record is not None and all(
        any(same(record[field], value) for value in values) for field, values in filters.items()
    )


# -- queries, sockets ----------------------------------------------------------------------


def encoded(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def query_string(filters: dict, **params: Any) -> str:
    pairs = [(field, encoded(v)) for field, values in filters.items() for v in values]
    pairs += [(name, encoded(v)) for name, v in params.items() if v is not None]
    return urlencode(pairs)


class Descending:
    """A sort key reversing its value's order (a descending sort whose ties break ascending)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return bool(other.value < self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and other.value == self.value


def sorted_page(records: list[dict], sort: str | None) -> list[dict]:
    """`sort=f` / `sort=-f`, ties on the id ascending; primary-key order without a sort."""
    if sort is None:
        return sorted(records, key=lambda r: r["id"])
    field = sort.lstrip("-")
    if sort.startswith("-"):
        return sorted(records, key=lambda r: (Descending(r[field]), r["id"]))
    return sorted(records, key=lambda r: (r[field], r["id"]))


@dataclass
class Watch:
    """One open socket and what it asked for: `start` is the offset it follows from."""

    socket: Any
    who: str
    model: str
    filters: dict
    projection: str | None
    live: bool
    start: int
    init: bool
    init_frame: dict | None = None

    @property
    def path(self) -> str:
        return self.socket.path


@dataclass(frozen=True)
class Event:
    offset: int
    watermark: int
    model: str
    kind: str
    id: Any
    record: dict
    previous: dict | None


def align(received: list[dict], expected: list[tuple[dict, bool]]) -> bool:
    """True when `received` is the whole of `expected` (each item (frame, certain); an
    uncertain one may be missing), False when it is a prefix of it; AssertionError naming
    the first frame that is neither."""
    j = 0
    for i, frame in enumerate(received):
        while j < len(expected) and not expected[j][1] and expected[j][0] != frame:
            j += 1
        if j == len(expected) or expected[j][0] != frame:
            want = expected[j][0] if j < len(expected) else "nothing"
            raise AssertionError(f"frame {i} {frame!r}, expected {want!r}")
        j += 1
    return all(not certain for _frame, certain in expected[j:])


# -- the model -----------------------------------------------------------------------------


class Model:
    def __init__(self, head: int, watermarks: dict[str, int]) -> None:
        self.base_offset = self.head = head
        self.base_watermarks = dict(watermarks)
        self.watermarks = dict(watermarks)
        self.records: dict[str, dict[Any, dict]] = {name: {} for name in MODELS}
        self.history: dict[str, list[dict[Any, dict]]] = {name: [{}] for name in MODELS}
        self.events: list[Event] = []

    readable = staticmethod(readable)
    may_create = staticmethod(may_create)
    may_update = staticmethod(may_update)
    may_delete = staticmethod(may_delete)
    sees_nothing = staticmethod(sees_nothing)

    def filled(self, name: str, who: str, body: dict) -> dict | None:
        """The record a create stores (token default and defaults applied), or None when the
        token default refuses it (a missing claim, or a body value other than the claim's)."""
        field, claim_name = FILLED[name]
        value = claim(who, claim_name)
        if value is MISSING or (field in body and not same(body[field], value)):
            return None
        record = {**DEFAULTS.get(name, {}), **body, field: value}
        return {f: record[f] for f in FIELDS[name]}

    def blank(self, name: str, who: str) -> dict:
        """A whole body for a PUT to an id no record has."""
        values = {"owner": who, "author": who, "org": "a", "title": "a", "text": "x", "level": 0, "published": False}
        return {f: values.get(f, 10**6) for f in FIELDS[name]}

    def at(self, name: str, as_of: int | None) -> dict[Any, dict]:
        if as_of is None:
            return self.records[name]
        return self.history[name][as_of - self.base_watermarks[name]]

    def visible(self, name: str, who: str, filters: dict, records: dict[Any, dict]) -> list[dict]:
        return [r for _k, r in sorted(records.items()) if matches(filters, r) and readable(name, who, r)]

    # writes
    def insert(self, name: str, record: dict) -> None:
        record = {"id": record["id"], **{f: record[f] for f in FIELDS[name]}}
        self.records[name][record["id"]] = record
        self._emit(name, "insert", record, None)

    def update(self, name: str, after: dict) -> None:
        before = self.records[name][after["id"]]
        self.records[name][after["id"]] = after
        self._emit(name, "update", after, before)

    def delete(self, name: str, key: Any) -> None:
        self._emit(name, "delete", self.records[name].pop(key), None)

    def _emit(self, name: str, kind: str, record: dict, previous: dict | None) -> None:
        self.head += 1
        self.watermarks[name] += 1
        self.history[name].append(dict(self.records[name]))
        self.events.append(Event(self.head, self.watermarks[name], name, kind, record["id"], record, previous))

    # sockets
    def project(self, watch: Watch, record: dict) -> dict:
        if watch.projection is None:
            return record
        return {f: record[f] for f in PROJECTIONS[watch.projection]}

    def in_view(self, watch: Watch, record: dict | None) -> bool:
        return matches(watch.filters, record) and readable(watch.model, watch.who, record)

    def in_view_at(self, watch: Watch, offset: int) -> list[dict]:
        """The records in view of `watch` as of the global `offset` (what a client resuming
        with `after=offset` holds)."""
        rows = sum(1 for e in self.events if e.model == watch.model and e.offset <= offset)
        records = self.history[watch.model][rows]
        return self.visible(watch.model, watch.who, watch.filters, records)

    def init_frame(self, watch: Watch) -> dict:
        visible = self.visible(watch.model, watch.who, watch.filters, self.records[watch.model])
        records = [self.project(watch, r) for r in visible]
        return {
            "type": "Init",
            "model": watch.model,
            "records": records,
            "watermark": self.watermarks[watch.model],
            "offset": self.head,
            "complete": True,
        }

    def expected(self, watch: Watch) -> list[tuple[dict, bool]]:
        out: list[tuple[dict, bool]] = []
        if watch.init:
            assert watch.init_frame is not None
            out.append((watch.init_frame, True))
        for event in self.events:
            if event.offset <= watch.start:
                continue
            if event.model == watch.model:
                frame = self.row_frame(watch, event)
                if frame is not None:
                    out.append((frame, True))
            if not watch.live and watch.model == "Post" and event.model == "Comment":
                out.extend(self.link_frames(watch, event))
        return out

    def row_frame(self, watch: Watch, event: Event) -> dict | None:
        kind, record, previous = event.kind, event.record, event.previous
        was = self.in_view(watch, previous if kind == "update" else record) if kind != "insert" else False
        now = self.in_view(watch, record) if kind != "delete" else False
        head = {"model": event.model, "offset": event.offset, "watermark": event.watermark}
        if watch.live:
            if now:
                return {"type": "Updated" if was else "Added", **head, "record": self.project(watch, record)}
            return {"type": "Removed", **head, "id": event.id} if was else None
        if not (was or now):
            return None
        frame = {"kind": kind, **head, "id": event.id, "record": self.project(watch, record)}
        if kind != "update":
            return frame
        assert previous is not None
        before = was or readable(watch.model, watch.who, previous)
        after = now or readable(watch.model, watch.who, record)
        if before and after:
            return {**frame, "previous": self.project(watch, previous)}
        if before:
            return {**frame, "kind": "delete", "record": self.project(watch, previous)}
        return {**frame, "kind": "insert"}

    def link_frames(self, watch: Watch, event: Event) -> list[tuple[dict, bool]]:
        kind, record, previous = event.kind, event.record, event.previous
        old = record["post"] if kind == "delete" else previous["post"] if previous is not None else None
        new = None if kind == "delete" else record["post"]
        if old == new:
            return []
        out = []
        for parent, linked, child in ((old, False, previous or record), (new, True, record)):
            if parent is None or not readable("Comment", watch.who, child):
                continue
            if watch.filters or not admin(watch.who):  # a Scope of everything and no filter reads no parent
                seen = [self.in_view(watch, state) for state in self.parent_states(parent, event.offset)]
                if not any(seen):
                    continue
                certain = all(seen)
            else:
                certain = True
            frame = {
                "kind": "link",
                "model": "Post",
                "id": parent,
                "child_model": "Comment",
                "child_id": event.id,
                "field": "post",
                "linked": linked,
                "offset": event.offset,
            }
            out.append((frame, certain))
        return out

    def parent_states(self, key: Any, offset: int) -> list[dict | None]:
        """The Post `key` as it was at `offset` and at each of its later changes: the states
        the server may read when it delivers a link of that offset."""
        states: list[dict | None] = [None]
        for event in self.events:
            if event.model != "Post" or event.id != key:
                continue
            state = None if event.kind == "delete" else event.record
            if event.offset <= offset:
                states = [state]
            else:
                states.append(state)
        return states

    def assert_may_see(self, watch: Watch, frame: dict) -> None:
        """No frame carries a record, or a `previous`, its token may not read: each is the
        projection of a side of its event that `readable` allows."""
        if "offset" not in frame or frame.get("kind") == "link" or frame.get("type") == "Init":
            return
        event = next(e for e in self.events if e.offset == frame["offset"])
        for side in ("record", "previous"):
            if side in frame:
                sides = [v for v in (event.record, event.previous) if v is not None]
                sides = [v for v in sides if self.project(watch, v) == frame[side]]
                assert any(readable(watch.model, watch.who, v) for v in sides), (watch.who, watch.path, frame)
