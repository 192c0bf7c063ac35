"""Strict JSON decoding: the json module's decoder, refusing the numbers JSON does not hold.

Python's `json.loads` reads `1e400` as `inf` and takes the words `NaN`, `Infinity` and
`-Infinity`. None of them is JSON (RFC 8259 §6: a number is finite), dbsvc never writes
one (`compact_json` refuses to), and a value holding one cannot be stored or sent again.
Whatever reads JSON that came from outside the process (a request body, a token, an import
line, a replica's frames and snapshots, the storage's own files when opened, a backup's
manifest, a cursor) decodes it with these, so each is refused at decode time, where the
reader can say which file, frame or line held it, and never as a late ValueError from an
encoder after something was taken in memory:

    value = strict_loads(text_or_bytes)          # ValueError: not JSON, or a non-finite
    value, end = STRICT_SCAN(text, index)        # the C scanner itself (no whitespace skipped)
    decoder = json.JSONDecoder(parse_constant=refuse_constant, parse_float=finite_float, ...)

Cost: `parse_constant` is called only for the three words, so it costs nothing on
ordinary input; `parse_float` is one Python call per number with a fraction or an exponent
(an int is never passed to it), about 0.1 us each.

Imports nothing of dbsvc: every layer may import it (tests/test_layers.py, part
`strictjson`). Every refusal is a ValueError (`NonFinite` for a number out of range), so
a reader that already turns a decoder's ValueError into its own typed error (CorruptLog,
StreamError, FrameError, a 400) refuses these the same way, with the number in the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

SHOWN = 60  # the characters of a number's text a message shows (runtime.py SHOW_LIMIT's value)


class NonFinite(ValueError):
    """JSON text holding a number a double cannot hold (`1e400`): JSON by its grammar,
    refused for its value. (The words are not JSON at all: `refuse_constant` raises a
    plain ValueError, as the decoder does for any other text that is not JSON.)"""


def refuse_constant(name: str) -> Any:
    """`parse_constant`: `NaN`, `Infinity` and `-Infinity` are not JSON."""
    raise ValueError(f"{name} is not valid JSON (RFC 8259 §6: numbers are finite)")


def finite_float(text: str) -> float:
    """`parse_float`: a number with a fraction or an exponent as a float, refused when it
    reads as an infinity (`1e400`, `-1e400`, or 309 digits and a fraction)."""
    value = float(text)
    if value - value != 0.0:  # inf - inf is nan; a finite value gives 0.0
        raise NonFinite(
            f"the number {text[:SHOWN]} is out of range: expected a finite number (a 64-bit float, RFC 8259 §6)"
        )
    return value


STRICT_DECODER = json.JSONDecoder(parse_constant=refuse_constant, parse_float=finite_float)

# The decoder's C scanner, called directly: (value, index after it) of the JSON value that
# starts at an index of a str; StopIteration where none starts, ValueError if it is broken
# or holds a non-finite number. (An attribute the decoder sets on itself; the stubs omit it.)
STRICT_SCAN: Callable[[str, int], tuple[Any, int]] = STRICT_DECODER.scan_once  # type: ignore[attr-defined]


def strict_loads(data: str | bytes | bytearray) -> Any:
    """`json.loads(data)` refusing non-finite numbers (`NonFinite`, a ValueError). Bytes
    are decoded exactly as json.loads decodes them (the encoding its `detect_encoding`
    finds, a UTF-8 BOM skipped, "surrogatepass"), so a file edited by hand and saved with
    a BOM reads as before."""
    if not isinstance(data, str):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    return STRICT_DECODER.decode(data)
