"""Packaging facts a fresh install relies on."""

from __future__ import annotations

import configparser
from pathlib import Path

import dbsvc

ROOT = Path(__file__).resolve().parents[1]


def test_setup_cfg_version_matches_the_package():
    # setup.cfg cannot use `attr: dbsvc.__version__`: setuptools resolves `dbsvc` to the
    # root launcher dbsvc.py, which has no version. The number is written twice; keep them equal.
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["version"] == dbsvc.__version__
