"""What the tests of the generated documents (OpenAPI, AsyncAPI) share: every `$ref` a
document holds, and a JSON pointer (RFC 6901) walked to the node it names. Both the AsyncAPI
tests and the rules' documents tests check that every `$ref` resolves; the walk was written
twice, once failing and once answering False. Fixture-free, so the files using it stay
runnable by `bench/mutation_inprocess.py`."""

from __future__ import annotations

from typing import Any


def refs(node: Any) -> list[str]:
    """Every `$ref` string anywhere in `node`, depth first."""
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(doc: dict, pointer: str) -> Any:
    """The node of `doc` a local pointer (`#/a/b~1c`) names; the test fails, naming the part
    that does not resolve, when there is none (RFC 6901 §4: `~1` is `/`, `~0` is `~`)."""
    assert pointer.startswith("#/"), pointer
    node: Any = doc
    for part in pointer[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{pointer!r} does not resolve at {part!r}"
        node = node[part]
    return node
