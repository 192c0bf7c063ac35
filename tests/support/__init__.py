"""What the tests share: real servers on port 0 (`server`), the h11 demo app (`demo_app`,
`httpkit`), byte images of data directories (`tree`), store fixtures (`storage`) and the
clients, keys and browsers of each area.

`tests/conftest.py` puts `tests/` on sys.path, so every test imports `from support.X import`;
pytest runs with `--import-mode=importlib`, so test files need no globally unique names.
"""
