"""Launcher: `python dbsvc.py ...` from a checkout runs the same command line as `dbsvc ...`."""

import sys

from dbsvc.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
