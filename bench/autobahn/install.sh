#!/usr/bin/env bash
# Install Autobahn|Testsuite (wstest, Python 2.7 only) into a virtualenv outside the repo.
#
#   bash bench/autobahn/install.sh            # prints the wstest path on its last line
#   AUTOBAHN_VENV=/somewhere bash bench/autobahn/install.sh
#
# Idempotent: when $AUTOBAHN_VENV/bin/wstest already runs, it only prints its path.
# Needs a CPython 2.7 (pyenv's 2.7.18 here; or set PY27=/path/to/python2.7) and a C
# compiler (autobahn[accelerate] builds wsaccel from source; gcc is on this machine, and
# apt-get install build-essential provides it elsewhere). Everything else comes from PyPI
# as py2 wheels: autobahntestsuite 25.10.1 pins its whole tree (Twisted 19.10.0,
# autobahn 0.10.9, cryptography 3.3.2, pyOpenSSL 19.1.0, zope.interface 4.6.0, ...).
set -euo pipefail

VENV="${AUTOBAHN_VENV:-/opt/autobahn-venv}"
ABTS_VERSION="${ABTS_VERSION:-25.10.1}"

if [ -x "$VENV/bin/wstest" ] && "$VENV/bin/wstest" --autobahnversion >/dev/null 2>&1; then
    echo "$VENV/bin/wstest"
    exit 0
fi

PY27="${PY27:-}"
if [ -z "$PY27" ]; then
    if command -v pyenv >/dev/null 2>&1 && [ -x "$(pyenv root)/versions/2.7.18/bin/python" ]; then
        PY27="$(pyenv root)/versions/2.7.18/bin/python"
    elif command -v python2.7 >/dev/null 2>&1; then
        PY27="$(command -v python2.7)"
    else
        echo "install.sh: no Python 2.7 found (pyenv install 2.7.18, or set PY27=...)" >&2
        exit 1
    fi
fi
"$PY27" -c 'import sys; assert sys.version_info[:2] == (2, 7), sys.version' >/dev/null

if ! command -v cc >/dev/null 2>&1; then
    echo "install.sh: no C compiler; installing build-essential" >&2
    apt-get update -qq && apt-get install -y -qq build-essential >&2
fi

# Python 2 has no venv module: bootstrap the last virtualenv line that still creates py2
# environments into a scratch dir, so the 2.7 interpreter itself is left untouched.
BOOT="$(mktemp -d)"
trap 'rm -rf "$BOOT"' EXIT
# pip's output goes to a log (this machine's pip.conf names local indexes that py2's pip
# warns about on every lookup) and is shown only when a step fails.
LOG="$BOOT/pip.log"
quiet() {
    if ! "$@" >"$LOG" 2>&1; then
        grep -v 'is ignored' "$LOG" >&2
        echo "install.sh: failed: $*" >&2
        exit 1
    fi
}
quiet "$PY27" -m pip install --disable-pip-version-check --no-warn-script-location \
    --target "$BOOT/lib" 'virtualenv<20.22'
rm -rf "$VENV"
quiet env PYTHONPATH="$BOOT/lib" "$PY27" -m virtualenv "$VENV"
quiet "$VENV/bin/pip" install --disable-pip-version-check "autobahntestsuite==$ABTS_VERSION"
"$VENV/bin/wstest" --autobahnversion >&2
echo "$VENV/bin/wstest"
