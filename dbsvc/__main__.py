"""`python -m dbsvc ...`: the same command line as `dbsvc ...` and `python dbsvc.py ...`.

Written in the syntax every Python parses (dbsvc/launch.py, rule 1): the interpreter check
runs before the command line is imported.
"""

import sys

from dbsvc.launch import require_python

if __name__ == "__main__":
    require_python()
    from dbsvc.cli import main

    raise SystemExit(main(sys.argv[1:]))
