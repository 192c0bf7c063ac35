"""`python dbsvc.py check` end to end, as a subprocess: exit 0 on a good file, 1 with every error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_check(schema: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "dbsvc.py"), "check", str(schema)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_accepts_the_demo_schemas() -> None:
    for name, count in (("blog.dbs", 3), ("inventory.dbs", 3)):
        result = run_check(ROOT / "schemas" / name)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().endswith(f"ok ({count} models)")
        assert result.stderr == ""


def test_check_reports_every_error_and_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.dbs"
    broken.write_text(
        "[runtime]\nreplication = 1\nmodel A {\n  id float @id\n}\nmodel B {\n  id int @id\n  a int @ref(Nope)\n}\n",
        encoding="utf-8",
    )
    result = run_check(broken)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{broken}:2:15: error: [runtime] replication expects true or false, got 1",
        "  replication = 1",
        "                ^",
        f"{broken}:4:12: error: @id field 'id' has type 'float', expected int, str or uuid",
        "    id float @id",
        "             ^",
        f"{broken}:8:14: error: @ref to unknown model 'Nope', expected one of the declared models (A, B)",
        "    a int @ref(Nope)",
        "               ^",
    ]


def test_check_reports_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    broken = tmp_path / "latin1.dbs"
    broken.write_bytes(b"# caf\xe9\nmodel A {\n  id int @id\n}\n")
    result = run_check(broken)
    assert result.returncode == 1
    assert f"{broken}:1:1: error: file is not UTF-8: cannot decode byte at offset 5" in result.stderr


def test_check_ignores_a_utf8_byte_order_mark(tmp_path: Path) -> None:
    schema = tmp_path / "bom.dbs"
    schema.write_bytes("\ufeffmodel A {\n  id int @id\n}\n".encode())
    result = run_check(schema)
    assert result.returncode == 0, result.stderr


def test_check_reports_rule_errors_with_line_and_column(tmp_path: Path) -> None:
    broken = tmp_path / "rules.dbs"
    broken.write_text(
        "model Note {\n  id int @id\n  owner str @default(token.sub)\n"
        "  @allow(reed, record.owner == token.sub)\n  @allow(get, record.ownr == token.sub)\n}\n",
        encoding="utf-8",
    )
    result = run_check(broken)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{broken}:4:10: error: unknown operation 'reed' in @allow, expected list, get, create, update, "
        "delete, subscribe, read, write, all",
        "    @allow(reed, record.owner == token.sub)",
        "           ^",
        f"{broken}:5:22: error: unknown field 'ownr' of model 'Note' in @allow, expected one of id, owner",
        "    @allow(get, record.ownr == token.sub)",
        "                       ^",
    ]
