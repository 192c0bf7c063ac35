"""The README's first contact on a fresh Debian/Ubuntu host (issue 32 item 2).

A fresh Debian 12 host has `python3` and no `python`, and refuses `pip install` into the
system Python (PEP 668): the README's commands say `python3` and make a virtual environment,
and its Commands table lists every command the program has. The slow test runs the whole
rehearsal (.ci/rehearse-quickstart: the quick start and the tour as written, in a new venv,
with no `python` on the PATH, and the pip-less path through Debian's packages).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support.server import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(heading: str) -> str:
    start = README.index(f"## {heading}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def sh_lines(heading: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", section(heading), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_commands_need_no_python_alias():
    lines = sh_lines("Quick start") + sh_lines("A short tour")
    calls = [line for line in lines if re.search(r"(^|&&|\s)python\s", line)]
    assert calls == [], "a fresh Debian host has python3 and no python"
    assert any(line.startswith("python3 -m venv ") for line in lines), "pip needs a venv on Debian (PEP 668)"
    assert any("apt install python3-h11 python3-wsproto" in line for line in lines), "the pip-less path"


def test_readme_commands_table_lists_every_command():
    done = subprocess.run([sys.executable, "dbsvc.py", "--help"], cwd=ROOT, capture_output=True, text=True, check=True)
    listed = done.stdout.split("positional arguments:")[1].split("options:")[0]
    commands = re.findall(r"(?m)^    ([a-z]+)\b", listed)
    assert {"serve", "export", "import", "backup", "replicate"} <= set(commands)
    table = section("Commands")
    missing = [c for c in commands if f"`dbsvc {c}" not in table]
    assert missing == [], f"not in the README's Commands table: {missing}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quick_start_runs_as_written_on_a_fresh_host():
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "rehearse-quickstart")], capture_output=True, text=True, timeout=1700
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the tour's 8 commands printed what the README says" in done.stdout
