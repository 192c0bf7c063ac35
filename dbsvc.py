"""Launcher: `python dbsvc.py ...` from a checkout runs the same command line as `dbsvc ...`.

Written in the syntax every Python parses (dbsvc/launch.py, rule 1), so an interpreter too
old for dbsvc says so in one line. `python -I dbsvc.py` (isolated mode) leaves this file's
directory off sys.path; the launcher puts it back, since the package it runs sits beside it.
"""

import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
if os.path.isfile(os.path.join(HERE, "dbsvc", "__init__.py")) and HERE not in sys.path:
    sys.path.insert(0, HERE)  # the checkout's dbsvc, as a plain `python dbsvc.py` finds it

from dbsvc.launch import require_python  # noqa: E402

if __name__ == "__main__":
    require_python()
    from dbsvc.cli import main

    raise SystemExit(main(sys.argv[1:]))
