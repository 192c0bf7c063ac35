"""The usage of a bench script that reads `sys.argv` by hand, told from its docstring.

    from usage import check_argv
    check_argv(__doc__, 2)  # before the first sys.argv[...]: CODE DATA

`-h` or `--help` as the first argument prints the script's docstring and exits 0. Fewer than
`least` arguments, or a first argument outside `choices` when some are given, print the
docstring's usage lines (those that run `python bench/...`) on stderr and exit 2, as argparse
does: no IndexError, and no benchmark started by a request for help.

Imports nothing of dbsvc: a script calls it before it puts the checkout under measure first
on `sys.path`, and an older checkout's bench folder need not hold this file.
"""

from __future__ import annotations

import sys


def check_argv(doc: str | None, least: int, choices: tuple[str, ...] = ()) -> None:
    """Return when the arguments can be read; else print help or usage and exit (above)."""
    args = sys.argv[1:]
    text = (doc or "").strip()
    if args[:1] in (["-h"], ["--help"]):
        print(text)
        raise SystemExit(0)
    if len(args) < least:
        problem = f"expected at least {least} argument(s), got {len(args)}"
    elif choices and args[0] not in choices:
        problem = f"expected one of {', '.join(choices)} first, got {args[0]!r}"
    else:
        return
    usage = [line.strip() for line in text.splitlines() if "python bench/" in line]
    lines = "".join(f"  {line}\n" for line in usage)
    sys.stderr.write(f"usage:\n{lines}{sys.argv[0]}: {problem} (--help says more)\n")
    raise SystemExit(2)
