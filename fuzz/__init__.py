"""Coverage-guided fuzz harnesses (atheris) for every place dbsvc reads hostile bytes.

Each module here defines `TestOneInput(data: bytes) -> None`, the libFuzzer entry point,
and has a seed corpus in `fuzz/corpus/<module>/`. A harness lets through only the typed
refusals its target promises (a `RequestError`, `SchemaErrors`, `TokenError`, `FrameError`,
`CorruptLog`) and checks what the target answers; anything else raised is a finding.

    python -m fuzz HARNESS [libFuzzer options] [corpus dirs]   # needs `pip install '.[fuzz]'`
    python -m fuzz schema_parser -max_total_time=300 /tmp/found fuzz/corpus/schema_parser

`TestOneInput` is plain Python, so the test suite replays every seed through it without
atheris (tests/test_fuzz_harnesses.py); the `slow` job runs each harness under atheris.
This package imports nothing at import time: the runner instruments dbsvc before the
harness module imports it. It is not installed with dbsvc (setup.cfg packages).
"""

HARNESSES = (
    "schema_parser",
    "json_body",
    "query_string",
    "jwt_front",
    "http_connection",
    "replica_frame",
    "websocket_upgrade",
)
