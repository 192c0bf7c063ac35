"""How this process was launched: the interpreter check every entry point runs first (one
line and exit 2 below Python 3.11), and the command a hint should tell the user to type.

dbsvc needs Python 3.11 (`datetime.UTC`, `typing.Self`, dataclass slots, ...). On an older
interpreter the package would end in a SyntaxError or an ImportError somewhere in the middle
of an import (issue 32), so every entry point asks here before it imports anything else:

    dbsvc.py                 the checkout's launcher
    dbsvc/__main__.py        `python -m dbsvc`
    a built app's __main__   dbsvc/build.py writes it (MAIN_SOURCE)
    a generated module       carries the same check inline, built from `MINIMUM` and
                             `TOO_OLD` by dbsvc/compiler/module.py (it may run where no dbsvc
                             is installed for that interpreter)

Rules:

1. This module and dbsvc/__init__.py parse and run on every Python from 2.7 on: no
   annotations, no f-strings, no `from __future__ import annotations`, nothing imported but
   `sys`. Python compiles a whole file before it runs a line of it, so the syntax of the
   first modules an entry point loads decides whether the check is ever reached.
2. The answer is one line on standard error in the form every dbsvc error takes, and exit
   status 2 (a usage or configuration error, dbsvc/exits.py): nothing was touched.
3. A hint names the program as it was run (`program()`): `dbsvc` for the command line
   however it was started (the console script, `python dbsvc.py`, `python -m dbsvc`: one
   command line, documented as such), and for a built app or a generated module run as a
   script, the interpreter and file as typed (`python3 blog.pyz`), since there may be no
   `dbsvc` on that host at all (issue 32).
"""

import os
import sys

MINIMUM = (3, 11)
EXIT_USAGE = 2
# %-formatting, not str.format or f-strings: the generated module's inline copy runs it on
# any Python (rule 1). The placeholders are this interpreter's major, minor and micro.
TOO_OLD = "dbsvc: error: dbsvc needs Python %d.%d or newer; this is %%d.%%d.%%d" % MINIMUM


def too_old(version_info=None):
    """The error line for an interpreter older than MINIMUM (this one, unless
    `version_info` is given), or None when it is new enough."""
    version = tuple(sys.version_info if version_info is None else version_info)
    if version[:2] >= MINIMUM:
        return None
    return TOO_OLD % version[:3]


def require_python():
    """Return on Python 3.11 or newer; else write the one line and exit 2 (rule 2)."""
    message = too_old()
    if message is not None:
        sys.stderr.write(message + "\n")
        raise SystemExit(EXIT_USAGE)


def program():
    # type: () -> str
    """The command to name in a hint (rule 3): `dbsvc`, or for an app (a `.pyz`, or a
    generated `.py` module that is not dbsvc's own launcher) the words that ran it, taken
    from `sys.orig_argv` up to the app's own arguments."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    typed = list(getattr(sys, "orig_argv", ()))
    arguments = len(sys.argv) - 1
    if not typed or "-m" in typed[: len(typed) - arguments] or script in ("dbsvc", "dbsvc.py"):
        return "dbsvc"
    if not (script.endswith(".pyz") or script.endswith(".py")) or script == "__main__.py":
        return "dbsvc"  # a console script of another program (pytest running cli.main)
    import shlex  # here: called on 3.11 only, after the check

    return shlex.join(typed[: len(typed) - arguments] if arguments else typed)
