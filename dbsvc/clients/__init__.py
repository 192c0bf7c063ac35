"""Clients generated from a schema: `dbsvc client SCHEMA --lang LANG [-o FILE]`.

Pure, like the compiler beside it: the checked IR in, one self-contained source file out,
the same bytes for the same schema and dbsvc version. `model.py` reads the IR once into a
language-neutral client model (types, queries, projections, expands, problem codes, the
schema's fingerprint); each language's emitter writes text from that model only:

    python.py         emit_python: the module, its types (python_types.py), its methods
                      (python_api.py), and the fixed parts copied in as they are
                      (py_rest.py: REST over the standard library; py_realtime.py: feeds
                      that resume with no gap)
    typescript.py     emit_typescript: an ES module (`.ts`) from the same model, and the
                      fixed parts copied in as they are (ts_rest.ts: fetch, errors,
                      pages; ts_feeds.ts: feeds that resume with no gap)

`generate_client(schema, lang)` is the one entry; a language this build lacks is a
ConfigError naming the languages it has. Imports errors, schema and compiler (its
operator table) and nothing that does I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from dbsvc.errors import ConfigError
from dbsvc.schema.ir import Schema


def _python(schema: Schema) -> str:
    from dbsvc.clients.python import emit_python

    return emit_python(schema)


def _typescript(schema: Schema) -> str:
    from dbsvc.clients.typescript import emit_typescript

    return emit_typescript(schema)


EMITTERS: dict[str, Callable[[Schema], str]] = {"python": _python, "typescript": _typescript}
LANGUAGES = tuple(EMITTERS)


def generate_client(schema: Schema, lang: str) -> str:
    """The client source of `schema` in `lang`; ConfigError for a language not built in."""
    emitter = EMITTERS.get(lang)
    if emitter is None:
        raise ConfigError(f"--lang {lang!r}: this dbsvc generates clients in {', '.join(LANGUAGES)} only")
    return emitter(schema)
