"""A follower's group taken in bulk: its payloads scanned at once, what a replicated record
is checked for (follow.py rule 7), and runs of plain inserts checked per run.

    fields = scan_group(frames, max_payload, scan)    # each payload's JSON object, or None
    spans  = plain_spans(fields)                      # [(start, end, "insert" | "update" | None)]
    run    = insert_run(table, frames, fields, first, watermark, top, pending)  # or None
    found  = insert_texts(frames, max_payload)        # (model name, payload texts) or None
    run    = insert_group(table, name, frames, texts, first, watermark, scan)  # or None
    rows   = update_run(table, frames, fields, first, watermark)               # or None
    check_fit(table, offset, event, values)           # rule 4, one record

follow.py's `apply_replicated_frames` hands a group here first. A catch-up is mostly
inserts into one model (or updates of one model), and per frame the general path (follow.py `_take`) costs a dozen
Python calls and as many attribute lookups; a run checks the same things with one C-level
`map` over the run per check, so the Python left per frame is the JSON scan, the model's
`row` and the event's tuple (bench/README.md, "Replica apply, session 7").

Rules:

1. Same outcome as the general path, or none. `insert_run` changes nothing: it returns the
   run's parts only when every frame of the run passes every check the general path would
   make (offsets in the header and the payload, watermarks, model, fields, ids absent and
   new, id = the record's id, value types already known good, index keys that can fail);
   otherwise None, and the caller takes the run one frame at a time through the general
   path, which finds the first frame that fails and says why (follow.py rule 2). A record
   of value types new to its model also goes that way once (its validator runs there).
2. `scan_group` reads each payload alone with the json module's C scanner, exactly as
   follow.py `_decode` does (compact JSON, nothing around the object, no NaN), and
   returns None, leaving every frame to `_decode`, when any payload is over the store's
   limit or is not one JSON value: a bad frame is then refused with its own message.
   (One decode of an all-ASCII group, each payload then scanned at its own start with an
   exact-end check, was measured and kept out: no less CPU, docs/decisions.md.)
3. A plain insert is a payload of exactly the six keys of an insert event (kind, model,
   offset, watermark, id, record), a plain update those and `previous`: rows of a batch
   (their `batch` mark) and anything else take the general path, which holds batches
   (follow.py rule 4). A run of inserts goes into its table at once (tableruns.py `insert_run`);
   a run of updates is checked at once and each row then applied in turn, against the
   record the rows before it left.
4. `check_fit` (rule 7 of follow.py): a record of value types new to its model passes the
   model's replace validator once; a record of known types has only the index keys that
   can raise checked (a datetime's key parses its text, an int64 key column refuses an
   int out of range). The types known good are the table's own (`Table.fit`, fits.py),
   learned by this store alone: one attribute read a run, none a frame.
5. A group of plain inserts into one model written exactly as a primary writes them
   (`insert_group`): each payload is `{"kind":"insert","model":M,"offset":O,
   "watermark":W,"id":I,"record":R}` with nothing else, O and W the next offset and
   watermark, I the record's id (an int). Only R is scanned: the text before it is
   compared with the one the primary would write for that row (formatted from O, W and
   the id R holds), so the event's five other keys cost no dict, no keys and no values
   (they were about 45% of a payload's scan), and a payload that differs in any byte
   (spacing, key order, `1.0` for an id, an escape) is left to the general path.
6. Such a group's records are stored as their frames carried them (`Run.stored`: no
   encode a record) when each record's text is exactly the one this store would write
   for its values (rows.py `stored_from_texts`, checked for the whole run at once); a text
   spelled otherwise in any byte (spacing, key order, `1.0` for `1`, an escape, a float's
   spelling) leaves the run's records to be packed from their values, as before. Either
   way the stored bytes are the same.

Plain functions over a table's public surface (`model`, `live`, `max_id`); no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from functools import partial
from itertools import accumulate, chain, groupby, repeat
from operator import add, floordiv, getitem, is_not, itemgetter, lt, sub
from typing import Any, NamedTuple

from dbsvc.errors import RequestError, StreamError
from dbsvc.runtime import INT64_MAX, INT64_MIN, CompiledModel, compact_json, datetime_key, identity, shared
from dbsvc.storage.events import ChangeEvent, EventKind
from dbsvc.storage.logfile import FRAME_HEADER_SIZE
from dbsvc.storage.rows import stored_from_texts
from dbsvc.storage.table import Table
from dbsvc.strictjson import STRICT_SCAN

# A plain row's payload (rule 3): kind, model, offset, watermark, id, record (+ previous).
_PLAIN = {"insert": 6, "update": 7}
_PAYLOAD = slice(FRAME_HEADER_SIZE, None)
_OFFSET = slice(0, 8)
# A run's columns, read off its payloads one key at a time (no tuple a row).
_PARTS = tuple(map(itemgetter, ("offset", "watermark", "id", "record")))
_UPDATE_PARTS = (*_PARTS, itemgetter("previous"))
_SIGNATURE = itemgetter("kind", "model")
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_NOT_NONE = partial(is_not, None)
_INT = {int}
_DICT = {dict}
# A plain insert as a primary writes it (rule 5): its text up to the model's name, and the
# key its record follows.
_INSERT = '{"kind":"insert","model":"'
_RECORD = '"record":'
# runtime.py `datetime_key`'s steps, a column at a time (`column_keys`).
_ALL_BUT_LAST = slice(None, -1)
_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


Scan = Callable[[str, int], tuple[Any, int]]  # the json module's C scanner: (value, end)


# The json module's C scanner (rows.py's SCAN), refusing NaN, Infinity and numbers that
# read as infinity (strictjson.py): no primary writes one, and a record holding it could
# never be packed (`rows.pack_many` raises mid-group, after rows were taken in memory).
# A scanner error is the frame's StreamError (follow.py's `_decode`).
FRAME_SCAN: Scan = STRICT_SCAN


def _fits(frames: Sequence[bytes], max_payload: int) -> bool:
    """Whether there are frames and none's payload is over `max_payload` (rule 2): asked
    before any payload is decoded, by `scan_group` and `insert_texts` alike."""
    return bool(frames) and max(map(len, frames)) - FRAME_HEADER_SIZE <= max_payload


def scan_group(frames: Sequence[bytes], max_payload: int, scan: Scan) -> list[Any] | None:
    """Each frame's payload as its JSON value (rule 2), or None when one is over
    `max_payload` or not one JSON value by itself. `scan` is `FRAME_SCAN`."""
    if not _fits(frames, max_payload):
        return None
    try:
        payloads: Iterator[bytes] = map(getitem, frames, repeat(_PAYLOAD))  # type: ignore[arg-type]
        texts = list(map(bytes.decode, payloads))
        # A StopIteration from the scanner ends `map` early: the lengths below catch it.
        scanned = list(map(scan, texts, repeat(0)))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return None
    if len(scanned) != len(texts) or list(map(_SECOND, scanned)) != list(map(len, texts)):
        return None
    return list(map(_FIRST, scanned))


def plain_spans(fields: list[Any]) -> list[tuple[int, int, str | None]]:
    """The group cut into spans of consecutive frames: (start, end, "insert" or "update"
    when they are plain inserts or plain updates of one model, rule 3, else None).
    Payloads that are not all objects make one span of the general path."""
    if set(map(type, fields)) != _DICT:
        return [(0, len(fields), None)]
    marks = zip(map(dict.get, fields, repeat("kind")), map(dict.get, fields, repeat("model")), map(len, fields))
    spans: list[tuple[int, int, str | None]] = []
    start = 0
    for (kind, _model, size), items in groupby(marks):
        end = start + len(list(items))
        plain = _PLAIN.get(kind) == size and end - start > 1 if type(kind) is str else False
        spans.append((start, end, kind if plain else None))
        start = end
    return spans


def rows_and_columns(model: CompiledModel, records: list[dict]) -> tuple[list[Any], list[tuple[Any, ...]]]:
    """`model.row` of each record, and the same values a field at a time, for records that
    hold exactly the model's fields in order: each record's values as they are but an
    enum's, the model's member string (`row`'s contract, runtime.py `shared_values`). No
    Python call a record: a record's values are its dict's, read a column at a time straight
    from the dicts (no tuple a record made first, then made again once the members are in),
    and the members are looked up a column at a time (bench/README.md, rep9's section).
    Public so that a test holds it to `model.row`, record by record."""
    columns = list(zip(*map(dict.values, records)))  # each record holds every field
    if not columns:
        return [], columns
    for position, members in model.shared_values.items():
        column = columns[position]
        try:
            columns[position] = tuple(map(members.get, column, column))
        except TypeError:  # an unhashable value: `shared` keeps it as it is
            columns[position] = tuple(map(shared, repeat(members), column))
    return list(zip(*columns)), columns


def column_keys(key: Callable[[Any], Any], column: tuple[Any, ...]) -> list[Any]:
    """`key` of each value of a column. A column of datetimes without a null is keyed by
    runtime.py `datetime_key`'s own steps (the text but its last character, `fromisoformat`,
    less the epoch, in microseconds) each mapped over the column: the same keys, or the same
    exception, with no Python call a value (bench/README.md, rep10's section). Public so
    that a test holds it to `key` value by value, exceptions included."""
    if key is identity:
        return list(column)
    if key is datetime_key and None not in column:
        texts: Iterator[Any] = map(getitem, column, repeat(_ALL_BUT_LAST))  # each `value[:-1]`
        instants = map(datetime.fromisoformat, texts)
        return list(map(floordiv, map(sub, instants, repeat(_EPOCH)), repeat(_MICROSECOND)))
    return list(map(key, column))


def _checked_values(
    table: Table, records: list[dict]
) -> tuple[list[Any], dict[int, list[Any]], list[tuple[Any, ...]]] | None:
    """The records' values, when their value types are known good to the table
    (`Table.fit`) and the index keys that can fail do not (rule 4), with those keys
    (position -> a key a record, None for None) and the values a field at a time (the
    columns): what tableruns.py `insert_run` would compute again; else None. The records
    hold exactly the model's fields in order (`_whole_records`)."""
    values, columns = rows_and_columns(table.model, records)
    fit = table.fit
    types = [set(map(type, column)) for column in columns]
    if all(len(one) == 1 for one in types):  # one type a field: the run's one shape
        shapes = {tuple(one.pop() for one in types)}
    else:
        shapes = set(map(tuple, map(map, repeat(type), values)))
    if not shapes <= fit.shapes:
        return None  # types new to the model: its validator runs in the general path
    keys: dict[int, list[Any]] = {}
    for _name, position, key, int64 in fit.keyed:
        try:
            # A key of None is None; an int64 column stored as its own key needs no call a value.
            made = keys[position] = column_keys(key, columns[position])
        except (ValueError, TypeError, OverflowError):
            return None
        if int64 and None in made:
            made = list(filter(_NOT_NONE, made))
        if int64 and made and not (INT64_MIN <= min(made) and max(made) <= INT64_MAX):
            return None
    return values, keys, columns


class Run(NamedTuple):
    """A checked run of plain inserts (`insert_run`): what follow.py's group takes."""

    events: list[ChangeEvent]
    values: list[Any]
    ids: list[Any]
    tops: list[int]  # the table's max id before each row (its undo)
    offsets: list[int]
    keys: dict[int, list[Any]]  # index keys computed by the check (tableruns.py `insert_run`'s `keys`)
    columns: list[tuple[Any, ...]]  # `values` a field at a time (tableruns.py `insert_run`'s `columns`)
    # Each record's stored form, its frame's own text (rule 6), or None: tableruns.py packs the values.
    stored: list[bytes] | None = None


def joined_parts(
    runs: list[Run] | None,
) -> tuple[dict[int, list[Any]] | None, list[tuple[Any, ...]] | None, list[bytes] | None]:
    """The index keys, the columns and the stored texts of a table's run made of `runs` in
    a row (follow.py's group), joined: tableruns.py `insert_run`'s `keys`, `columns` and
    `stored`; (None, None, None) when a row of it came without a checked run, or the runs'
    keys differ in their fields; the stored texts None unless every run has its own."""
    if not runs:
        return None, None, None
    if len(runs) == 1:
        return runs[0].keys, runs[0].columns, runs[0].stored
    if len({tuple(run.keys) for run in runs}) != 1:
        return None, None, None
    keys = {position: list(chain(*(run.keys[position] for run in runs))) for position in runs[0].keys}
    columns = [tuple(chain(*column)) for column in zip(*(run.columns for run in runs))]
    texts: list[bytes] = []
    for run in runs:
        if run.stored is None:
            return keys, columns, None
        texts.extend(run.stored)
    return keys, columns, texts


def _in_place(
    frames: Sequence[bytes], offsets: list[Any], watermarks: list[Any], records: list[Any], first: int, watermark: int
) -> bool:
    """A run's offsets (in its payloads and in its frames' headers) are `first` on, one a
    frame, its watermarks the table's on, and its records are objects (rule 1)."""
    n = len(frames)
    expect = list(range(first, first + n))
    return (
        offsets == expect
        and set(map(type, offsets)) == _INT
        and list(map(int.from_bytes, map(getitem, frames, repeat(_OFFSET)))) == expect
        and watermarks == list(range(watermark + 1, watermark + 1 + n))
        and set(map(type, records)) == _DICT
    )


def _whole_records(model: CompiledModel, records: list[dict], ids: list[Any]) -> bool:
    """Each record holds exactly the model's fields, in order, and its row's id (rule 1).
    Its keys are read a place at a time (the n-th key of every record, one tuple a field,
    once every record holds as many keys as the model has fields), not a tuple a record."""
    fields = model.fields
    return (
        set(map(len, records)) == {len(fields)}
        and list(map(tuple.count, zip(*map(dict.keys, records)), fields)) == [len(records)] * len(fields)
        and list(map(dict.get, records, repeat(model.id_field))) == ids
    )


def _events(
    kind: EventKind,
    name: str,
    offsets: list[Any],
    watermarks: list[Any],
    ids: list[Any],
    records: list[dict],
    previous: Iterable[Any],
) -> list[ChangeEvent]:
    """The run's events, made at C speed (no batch mark: a plain run has none)."""
    return list(
        map(
            tuple.__new__,
            repeat(ChangeEvent),
            zip(repeat(kind), repeat(name), offsets, watermarks, ids, records, previous, repeat(None)),
        )
    )


def insert_run(
    table: Table, frames: Sequence[bytes], fields: list[dict], first: int, watermark: int, top: int, pending: set[Any]
) -> Run | None:
    """The run's events, values and undo marks when every frame passes every check (rule
    1), else None. `first` is the offset the run must start at, `watermark` the table's
    (its pending rows counted), `top` its max id (theirs counted), `pending` the ids of its
    rows not yet in it."""
    try:
        offsets, watermarks, ids, records = [list(map(part, fields)) for part in _PARTS]
    except KeyError:
        return None
    if not _in_place(frames, offsets, watermarks, records, first, watermark) or set(map(type, ids)) != _INT:
        return None
    return _insert_run_of(table, fields[0]["model"], offsets, watermarks, ids, records, top, pending)


def _insert_run_of(
    table: Table,
    name: str,
    offsets: list[Any],
    watermarks: list[Any],
    ids: list[Any],
    records: list[dict],
    top: int,
    pending: set[Any],
) -> Run | None:
    """The checks of a run of inserts past its offsets and watermarks (rule 1): records
    whole, ids new, values that fit; the run, or None."""
    model = table.model
    if not _whole_records(model, records, ids):
        return None
    if ids[0] > top and all(map(lt, ids, ids[1:])):  # new ids in order need no lookups
        tops = [top, *ids[:-1]]  # each row's max id before it: the row before's id
    else:
        live = table.live
        if len(set(ids)) != len(ids) or not pending.isdisjoint(ids) or any(map(live.__contains__, ids)):
            return None
        tops = list(accumulate(ids[:-1], max, initial=top))
    checked = _checked_values(table, records)
    if checked is None:
        return None
    events = _events(EventKind.INSERT, name, offsets, watermarks, ids, records, repeat(None))
    return Run(events, checked[0], ids, tops, offsets, checked[1], checked[2])


def insert_texts(frames: Sequence[bytes], max_payload: int) -> tuple[str, list[str]] | None:
    """The model name and the payloads' texts when every payload starts as a plain insert
    into one model in a primary's spelling (rule 5), within `max_payload`; else None."""
    if not _fits(frames, max_payload):
        return None
    head = _INSERT.encode()
    if not (frames[0].startswith(head, FRAME_HEADER_SIZE) and frames[-1].startswith(head, FRAME_HEADER_SIZE)):
        return None
    try:
        payloads: Iterator[bytes] = map(getitem, frames, repeat(_PAYLOAD))  # type: ignore[arg-type]
        texts = list(map(bytes.decode, payloads))
    except UnicodeDecodeError:
        return None
    end = texts[0].find('"', len(_INSERT))
    if end < 0:
        return None
    name = texts[0][len(_INSERT) : end]
    if not all(map(str.startswith, texts, repeat(texts[0][: end + 1]))):
        return None
    return name, texts


def insert_group(
    table: Table, name: str, frames: Sequence[bytes], texts: list[str], first: int, watermark: int, scan: Scan
) -> Run | None:
    """A whole group of plain inserts into `table` (a fresh group: nothing of it pending)
    taken from its payloads' records alone (rule 5): the run when every payload is the
    primary's own text of its row and the run passes every check of `insert_run` (rule 1);
    else None, with nothing changed. `name` and `texts` come from `insert_texts`."""
    n = len(texts)
    finds = list(map(str.find, texts, repeat(_RECORD)))
    if -1 in finds:  # every head must end at a "record" key (the heads' check below counts on it)
        return None
    starts = list(map(add, finds, repeat(len(_RECORD))))
    try:
        # A StopIteration from the scanner ends `map` early: fewer ends than texts, below.
        scanned = list(map(scan, texts, starts))
    except (ValueError, RecursionError):
        return None
    if list(map(_SECOND, scanned)) != list(map(sub, map(len, texts), repeat(1))) or not all(
        map(str.endswith, texts, repeat("}"))
    ):
        return None
    records = list(map(_FIRST, scanned))
    if set(map(type, records)) != _DICT:
        return None
    ids = list(map(dict.get, records, repeat(table.model.id_field)))
    if set(map(type, ids)) != _INT:
        return None
    offsets = list(range(first, first + n))
    watermarks = list(range(watermark + 1, watermark + 1 + n))
    # What a primary writes before the record of each row (events.py `ChangeEvent.frame`),
    # every row's formatted in one call and compared with the texts' own heads joined
    # (rule 5: one string a group, not one a row). The joins are equal only when each
    # text's head is its row's: each piece ends at the first `"record":` of its text and
    # each expected head holds that key once, at its end (a model name's quotes are
    # escaped), and no proper suffix of `"record":` begins it, so no occurrence spans
    # two pieces; equal joins put the n-th occurrence at the same place, so every piece has
    # its head's length and text.
    head = _INSERT[:-1] + compact_json(name).replace("%", "%%") + ',"offset":%d,"watermark":%d,"id":%d,' + _RECORD
    expected = (head * n) % tuple(chain.from_iterable(zip(offsets, watermarks, ids)))
    if (
        "".join(map(getitem, texts, map(slice, repeat(None), starts))) != expected
        or list(map(int.from_bytes, map(getitem, frames, repeat(_OFFSET)))) != offsets
    ):
        return None
    run = _insert_run_of(table, name, offsets, watermarks, ids, records, table.max_id, set())
    if run is None:
        return None
    # rule 6: each record's own text, between its "record": and the payload's last "}"
    texts = list(map(getitem, texts, map(slice, starts, repeat(-1))))
    return run._replace(stored=stored_from_texts(table.model.fields, run.columns, texts))


def update_run(
    table: Table, frames: Sequence[bytes], fields: list[dict], first: int, watermark: int
) -> list[tuple[ChangeEvent, Any]] | None:
    """A run of plain updates of one model, every frame checked as the general path checks
    it (rule 1), with the table holding every row before the run: each row's event and
    values, or None. Each row is then applied in turn (follow.py `_Group.apply`), so an id
    updated twice in the run meets its first update's record."""
    try:
        offsets, watermarks, ids, records, previous = [list(map(part, fields)) for part in _UPDATE_PARTS]
    except KeyError:
        return None
    if not _in_place(frames, offsets, watermarks, records, first, watermark) or set(map(type, previous)) != _DICT:
        return None
    model = table.model
    if not _whole_records(model, records, ids):
        return None
    try:
        if not all(map(table.live.__contains__, ids)):
            return None
    except TypeError:  # an unhashable id
        return None
    checked = _checked_values(table, records)
    if checked is None:
        return None
    events = _events(EventKind.UPDATE, fields[0]["model"], offsets, watermarks, ids, records, previous)
    return list(zip(events, checked[0]))


def check_fit(table: Table, offset: int, event: ChangeEvent, values: Sequence[Any]) -> None:
    """Rule 4: a replicated record must be one this store can apply whole. A record whose
    value types are new to this table must pass the model's generated replace validator
    under its own id (then its types are known good to the table, `Table.fit`); after that
    a record of known types has only the keys its indexes compute checked, the ones that
    could raise half way: a datetime's key parses its text, an int64 key column refuses an
    int out of range."""
    model = table.model
    fit = table.fit
    record = event.record
    if record.get(model.id_field) != event.id:
        raise StreamError(
            offset,
            f"{event.model} event id {event.id!r} differs from the record's "
            f"{model.id_field} {record.get(model.id_field)!r}",
        )
    shape = tuple(map(type, values))
    if shape not in fit.shapes:
        try:
            model.validate_replace(record, event.id)
        except RequestError as exc:
            raise StreamError(offset, f"{event.model} {event.id!r} does not fit the schema: {exc}") from None
        fit.shapes.add(shape)
    for name, position, key, int64 in fit.keyed:
        value = values[position]
        if value is None:
            continue
        try:
            made = key(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise StreamError(offset, f"{event.model} {event.id!r} does not fit the schema: {name}: {exc}") from None
        if int64 and not INT64_MIN <= made <= INT64_MAX:
            raise StreamError(
                offset,
                f"{event.model} {event.id!r} does not fit the schema: {name} {value!r} is out of the int64 range",
            )
