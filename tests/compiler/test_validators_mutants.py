"""The body validators' builders (dbsvc/compiler/validators.py) word for word.

The behaviour of the generated validators is pinned by test_body_validators.py and its
neighbours; what they cannot see is text they never print and choices they never reach
(a docstring, a float default written as an int, a bound of exactly 1 character).
`golden/validators.py.txt` is the source `build_validators` emits for every model of
`golden/validators.dbs` (every type, every bound, every kind of default, a str and an int
id), reviewed by hand and compared byte for byte. It depends only on validators.py,
nodes.py and naming.py, never on the query or module builders.

After a deliberate change of the emitted code, write the file again and review its diff:
`python tests/compiler/test_validators_mutants.py` (given a directory, it writes there instead;
test_golden_scripts.py runs it so).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script (below): this tree's dbsvc and tests/support, not an installed tree's
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from dbsvc.compiler.validators import build_validators
from dbsvc.schema import load_schema

GOLDEN = Path(__file__).resolve().parent / "golden"
SCHEMA = GOLDEN / "validators.dbs"
SOURCE = GOLDEN / "validators.py.txt"


def _emitted() -> str:
    schema = load_schema(str(SCHEMA))
    modules = [ast.Module(body=build_validators(schema, model), type_ignores=[]) for model in schema.models]
    return "\n\n".join(ast.unparse(module) for module in modules) + "\n"


def test_the_validators_of_the_golden_schema_are_the_reviewed_source_byte_for_byte():
    got, want = _emitted(), SOURCE.read_text(encoding="utf-8")
    if got != want:  # the first differing line, not a 500-line diff
        for number, (a, b) in enumerate(zip(got.splitlines(), want.splitlines(), strict=False), 1):
            assert a == b, f"{SOURCE.name} line {number}"
    assert got == want


def test_the_validators_are_valid_trees_not_only_valid_text():
    """The trees compile as trees (every context set): the module is unparsed first, but a
    tree that unparse happens to print would break the day it is compiled directly."""
    schema = load_schema(str(SCHEMA))
    for model in schema.models:
        tree = ast.fix_missing_locations(ast.Module(body=build_validators(schema, model), type_ignores=[]))
        compile(tree, "<validators>", "exec")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN  # a directory to write to instead
    (target / SOURCE.name).write_text(_emitted(), encoding="utf-8")
    print(f"wrote {target / SOURCE.name} from the dbsvc in {Path(sys.modules['dbsvc'].__file__).parent}")
