"""A write's encodings composed as writes.py composes them (`apply_insert`, `apply_replace`),
for the tests that hold them to `pack` and `compact_json` byte for byte
(tests/storage/test_storage_shared_encoding.py, test_storage_rows_units.py): rows.py gives
the parts (`pack_parts`, `record_text`, `in_form`, `previous_parts`), the store composes
them with its log payload's template."""

from __future__ import annotations

from dbsvc.runtime import compact_json
from dbsvc.storage.rows import in_form, pack_parts, previous_parts, record_text


def pack_shown(fields: tuple[str, ...], record: dict, values: tuple) -> tuple[bytes, str]:
    """A record's stored form and its JSON, from one encoding where it can."""
    stored, parts = pack_parts(fields, record, values)
    return stored, record_text(fields, record, parts)


def pack_update(fields: tuple[str, ...], record: dict, values: tuple, previous: dict, was: tuple) -> tuple:
    """`pack_shown` of an update's record, and the JSON of the record it replaces: from the
    new record's texts for the values left alone when both are in the record form."""
    stored, parts = pack_parts(fields, record, values)
    if parts is None or not in_form(fields, previous):
        return stored, record_text(fields, record, parts), compact_json(previous)
    return stored, record_text(fields, record, parts), record_text(fields, previous, previous_parts(parts, was, values))
