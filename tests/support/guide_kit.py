"""Run the user guide (docs/guide/*.md) as written: every shell example against real servers.

The guide's conventions, which docs/guide/README.md states for readers too:

- A fenced block marked `console` is an example. A line starting with `$ ` is a command
  (lines starting with `> ` continue it, as bash's PS2 shows them); the lines up to the next
  command are its output, standard output and standard error together.
- In an output line `…` stands for any text (a timestamp, a request id, a token); a line that
  is only `…` stands for any number of lines, none included.
- `<!-- guide: ... -->` comments, invisible when rendered, say what runs around the examples:

      serve SCHEMA [NAME=VALUE ...] [port=3000] [data=data] [args="..."]
          start `dbsvc serve SCHEMA` with those variables (SERVICE_DATA is `data`, relative
          to the chapter's directory) and wait until its `/ready` answers 200 (a read
          replica's first bootstrap); it stands in for `localhost:<port>` in what follows
      stop [PORT]         SIGTERM the server(s); they must exit with status 0
      idp                 a throwaway identity provider: `idp.pem` (its EC P-256 public key)
                          and the variables TOKEN, TOKEN_GLOBEX, TOKEN_NO_TENANT,
                          TOKEN_EXPIRED, TOKEN_FORGED for the commands
      token NAME CLAIM=VALUE ...
                          one more variable NAME: a valid token of that IdP carrying those
                          claims besides the tenant's (VALUE is JSON when it parses as JSON,
                          else a string), for the access-rules examples: `token ANN sub=ann`
      jwks [port=8080]    serve that IdP's key as a JWKS at `localhost:<port>/jwks.json`
      file NAME           the next fenced block is written to NAME

Each chapter runs in a fresh directory holding `schemas/` (the repository's demo schemas)
and `deploy/` (its recipes), with `dbsvc`, `python` and `python3` on PATH (and `tsc`, npm's
typescript, when tests/clients/ts has it installed), through `bash -c`, one command at a time, in order.
Every other fenced block is refused: nothing in the guide is shown without being run.
"""

from __future__ import annotations

import difflib
import http.server
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.server import ROOT, Server, start_server

GUIDE = ROOT / "docs" / "guide"
TSC = ROOT / "tests" / "clients" / "ts" / "node_modules" / ".bin" / "tsc"  # .ci/run installs it
DIRECTIVE = re.compile(r"^<!-- guide: (.*?) -->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w.+-]*)\s*$")
HOST = re.compile(r"localhost([:/])(\d{4,5})\b")  # localhost:3000, /dev/tcp/localhost/3000
ANY = "…"
COMMAND_TIMEOUT = 120


def wait_ready(server: Server, where: str, timeout: float = 60) -> None:
    """Poll `/ready` until 200, as a user (or a load balancer) waits before the first read: a
    read replica listens before its first bootstrap ends and is not ready until it has."""
    deadline = time.monotonic() + timeout
    while True:
        reply = server.get("/ready")
        if reply.status == 200:
            return
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise GuideError(f"{where}: the server never got ready: {reply.body[:300]!r}")
        time.sleep(0.05)


@dataclass(slots=True)
class Command:
    """One `$ ` line (plus its `> ` continuations) and the output shown under it."""

    text: str
    expected: list[str]
    line: int  # 1-based line of the `$ ` in the chapter


@dataclass(slots=True)
class Step:
    """A directive or a runnable block, in chapter order."""

    kind: str  # "directive", "console" or "file"
    line: int
    words: list[str] = field(default_factory=list)  # directive
    commands: list[Command] = field(default_factory=list)  # console
    name: str = ""  # file
    body: str = ""  # file


class GuideError(AssertionError):
    """A chapter that breaks the conventions, or an example whose output differs."""


def chapters() -> list[Path]:
    return sorted(GUIDE.glob("*.md"))


def parse_chapter(path: Path) -> list[Step]:
    """The chapter's directives and blocks; a fenced block that is neither a console
    example nor a declared file is an error (it would be shown without being run)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    steps: list[Step] = []
    pending_file: Step | None = None
    i = 0
    while i < len(lines):
        text = lines[i]
        directive = DIRECTIVE.match(text)
        fence = FENCE.match(text)
        if directive:
            words = shlex.split(directive.group(1))
            if words[0] == "file":
                if len(words) != 2:
                    raise GuideError(f"{path.name}:{i + 1}: expected `file NAME`")
                pending_file = Step("file", i + 1, name=words[1])
            else:
                steps.append(Step("directive", i + 1, words=words))
            i += 1
            continue
        if not fence:
            if text.startswith(("```", "~~~")):
                raise GuideError(f"{path.name}:{i + 1}: a fence with an info string this kit cannot read")
            i += 1
            continue
        marker, lang = fence.groups()
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != marker:
            end += 1
        if end == len(lines):
            raise GuideError(f"{path.name}:{i + 1}: unclosed fence")
        body = lines[i + 1 : end]
        if pending_file is not None:
            pending_file.body = "\n".join(body) + "\n"
            steps.append(pending_file)
            pending_file = None
        elif lang == "console":
            steps.append(Step("console", i + 1, commands=parse_console(body, path.name, i + 2)))
        else:
            raise GuideError(
                f"{path.name}:{i + 1}: a ```{lang} block that does not run: mark it "
                f"`console`, or declare it with <!-- guide: file NAME -->"
            )
        i = end + 1
    if pending_file is not None:
        raise GuideError(f"{path.name}:{pending_file.line}: `file {pending_file.name}` has no block after it")
    return steps


def parse_console(body: list[str], name: str, first_line: int) -> list[Command]:
    commands: list[Command] = []
    for offset, text in enumerate(body):
        if text.startswith("$ "):
            commands.append(Command(text[2:], [], first_line + offset))
        elif text.startswith("> ") and commands and not commands[-1].expected:
            commands[-1].text += "\n" + text[2:]
        elif commands:
            commands[-1].expected.append(text)
        else:
            raise GuideError(f"{name}:{first_line + offset}: a console block must start with `$ `")
    return commands


def normalise(text: str) -> list[str]:
    """Output lines as compared: CRLF (curl -i) as LF, trailing blanks and blank lines gone."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """`…` alone on a line: any lines (none included); inside a line: any text."""
    parts = []
    for line in normalise("\n".join(expected)):
        if line.strip() == ANY:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split(ANY)) + r"\n")
    return re.compile("".join(parts))


def matches(expected: list[str], actual: str) -> bool:
    lines = normalise(actual)
    text = "".join(line + "\n" for line in lines)
    return output_pattern(expected).fullmatch(text) is not None


class Idp:
    """The chapter's identity provider (tests/support/idp.py) and the tokens the commands see."""

    def __init__(self, directory: Path) -> None:
        from support.idp import TestIdp

        self.idp = TestIdp(directory)
        self.forger = TestIdp(directory / "forger")
        self.named: dict[str, dict[str, object]] = {}  # `token NAME ...` directives

    def name_token(self, name: str, claims: dict[str, object]) -> None:
        self.named[name] = claims

    def tokens(self) -> dict[str, str]:
        now = int(time.time())
        return {
            "TOKEN": self.idp.token(),
            "TOKEN_GLOBEX": self.idp.token(tenant="globex"),
            "TOKEN_NO_TENANT": self.idp.token(tenant=None),
            "TOKEN_EXPIRED": self.idp.token(exp=now - 3600),
            "TOKEN_FORGED": self.forger.token(),
            **{name: self.idp.token(**claims) for name, claims in self.named.items()},
        }

    def jwks(self) -> bytes:
        from jwt.algorithms import ECAlgorithm

        key = json.loads(ECAlgorithm.to_jwk(self.idp.private.public_key()))
        key.update({"kid": "guide-1", "use": "sig", "alg": "ES256"})
        return json.dumps({"keys": [key]}).encode()


def _claim(word: str, where: str) -> tuple[str, object]:
    name, equals, text = word.partition("=")
    if not equals or not name:
        raise GuideError(f"{where}: a token claim is CLAIM=VALUE, not {word!r}")
    try:
        return name, json.loads(text)
    except ValueError:
        return name, text


class JwksServer:
    """A loopback HTTP server answering GET /jwks.json with the IdP's key set."""

    def __init__(self, body: bytes) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                if self.path != "/jwks.json":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class ChapterRun:
    """Runs one chapter's steps in a directory of its own."""

    def __init__(self, path: Path, workdir: Path) -> None:
        self.path = path
        self.workdir = workdir
        self.ports: dict[str, int] = {}  # the guide's port -> the real one
        self.servers: dict[str, Server] = {}
        self.idp: Idp | None = None
        self.jwks: JwksServer | None = None
        self.bin = workdir / ".bin"
        self.bin.mkdir(parents=True)
        (self.bin / "dbsvc").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "dbsvc.py"}" "$@"\n')
        for shim in ("python", "python3"):
            (self.bin / shim).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        for shim in ("dbsvc", "python", "python3"):
            (self.bin / shim).chmod(0o755)
        if TSC.exists():  # npm's typescript and @types/node, as a reader installs them (clients.md)
            (self.bin / "tsc").write_text(f'#!/bin/sh\nexec "{TSC}" --typeRoots "{TSC.parents[1] / "@types"}" "$@"\n')
            (self.bin / "tsc").chmod(0o755)
        (workdir / "schemas").symlink_to(ROOT / "schemas")
        (workdir / "deploy").symlink_to(ROOT / "deploy")  # the recipes run deploy/'s scripts

    # -- what the commands see --------------------------------------------------------

    def localise(self, text: str) -> str:
        """`localhost:<guide port>` -> `127.0.0.1:<real port>` for every port started (and
        bash's `/dev/tcp/localhost/<guide port>` likewise)."""

        def swap(match: re.Match[str]) -> str:
            real = self.ports.get(match.group(2))
            return f"127.0.0.1{match.group(1)}{real}" if real is not None else match.group(0)

        return HOST.sub(swap, text)

    def environ(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SERVICE_", "TOKEN")) and k != "RUST_LOG" and "proxy" not in k.lower()
        }
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONWARNINGS"] = "ignore"
        env["COLUMNS"] = "80"  # argparse wraps help to the terminal
        if self.idp is not None:
            env.update(self.idp.tokens())
        return env

    # -- steps ------------------------------------------------------------------------

    def run(self) -> int:
        """Every step in order; the number of commands run."""
        count = 0
        try:
            for step in parse_chapter(self.path):
                where = f"{self.path.name}:{step.line}"
                if step.kind == "file":
                    (self.workdir / step.name).write_text(step.body, encoding="utf-8")
                elif step.kind == "directive":
                    self.directive(step.words, where)
                else:
                    for command in step.commands:
                        self.command(command)
                        count += 1
        finally:
            self.close()
        return count

    def directive(self, words: list[str], where: str) -> None:
        verb, rest = words[0], words[1:]
        if verb == "serve":
            self.serve(rest, where)
        elif verb == "stop":
            for port in rest or list(self.servers):
                server = self.servers.pop(port)
                status = server.stop(signal.SIGTERM, timeout=60)
                if status != 0:
                    raise GuideError(
                        f"{where}: the server on guide port {port} exited with {status}:\n" + "".join(server.log[-20:])
                    )
        elif verb == "idp":
            self.idp = Idp(self.workdir)
        elif verb == "token":
            if self.idp is None or not rest or not rest[0].isidentifier():
                raise GuideError(f"{where}: `token NAME CLAIM=VALUE ...` needs an `idp` first and a NAME")
            self.idp.name_token(rest[0], dict(_claim(word, where) for word in rest[1:]))
        elif verb == "jwks":
            if self.idp is None:
                raise GuideError(f"{where}: `jwks` needs an `idp` first")
            options = dict(word.split("=", 1) for word in rest)
            self.jwks = JwksServer(self.idp.jwks())
            self.ports[options.get("port", "8080")] = self.jwks.port
        else:
            raise GuideError(f"{where}: unknown directive {verb!r}")

    def serve(self, words: list[str], where: str) -> None:
        if not words:
            raise GuideError(f"{where}: `serve` needs a schema")
        schema, env, options = words[0], {}, {"port": "3000", "data": "data", "args": ""}
        for word in words[1:]:
            name, _, value = word.partition("=")
            if name.isupper():
                env[name] = self.localise(value)
            elif name in options:
                options[name] = value
            else:
                raise GuideError(f"{where}: unknown serve option {word!r}")
        for name, value in env.items():
            candidate = self.workdir / value
            if value and not os.path.isabs(value) and candidate.exists():
                env[name] = str(candidate)  # the server runs from the repository
        schema_path = self.workdir / schema
        if not schema_path.exists():
            raise GuideError(f"{where}: schema {schema!r} is not in the chapter's directory")
        port = options["port"]
        if port in self.servers:
            raise GuideError(f"{where}: a server already stands for localhost:{port}; stop it first")
        args = tuple(shlex.split(self.localise(options["args"])))
        server = start_server(schema_path.resolve(), self.workdir / options["data"], env, timeout=60, args=args)
        self.servers[port] = server
        wait_ready(server, where)
        self.ports[port] = server.port

    def command(self, command: Command) -> None:
        text = self.localise(command.text)
        try:
            done = subprocess.run(
                ["bash", "-c", text],
                cwd=self.workdir,
                env=self.environ(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=COMMAND_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            raise GuideError(
                f"{self.path.name}:{command.line}: `{command.text}` did not finish within {COMMAND_TIMEOUT} s"
            ) from exc
        actual = done.stdout.decode("utf-8", "replace")
        if not matches(command.expected, actual):
            diff = "\n".join(
                difflib.unified_diff(
                    normalise("\n".join(command.expected)), normalise(actual), "guide", "actual", lineterm=""
                )
            )
            raise GuideError(
                f"{self.path.name}:{command.line}: `{command.text}` printed something "
                f"else (exit {done.returncode}):\n{diff}"
            )

    def close(self) -> None:
        for server in self.servers.values():
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(timeout=10)
        self.servers.clear()
        if self.jwks is not None:
            self.jwks.close()
