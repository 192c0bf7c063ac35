"""Readers for the recipes in deploy/ and for the README's configuration table, so that the
tests compare what the files say with what the program and its documentation say.

Each reader is deliberately small and strict about the subset of its format the recipes use:
a construct it does not know fails the test rather than being skipped."""

from __future__ import annotations

import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

from support.server import ROOT

DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "dbsvc@.service"
NGINX_SITE = DEPLOY / "nginx" / "dbsvc-tenants.conf"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
STATEFULSET = DEPLOY / "kubernetes" / "statefulset.yaml"

# A variable name of the process configuration (docs/guide/configuration.md).
VARIABLE = re.compile(r"\b(SERVICE_[A-Z_]*[A-Z]|RUST_LOG)\b")  # not `SERVICE_JWT_*`, a family


@dataclass(frozen=True)
class Unit:
    """A systemd unit as (section, key, value) entries in file order; keys may repeat."""

    entries: tuple[tuple[str, str, str], ...]

    def values(self, key: str, section: str = "Service") -> list[str]:
        return [v for s, k, v in self.entries if s == section and k == key]

    def value(self, key: str, section: str = "Service") -> str:
        found = self.values(key, section)
        assert len(found) == 1, f"{key} appears {len(found)} times in [{section}]"
        return found[0]

    def environment(self, instance: str) -> dict[str, str]:
        """The `Environment=` assignments with the instance name in place of %i."""
        env: dict[str, str] = {}
        for entry in self.values("Environment"):
            for assignment in entry.split():
                name, sep, value = assignment.partition("=")
                assert sep, f"Environment={entry!r}: expected NAME=VALUE"
                env[name] = value.replace("%i", instance)
        return env


def read_unit(path: Path = UNIT) -> Unit:
    entries: list[tuple[str, str, str]] = []
    section = ""
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"{path.name}:{number}: continuation lines are not read here"
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"{path.name}:{number}: expected KEY=VALUE inside a section, got {raw!r}"
        entries.append((section, key.strip(), value.strip()))
    return Unit(tuple(entries))


def readme_variables() -> dict[str, str]:
    """The README's configuration table: every variable named in a row's first cell, mapped to
    its default as the row states it (for `A` / `B` rows, the defaults pair up the same way)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    defaults: dict[str, str] = {}
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"`([A-Z_]+)`", cells[0])
        values = [v.strip().strip("`") for v in cells[1].split(" / ")]
        for index, name in enumerate(names):
            defaults[name] = values[index] if len(values) == len(names) else cells[1]
    return defaults


def unit_variables(text: str) -> set[str]:
    """Every configuration variable a recipe's text names."""
    return set(VARIABLE.findall(text))


def read_dockerfile(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in file order, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, f"{path.name} ends inside a continued line"
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The instructions of the last build stage: what the image is made of."""
    starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    return instructions[starts[-1] :]


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, arguments in final_stage(instructions):
        if keyword == "ENV":
            for assignment in shlex.split(arguments):
                name, sep, value = assignment.partition("=")
                assert sep, f"ENV {arguments!r}: expected NAME=VALUE pairs"
                env[name] = value
    return env


def dockerfile_one(instructions: list[tuple[str, str]], keyword: str) -> str:
    found = [arguments for k, arguments in final_stage(instructions) if k == keyword]
    assert len(found) == 1, f"{keyword} appears {len(found)} times in the final stage"
    return found[0]


def receive_notification(sock: socket.socket) -> dict[str, str]:
    """One sd_notify datagram as a dict of its KEY=VALUE lines (generous timeout: a loaded machine)."""
    sock.settimeout(60)
    datagram = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in datagram.split("\n"))
