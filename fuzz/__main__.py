"""`python -m fuzz HARNESS [libFuzzer args]`: run one harness under atheris.

dbsvc, h11 and wsproto are instrumented for coverage as the harness imports them, and so
are the functions of any module a harness generated from a schema (listed in its
`GENERATED`), which no import hook sees: they come from `compile()`.
"""

from __future__ import annotations

import importlib
import sys

from fuzz import HARNESSES


def _quiet_logging() -> None:
    """The service's own JSON log format, written nowhere: formatting runs, output does not."""
    import io

    from dbsvc.logs import configure_logging

    class Nowhere(io.StringIO):
        def write(self, text: str) -> int:
            return len(text)

    configure_logging("info", "json", stream=Nowhere())


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in HARNESSES:
        sys.stderr.write(f"usage: python -m fuzz HARNESS [libFuzzer args]; HARNESS is one of {', '.join(HARNESSES)}\n")
        return 2
    import atheris

    with atheris.instrument_imports(include=["dbsvc", "h11", "wsproto"]):
        _quiet_logging()
        harness = importlib.import_module(f"fuzz.{argv[0]}")
    for module in getattr(harness, "GENERATED", ()):
        for value in vars(module).values():
            if getattr(getattr(value, "__code__", None), "co_filename", None) == module.__file__:
                atheris.instrument_func(value)
    atheris.Setup([f"fuzz {argv[0]}", *argv[1:]], harness.TestOneInput)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
