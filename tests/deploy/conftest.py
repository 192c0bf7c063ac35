"""Tests of the operations recipes in deploy/: the real server (tests/app/app_harness.py)
behind real nginx, under the unit's environment, and the manifests read against the README."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(HERE), "app")]
