"""The guide's tests reach the real-server harness of tests/app (app_harness, idp)."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "app")]
