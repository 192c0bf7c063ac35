"""The export file format, JSON Lines: one record per line, wrapped with its model's name.

    {"model":"User","record":{"id":1,"email":"ann@example.com","name":"Ann",...}}
    {"model":"BlogPost","record":{"id":1,"author_id":1,"title":"Hello",...}}

UTF-8, one `\\n` after every line, no other keys. `record` is the record as the HTTP API
serves it (fields in declaration order, values canonical), so a file is also readable by
any JSON Lines tool (`jq -c 'select(.model == "User") | .record'`). The wrapper, not a key
inside the record, carries the model: a record's own fields can never collide with it.

`dbsvc export` writes with `encode_line`; `dbsvc import` reads with `decode_line`, which
accepts exactly that shape (keys in any order, spaces allowed: it is JSON) plus blank
lines, which it skips. `decode_lines` is the same for many lines at once, and faster: it
decodes the UTF-8 of a whole chunk in one call and runs the C scanner of `json` line by
line over it, checking that each value ends its line; any line that does not take that
path (blank, leading spaces, a value spread over lines, bad UTF-8 anywhere in the chunk)
goes through `decode_line`, so both accept and refuse exactly the same lines, with the
same messages. Both decode with the request bodies' decoder and after-checks
(`bodies.BODY_DECODER`, `refuse_unstorable`): `NaN`, `1e400`, nesting past the depth limit
and lone surrogates are refused as a POST would refuse them. Imports nothing from dbsvc but
the runtime and its errors.
"""

from __future__ import annotations

from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

from dbsvc.bodies import BODY_DECODER, TOO_DEEP, refuse_unstorable
from dbsvc.errors import BadRequest, RequestError
from dbsvc.runtime import compact_json, show

_decode = BODY_DECODER.decode
# json's C scanner, (text, index) -> (value, end); typeshed misdeclares its argument.
_scan: Callable[[str, int], tuple[Any, int]] = make_scanner(BODY_DECODER)  # type: ignore[arg-type]


def line_head(model: str) -> str:
    """The constant start of every line of `model` (computed once per model by the writer)."""
    return f'{{"model":{compact_json(model)},"record":'


def encode_line(head: str, record: dict) -> str:
    return f"{head}{compact_json(record)}}}\n"


class BadLine(ValueError):
    """A line that is not `{"model": NAME, "record": {...}}`; the message says what it is."""


def check_record(text: str | None, record: Any) -> None:
    """BadLine for a record a request body could not hold (`bodies.refuse_unstorable`);
    `text` None: the line nests too deep for the decoder itself, which is refused as a
    record nested past the limit, as on a Python whose decoder reaches the level count."""
    try:
        if text is None:
            raise BadRequest(TOO_DEEP)
        refuse_unstorable(text, record)
    except RequestError as exc:
        errors = exc.extra.get("errors")
        message = "; ".join(e["message"] for e in errors) if errors else exc.detail
        raise BadLine(message.replace("request body", "record", 1)) from None


def decode_line(line: bytes) -> tuple[str, Any] | None:
    """(model name, record body) of one line, None for a blank line; `BadLine` otherwise.
    The record body is checked by the model's validator, not here."""
    try:
        text = line.decode("utf-8")
        obj = _decode(text)
    except ValueError as exc:  # UnicodeDecodeError included
        if not line.strip():
            return None
        if line.startswith(b"\xef\xbb\xbf"):  # load.open_source skips the file's own
            raise BadLine(
                "a UTF-8 byte order mark (EF BB BF) starts the line: only the file may start with one"
            ) from None
        raise BadLine(f"not JSON: {exc}") from None
    except RecursionError:
        obj = text = None
    if obj is None or (type(obj) is dict and "record" in obj):
        check_record(text, obj["record"] if obj is not None else None)
    if type(obj) is not dict or len(obj) != 2 or "model" not in obj or "record" not in obj:
        if type(obj) is dict:
            keys = ", ".join(map(repr, obj))
            raise BadLine(f'expected exactly the keys "model" and "record", got {keys or "none"}')
        raise BadLine(f'expected an object {{"model": ..., "record": {{...}}}}, got {show(obj)}')
    model = obj["model"]
    if type(model) is not str:
        raise BadLine(f'"model" must be a model name, got {show(model)}')
    return model, obj["record"]


def decode_lines(lines: list[bytes], number: int) -> tuple[list[tuple[int, str, Any]], list[tuple[int, str]]]:
    """`decode_line` for consecutive whole lines, the first being line `number`:
    ([(line number, model, record body)], [(line number, message)]); blank lines vanish."""
    good: list[tuple[int, str, Any]] = []
    bad: list[tuple[int, str]] = []
    try:
        text = b"".join(lines).decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    pos = 0
    size = len(text)
    for i, raw in enumerate(lines):
        if text:
            start = pos
            line_end = text.find("\n", start)
            if line_end < 0:
                line_end = pos = size
            else:
                pos = line_end + 1
            try:
                obj, end = _scan(text, start)
            except (StopIteration, ValueError, RecursionError):
                obj = end = None
            if (
                end == line_end
                and type(obj) is dict
                and len(obj) == 2
                and type(obj.get("model")) is str
                and "record" in obj
            ):
                try:
                    check_record(text[start:line_end], obj["record"])
                except BadLine as exc:
                    bad.append((number + i, str(exc)))
                    continue
                good.append((number + i, obj["model"], obj["record"]))
                continue
        try:
            decoded = decode_line(raw)
        except BadLine as exc:
            bad.append((number + i, str(exc)))
            continue
        if decoded is not None:
            good.append((number + i, decoded[0], decoded[1]))
    return good, bad
