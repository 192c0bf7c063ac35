"""Schema source text -> tokens, each with its 1-based line and column.

The lexer is hand-written and never raises: every problem becomes a `SchemaError` in
the returned list and lexing goes on, so one run reports everything.

Token kinds:

- IDENT   `[A-Za-z_][A-Za-z0-9_]*` (keywords such as `model`, `true`, `null` are IDENTs;
          the parser gives them meaning)
- INT     `[+-]?[0-9]+`, value an `int`
- FLOAT   `[+-]?[0-9]+(.[0-9]+)?([eE][+-]?[0-9]+)?` with a dot or an exponent, value a `float`
- STRING  double quoted, escapes `\\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX`, no raw newline
- PUNCT   one of `{ } ( ) [ ] , = ? @ .` or a comparison operator `== != < <= > >=`
          (a two-character operator is one token: `==` never lexes as two `=`)
- NEWLINE end of a line (a comment runs up to it and is dropped)
- BAD     a string or number that could not be decoded (already reported); the parser
          takes it as a literal and the checks skip it, so one typo gives one error
- EOF     always the last token

Invariants: tokens come in source order; `text` is the exact source slice of the token
(empty for NEWLINE and EOF). Imports nothing from dbsvc but `dbsvc.errors`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dbsvc.errors import SchemaError


class TokenKind(enum.Enum):
    IDENT = "identifier"
    INT = "integer"
    FLOAT = "float"
    STRING = "string"
    PUNCT = "punctuation"
    NEWLINE = "end of line"
    BAD = "invalid literal"
    EOF = "end of file"


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    value: object
    line: int
    col: int

    def describe(self) -> str:
        """How a message names this token: `'int'`, `'{'`, `end of line`."""
        if self.kind in (TokenKind.NEWLINE, TokenKind.EOF):
            return str(self.kind.value)
        return repr(self.text)


PUNCTUATION = frozenset("{}()[],=?@.<>")
OPERATORS = frozenset({"==", "!=", "<=", ">="})  # lexed before the one-character punctuation
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _is_ident_start(ch: str) -> bool:
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _is_ident_char(ch: str) -> bool:
    return _is_ident_start(ch) or ch.isdigit() and ch.isascii()


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


class _Lexer:
    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.tokens: list[Token] = []
        self.errors: list[SchemaError] = []

    @property
    def col(self) -> int:
        return self.pos - self.line_start + 1

    def error(self, message: str, line: int, col: int) -> None:
        self.errors.append(SchemaError(message, line, col, self.path))

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def add(self, kind: TokenKind, start: int, value: object, line: int, col: int) -> None:
        self.tokens.append(Token(kind, self.text[start : self.pos], value, line, col))

    def run(self) -> None:
        while self.pos < len(self.text):
            ch = self.peek()
            line, col, start = self.line, self.col, self.pos
            if ch == "\n":
                self.pos += 1
                self.add(TokenKind.NEWLINE, self.pos, None, line, col)
                self.line += 1
                self.line_start = self.pos
            elif ch in " \t\r\f\v":
                self.pos += 1
            elif ch == "#":
                while self.pos < len(self.text) and self.peek() != "\n":
                    self.pos += 1
            elif _is_ident_start(ch):
                while _is_ident_char(self.peek()):
                    self.pos += 1
                self.add(TokenKind.IDENT, start, self.text[start : self.pos], line, col)
            elif _is_digit(ch) or (ch in "+-" and _is_digit(self.peek(1))):
                self.number(start, line, col)
            elif ch == '"':
                self.string(start, line, col)
            elif ch + self.peek(1) in OPERATORS:
                self.pos += 2
                self.add(TokenKind.PUNCT, start, ch + self.peek(-1), line, col)
            elif ch in PUNCTUATION:
                self.pos += 1
                self.add(TokenKind.PUNCT, start, ch, line, col)
            else:
                self.pos += 1
                self.error(f"unexpected character {ch!r}", line, col)
        self.tokens.append(Token(TokenKind.EOF, "", None, self.line, self.col))

    def digits(self) -> None:
        while _is_digit(self.peek()):
            self.pos += 1

    def number(self, start: int, line: int, col: int) -> None:
        if self.peek() in "+-":
            self.pos += 1
        self.digits()
        is_float = False
        if self.peek() == "." and _is_digit(self.peek(1)):
            is_float = True
            self.pos += 1
            self.digits()
        if self.peek() in ("e", "E") and (
            _is_digit(self.peek(1)) or (self.peek(1) in "+-" and _is_digit(self.peek(2)))
        ):
            is_float = True
            self.pos += 2
            self.digits()
        if _is_ident_char(self.peek()) or self.peek() == ".":
            while _is_ident_char(self.peek()) or self.peek() == ".":
                self.pos += 1
            text = self.text[start : self.pos]
            self.error(f"invalid number {text!r}, expected digits with an optional fraction and exponent", line, col)
            self.add(TokenKind.BAD, start, None, line, col)
            return
        text = self.text[start : self.pos]
        if is_float:
            self.add(TokenKind.FLOAT, start, float(text), line, col)
        else:
            self.add(TokenKind.INT, start, int(text), line, col)

    def string(self, start: int, line: int, col: int) -> None:
        self.pos += 1
        chars: list[str] = []
        ok = True
        while True:
            ch = self.peek()
            if ch in ("", "\n"):
                self.error("unterminated string, expected a closing '\"' before the end of the line", line, col)
                self.add(TokenKind.BAD, start, None, line, col)
                return
            if ch == '"':
                self.pos += 1
                break
            if ch != "\\":
                chars.append(ch)
                self.pos += 1
                continue
            esc_col = self.col
            nxt = self.peek(1)
            if nxt in _ESCAPES and nxt:
                chars.append(_ESCAPES[nxt])
                self.pos += 2
            elif nxt == "u" and all(self.peek(2 + i) in _HEX and self.peek(2 + i) for i in range(4)):
                chars.append(chr(int(self.text[self.pos + 2 : self.pos + 6], 16)))
                self.pos += 6
            else:
                bad = "\\" + nxt if nxt not in ("", "\n") else "\\"
                self.error(
                    f"invalid escape '{bad}' in string, expected one of \\\" \\\\ \\/ \\n \\t \\r \\b \\f \\uXXXX",
                    line,
                    esc_col,
                )
                ok = False
                self.pos += 1 if nxt in ("", "\n") else 2
        if ok:
            self.add(TokenKind.STRING, start, "".join(chars), line, col)
        else:
            self.add(TokenKind.BAD, start, None, line, col)


def tokenize(text: str, path: str = "<schema>") -> tuple[list[Token], list[SchemaError]]:
    """Split `text` into tokens ending with EOF, plus every lexical error found."""
    lexer = _Lexer(text, path)
    lexer.run()
    return lexer.tokens, lexer.errors
