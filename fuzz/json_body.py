"""A request body -> `parse_json_body` -> a generated validator (create, replace, patch).

The models of both demo schemas are targets; the first byte picks the model, the second
the action, the rest is the body. Invariants: a refusal is a `RequestError` that renders;
an accepted record has exactly the model's fields in declaration order, encodes as compact
JSON (what the store writes and every response sends) and decodes back to itself, survives
the stored-row decoder, and yields an index key for every keyed field.
"""

from __future__ import annotations

import json

from dbsvc.app import parse_json_body
from dbsvc.errors import RequestError
from dbsvc.http.types import Request
from dbsvc.runtime import compact_json
from fuzz.common import all_models, current_record, generated_modules, render

GENERATED = generated_modules()
MODELS = all_models()
ACTIONS = ("create", "replace", "patch")


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    model = MODELS[data[0] % len(MODELS)]
    action = ACTIONS[data[1] % len(ACTIONS)]
    request = Request("POST", "/", "/", [], [("content-type", "application/json")], body=data[2:])
    current = current_record(model.name)
    try:
        body = parse_json_body(request)
        if action == "create":
            record = model.validate_create(body)
        elif action == "replace":
            record = model.validate_replace(body, current[model.id_field])
        else:
            record = model.validate_patch(body, current)
    except RequestError as exc:
        render(exc)
        return
    assert tuple(record) == model.fields, (tuple(record), model.fields)
    text = compact_json(record)
    assert json.loads(text) == record, text
    assert model.decode([record[name] for name in model.fields]) == record
    for name, key in model.keys.items():
        key(record[name])
    if action != "create":
        assert record[model.id_field] == current[model.id_field]
