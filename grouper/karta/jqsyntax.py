"""A jq tokenizer and parser for the read-only / bounded check (karta.md §2.2, §7.2).

libjq exposes no AST, so this module parses jq itself — only far enough to walk every call,
variable, operator and function definition. It is deliberately *more lenient* than jq: syntax
validity is decided by compiling with libjq first; this parser only has to see the structure
of programs libjq accepted. Strings, ``==``/``<=``/``>=``/``!=`` and object keys are tokens of
their own, so ``"a = b"`` or ``{range: 1}`` are never mistaken for assignment or a call.

``check(expr)`` returns the reasons an expression is rejected (empty list = allowed):

* upstream's blacklist: assignment/update operators, ``del``, ``range``, ``paths``, ``recurse``,
  ``walk``, ``repeat``, ``..``;
* ours (documented deviation, safer): ``env``/``$ENV``, ``input``/``inputs``/``input_filename``/
  ``input_line_number``, ``$__loc__``, ``halt``/``halt_error``, ``debug``/``stderr``, module
  directives (``import``/``include``), the unbounded ``while``/``until``, the output-exploding
  ``combinations``/``leaf_paths``/``recurse_down``, and recursive ``def`` (a def referring to
  itself from its own body; since jq has no forward references, this covers mutual recursion).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grouper.karta import gojq

# ---------------------------------------------------------------- reasons / policy

ASSIGNMENT_OPS = frozenset({"=", "|=", "+=", "-=", "*=", "/=", "%=", "//="})
EXCESSIVE_OUTPUT = frozenset({"range", "paths", "recurse", "walk", "repeat"})  # upstream
EXTRA_EXCESSIVE = frozenset({"combinations", "leaf_paths", "recurse_down"})  # ours
UNBOUNDED = frozenset({"while", "until"})  # ours
OUTSIDE_WORLD = frozenset(
    {
        "env",
        "input",
        "inputs",
        "input_filename",
        "input_line_number",
        "halt",
        "halt_error",
        "debug",
        "stderr",
        "get_search_list",
        "modulemeta",
        "get_prog_origin",
        "get_jq_origin",
    }
)
FORBIDDEN_VARS = frozenset({"ENV", "__loc__", "__prog_args"})

KEYWORDS = frozenset(
    {
        "as",
        "import",
        "include",
        "module",
        "def",
        "if",
        "then",
        "elif",
        "else",
        "end",
        "and",
        "or",
        "reduce",
        "foreach",
        "try",
        "catch",
        "label",
        "__loc__",
    }
)

_OPS = (
    "?//",
    "//=",
    "|=",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "==",
    "!=",
    "<=",
    ">=",
    "//",
    "..",
    ".",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    "|",
    ",",
    ":",
    ";",
    "=",
    "<",
    ">",
    "+",
    "-",
    "*",
    "/",
    "%",
    "?",
)


class JqSyntaxError(ValueError):
    """The expression could not be analysed (libjq may still accept it; then it is rejected as
    unverifiable)."""


# ---------------------------------------------------------------- tokens


@dataclass
class Token:
    kind: str  # IDENT KEYWORD FIELD VAR NUMBER STRING FORMAT OP EOF
    text: str
    pos: int
    # STRING: token lists of the interpolations ``\(...)``
    parts: list[list[Token]] = field(default_factory=list)


def _is_ident_start(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c == "_")


def _is_ident_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0

    def _ident(self) -> str:
        s, n = self.src, len(self.src)
        start = self.i
        while True:
            while self.i < n and _is_ident_char(s[self.i]):
                self.i += 1
            if s.startswith("::", self.i) and self.i + 2 < n and _is_ident_start(s[self.i + 2]):
                self.i += 2
                continue
            return s[start : self.i]

    def _string(self) -> Token:
        s, n = self.src, len(self.src)
        start = self.i
        self.i += 1  # opening quote
        text: list[str] = []
        parts: list[list[Token]] = []
        while True:
            if self.i >= n:
                raise JqSyntaxError(f"unterminated string at {start}")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return Token("STRING", "".join(text), start, parts)
            if c == "\\":
                if self.i + 1 >= n:
                    raise JqSyntaxError(f"unterminated escape at {self.i}")
                nxt = s[self.i + 1]
                if nxt == "(":
                    self.i += 2
                    parts.append(self.tokens(until_paren=True))
                    text.append("\\(...)")
                    continue
                text.append(s[self.i : self.i + 2])
                self.i += 2
                continue
            text.append(c)
            self.i += 1

    def tokens(self, until_paren: bool = False) -> list[Token]:
        s, n = self.src, len(self.src)
        out: list[Token] = []
        depth = 0
        while True:
            while self.i < n and s[self.i] in " \t\r\n":
                self.i += 1
            if self.i >= n:
                if until_paren:
                    raise JqSyntaxError("unterminated string interpolation")
                out.append(Token("EOF", "", self.i))
                return out
            c = s[self.i]
            start = self.i
            if c == "#":
                while self.i < n and s[self.i] != "\n":
                    self.i += 1
                continue
            if c == '"':
                out.append(self._string())
                continue
            if (
                c == "."
                and self.i + 1 < n
                and _is_ident_start(s[self.i + 1])
                and not s.startswith("..", self.i)
            ):
                self.i += 1
                name = self._ident()
                out.append(Token("FIELD", name, start))
                continue
            if c.isdigit() or (c == "." and self.i + 1 < n and s[self.i + 1].isdigit()):
                # jq: ([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?
                while self.i < n and s[self.i].isdigit():
                    self.i += 1
                if self.i < n and s[self.i] == "." and (c != "." or self.i == start):
                    self.i += 1
                    while self.i < n and s[self.i].isdigit():
                        self.i += 1
                if self.i < n and s[self.i] in "eE":
                    j = self.i + 1
                    if j < n and s[j] in "+-":
                        j += 1
                    if j < n and s[j].isdigit():
                        self.i = j
                        while self.i < n and s[self.i].isdigit():
                            self.i += 1
                out.append(Token("NUMBER", s[start : self.i], start))
                continue
            if c == "$":
                self.i += 1
                while self.i < n and s[self.i] in " \t\r\n":
                    self.i += 1
                if self.i >= n or not _is_ident_start(s[self.i]):
                    raise JqSyntaxError(f"'$' without a name at {start}")
                out.append(Token("VAR", self._ident(), start))
                continue
            if c == "@":
                self.i += 1
                name = self._ident()
                if not name:
                    raise JqSyntaxError(f"bad format at {start}")
                out.append(Token("FORMAT", name, start))
                continue
            if _is_ident_start(c):
                name = self._ident()
                out.append(Token("KEYWORD" if name in KEYWORDS else "IDENT", name, start))
                continue
            for op in _OPS:
                if s.startswith(op, self.i):
                    if until_paren:
                        if op == "(":
                            depth += 1
                        elif op == ")":
                            if depth == 0:
                                self.i += 1
                                out.append(Token("EOF", "", start))
                                return out
                            depth -= 1
                    self.i += len(op)
                    out.append(Token("OP", op, start))
                    break
            else:
                raise JqSyntaxError(f"unexpected character {c!r} at {start}")


def tokenize(src: str) -> list[Token]:
    return _Lexer(src).tokens()


# ---------------------------------------------------------------- AST


@dataclass
class Node:
    """A generic AST node. ``kind`` is one of: call, def, var, op, recurse, field, literal,
    string, format, group, array, object, index, slice, iterate, optional, neg, if, try, reduce,
    foreach, bind, label, break, identity, pattern, directive."""

    kind: str
    value: str = ""
    children: list[Node] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # def: parameter names (``$x`` kept with ``$``)
    pos: int = 0

    def walk(self) -> Iterator[Node]:
        """Pre-order, iteratively (nested generators cost O(depth) per node)."""
        stack: list[Node] = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))


def _n(kind: str, value: str = "", *children: Node, pos: int = 0) -> Node:
    return Node(kind, value, list(children), pos=pos)


_BINARY_LEVELS: list[tuple[frozenset[str], str]] = [
    # (operators, associativity), lowest precedence first; '|' and ',' handled separately
    (frozenset({"//"}), "right"),
    (ASSIGNMENT_OPS, "nonassoc"),
    (frozenset({"or"}), "left"),
    (frozenset({"and"}), "left"),
    (frozenset({"==", "!=", "<", "<=", ">", ">="}), "nonassoc"),
    (frozenset({"+", "-"}), "left"),
    (frozenset({"*", "/", "%"}), "left"),
]


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.t = tokens
        self.i = 0

    # -- token helpers
    @property
    def cur(self) -> Token:
        return self.t[self.i]

    def at(self, kind: str, text: str | None = None) -> bool:
        tok = self.t[self.i]
        return tok.kind == kind and (text is None or tok.text == text)

    def at_op(self, text: str) -> bool:
        return self.at("OP", text)

    def at_kw(self, text: str) -> bool:
        return self.at("KEYWORD", text)

    def take(self) -> Token:
        tok = self.t[self.i]
        if tok.kind != "EOF":
            self.i += 1
        return tok

    def expect_op(self, text: str) -> Token:
        if not self.at_op(text):
            raise JqSyntaxError(f"expected {text!r} at {self.cur.pos}, got {self.cur.text!r}")
        return self.take()

    def expect_kw(self, text: str) -> Token:
        if not self.at_kw(text):
            raise JqSyntaxError(f"expected {text!r} at {self.cur.pos}, got {self.cur.text!r}")
        return self.take()

    # -- program
    def program(self) -> Node:
        directives: list[Node] = []
        while self.at_kw("import") or self.at_kw("include") or self.at_kw("module"):
            tok = self.take()
            depth = 0
            while not (depth == 0 and self.at_op(";")):
                if self.at("EOF"):
                    raise JqSyntaxError("unterminated module directive")
                if self.at_op("{"):
                    depth += 1
                elif self.at_op("}"):
                    depth -= 1
                self.take()
            self.take()
            directives.append(_n("directive", tok.text, pos=tok.pos))
        body = _n("identity") if self.at("EOF") else self.pipe()
        if not self.at("EOF"):
            raise JqSyntaxError(f"unexpected {self.cur.text!r} at {self.cur.pos}")
        return _n("program", "", *directives, body)

    # -- expressions
    def pipe(self) -> Node:
        if self.at_kw("def"):
            d = self.funcdef()
            rest = self.pipe()
            d.children.append(rest)  # children: [body, rest]
            return d
        if self.at_kw("label"):
            tok = self.take()
            if not self.at("VAR"):
                raise JqSyntaxError(f"label needs $name at {tok.pos}")
            name = self.take().text
            self.expect_op("|")
            return _n("label", name, self.pipe(), pos=tok.pos)
        lhs = self.comma()
        if self.at_op("|"):
            self.take()
            return _n("op", "|", lhs, self.pipe())
        return lhs

    def funcdef(self) -> Node:
        tok = self.expect_kw("def")
        if not (self.at("IDENT") or self.at("KEYWORD")):
            raise JqSyntaxError(f"def needs a name at {tok.pos}")
        name = self.take().text
        params: list[str] = []
        if self.at_op("("):
            self.take()
            while True:
                if self.at("VAR"):
                    params.append("$" + self.take().text)
                elif self.at("IDENT") or self.at("KEYWORD"):
                    params.append(self.take().text)
                else:
                    raise JqSyntaxError(f"bad parameter at {self.cur.pos}")
                if self.at_op(";"):
                    self.take()
                    continue
                self.expect_op(")")
                break
        self.expect_op(":")
        body = self.pipe()
        self.expect_op(";")
        node = _n("def", name, body, pos=tok.pos)
        node.params = params
        return node

    def comma(self) -> Node:
        lhs = self.binary(0)
        while self.at_op(","):
            self.take()
            lhs = _n("op", ",", lhs, self.binary(0))
        return lhs

    def _binary_op_here(self, level: int) -> str | None:
        ops, _ = _BINARY_LEVELS[level]
        tok = self.cur
        if tok.kind == "OP" and tok.text in ops:
            return tok.text
        if tok.kind == "KEYWORD" and tok.text in ops:
            return tok.text
        return None

    def binary(self, level: int) -> Node:
        if level >= len(_BINARY_LEVELS):
            return self.unary()
        _, assoc = _BINARY_LEVELS[level]
        lhs = self.binary(level + 1)
        while True:
            op = self._binary_op_here(level)
            if op is None:
                return lhs
            self.take()
            rhs = self.binary(level) if assoc == "right" else self.binary(level + 1)
            lhs = _n("op", op, lhs, rhs)
            if assoc != "left":
                return lhs

    def unary(self) -> Node:
        if self.at_op("-"):
            tok = self.take()
            return _n("neg", "", self.unary(), pos=tok.pos)
        if self.at_kw("try"):
            # jq: `try` and `catch` take a post-term each and the whole try/catch is a term, so a
            # following `as` binds it: `try .a catch . as $x | .` is `(try .a catch .) as $x | .`
            tok = self.take()
            node = _n("try", "", self.postfix(), pos=tok.pos)
            if self.at_kw("catch"):
                self.take()
                node.children.append(self.postfix())
            if self.at_kw("as"):
                self.take()
                pats = self.patterns()
                self.expect_op("|")
                return _n("bind", "", node, pats, self.pipe())
            return node
        if self.at_kw("def"):
            # jq 1.7 accepts a def at the start of most sub-expressions
            d = self.funcdef()
            d.children.append(self.pipe())
            return d
        if self.at_kw("label"):
            return self.pipe()
        return self.postfix(allow_bind=True)

    # -- terms
    def postfix(self, allow_bind: bool = False) -> Node:
        term = self.primary()
        while True:
            tok = self.cur
            if tok.kind == "FIELD":
                self.take()
                term = _n("field", tok.text, term, pos=tok.pos)
            elif self.at_op(".") and self.t[self.i + 1].kind == "STRING":
                self.take()
                term = _n("field", "", term, self.string(self.take()), pos=tok.pos)
            elif self.at_op(".") and self.t[self.i + 1].kind == "OP" and self.t[self.i + 1].text == "[":
                self.take()
                term = self.bracket(term)
            elif self.at_op("["):
                term = self.bracket(term)
            elif self.at_op("?"):
                self.take()
                term = _n("optional", "", term, pos=tok.pos)
            else:
                break
        if allow_bind and self.at_kw("as"):
            self.take()
            pats = self.patterns()
            self.expect_op("|")
            return _n("bind", "", term, pats, self.pipe())
        return term

    def bracket(self, term: Node) -> Node:
        tok = self.expect_op("[")
        if self.at_op("]"):
            self.take()
            return _n("iterate", "", term, pos=tok.pos)
        if self.at_op(":"):
            self.take()
            hi = self.pipe()
            self.expect_op("]")
            return _n("slice", "", term, hi, pos=tok.pos)
        idx = self.pipe()
        if self.at_op(":"):
            self.take()
            if self.at_op("]"):
                self.take()
                return _n("slice", "", term, idx, pos=tok.pos)
            hi = self.pipe()
            self.expect_op("]")
            return _n("slice", "", term, idx, hi, pos=tok.pos)
        self.expect_op("]")
        return _n("index", "", term, idx, pos=tok.pos)

    def string(self, tok: Token) -> Node:
        node = _n("string", tok.text, pos=tok.pos)
        for part in tok.parts:
            sub = _Parser(part)
            inner = sub.pipe() if not sub.at("EOF") else _n("identity")
            if not sub.at("EOF"):
                raise JqSyntaxError(f"bad interpolation in string at {tok.pos}")
            node.children.append(inner)
        return node

    def primary(self) -> Node:
        tok = self.cur
        k, text = tok.kind, tok.text
        if k == "NUMBER":
            self.take()
            return _n("literal", text, pos=tok.pos)
        if k == "STRING":
            self.take()
            return self.string(tok)
        if k == "FORMAT":
            self.take()
            node = _n("format", text, pos=tok.pos)
            if self.at("STRING"):
                node.children.append(self.string(self.take()))
            return node
        if k == "FIELD":
            self.take()
            return _n("field", text, _n("identity"), pos=tok.pos)
        if k == "VAR":
            self.take()
            return _n("var", text, pos=tok.pos)
        if k == "OP":
            if text == ".":
                self.take()
                if self.at("STRING"):
                    return _n("field", "", _n("identity"), self.string(self.take()), pos=tok.pos)
                return _n("identity", pos=tok.pos)
            if text == "..":
                self.take()
                return _n("recurse", "..", pos=tok.pos)
            if text == "(":
                self.take()
                inner = self.pipe()
                self.expect_op(")")
                return _n("group", "", inner, pos=tok.pos)
            if text == "[":
                self.take()
                if self.at_op("]"):
                    self.take()
                    return _n("array", pos=tok.pos)
                inner = self.pipe()
                self.expect_op("]")
                return _n("array", "", inner, pos=tok.pos)
            if text == "{":
                return self.obj()
            if text == "-":
                return self.unary()
        if k == "KEYWORD":
            if text == "if":
                return self.if_()
            if text in ("reduce", "foreach"):
                return self.fold()
            if text == "try":
                return self.unary()
            if text == "def":
                return self.unary()
            if text == "__loc__":
                self.take()
                return _n("var", "__loc__", pos=tok.pos)
        if k == "IDENT":
            self.take()
            if text == "break":
                if not self.at("VAR"):
                    raise JqSyntaxError(f"break needs $label at {tok.pos}")
                return _n("break", self.take().text, pos=tok.pos)
            node = _n("call", text, pos=tok.pos)
            if self.at_op("("):
                self.take()
                while True:
                    node.children.append(self.pipe())
                    if self.at_op(";"):
                        self.take()
                        continue
                    self.expect_op(")")
                    break
            return node
        raise JqSyntaxError(f"unexpected {text!r} at {tok.pos}")

    def if_(self) -> Node:
        tok = self.expect_kw("if")
        node = _n("if", "", pos=tok.pos)
        node.children.append(self.pipe())
        self.expect_kw("then")
        node.children.append(self.pipe())
        while self.at_kw("elif"):
            self.take()
            node.children.append(self.pipe())
            self.expect_kw("then")
            node.children.append(self.pipe())
        if self.at_kw("else"):
            self.take()
            node.children.append(self.pipe())
        self.expect_kw("end")
        return node

    def fold(self) -> Node:
        tok = self.take()
        src = self.postfix()
        self.expect_kw("as")
        pats = self.patterns()
        self.expect_op("(")
        parts = [self.pipe()]
        while self.at_op(";"):
            self.take()
            parts.append(self.pipe())
        self.expect_op(")")
        return _n(tok.text, "", src, pats, *parts, pos=tok.pos)

    def patterns(self) -> Node:
        node = _n("pattern", "", self.pattern())
        while self.at_op("?//"):
            self.take()
            node.children.append(self.pattern())
        return node

    def pattern(self) -> Node:
        tok = self.cur
        if tok.kind == "VAR":
            self.take()
            return _n("patvar", tok.text, pos=tok.pos)
        if self.at_op("["):
            self.take()
            node = _n("pattern", "[", pos=tok.pos)
            if not self.at_op("]"):
                while True:
                    node.children.append(self.pattern())
                    if self.at_op(","):
                        self.take()
                        continue
                    break
            self.expect_op("]")
            return node
        if self.at_op("{"):
            self.take()
            node = _n("pattern", "{", pos=tok.pos)
            while True:
                key = self.cur
                if key.kind == "VAR":
                    self.take()
                    node.children.append(_n("patvar", key.text, pos=key.pos))
                    if self.at_op(":"):
                        self.take()
                        node.children.append(self.pattern())
                elif key.kind in ("IDENT", "KEYWORD"):
                    self.take()
                    self.expect_op(":")
                    node.children.append(self.pattern())
                elif key.kind == "STRING":
                    node.children.append(self.string(self.take()))
                    self.expect_op(":")
                    node.children.append(self.pattern())
                elif self.at_op("("):
                    self.take()
                    node.children.append(self.pipe())
                    self.expect_op(")")
                    self.expect_op(":")
                    node.children.append(self.pattern())
                else:
                    raise JqSyntaxError(f"bad object pattern at {key.pos}")
                if self.at_op(","):
                    self.take()
                    continue
                break
            self.expect_op("}")
            return node
        raise JqSyntaxError(f"bad pattern at {tok.pos}")

    def objval(self) -> Node:
        # jq 1.7 object values: any expression without a top-level ',' (binding forms are
        # rejected by libjq; accepting them here is harmless)
        lhs = self.binary(0)
        if self.at_op("|"):
            self.take()
            return _n("op", "|", lhs, self.objval())
        return lhs

    def obj(self) -> Node:
        tok = self.expect_op("{")
        node = _n("object", pos=tok.pos)
        if self.at_op("}"):
            self.take()
            return node
        while True:
            key = self.cur
            if key.kind == "VAR":
                self.take()
                node.children.append(_n("var", key.text, pos=key.pos))
                if self.at_op(":"):
                    self.take()
                    node.children.append(self.objval())
            elif key.kind in ("IDENT", "KEYWORD", "NUMBER"):
                self.take()
                if key.text == "__loc__" and key.kind == "KEYWORD" and not self.at_op(":"):
                    node.children.append(_n("var", "__loc__", pos=key.pos))
                elif self.at_op(":"):
                    self.take()
                    node.children.append(self.objval())
                else:  # {a} is {a: .a}
                    node.children.append(_n("field", key.text, _n("identity"), pos=key.pos))
            elif key.kind == "STRING":
                skey = self.string(self.take())
                if self.at_op(":"):
                    self.take()
                    node.children.append(skey)
                    node.children.append(self.objval())
                else:  # {"a"} is {"a": ."a"}
                    node.children.append(_n("field", "", _n("identity"), skey, pos=key.pos))
            elif key.kind == "FORMAT":
                self.take()
                fmt = _n("format", key.text, pos=key.pos)
                if self.at("STRING"):
                    fmt.children.append(self.string(self.take()))
                node.children.append(fmt)
                if self.at_op(":"):
                    self.take()
                    node.children.append(self.objval())
            elif self.at_op("("):
                self.take()
                node.children.append(self.pipe())
                self.expect_op(")")
                self.expect_op(":")
                node.children.append(self.objval())
            else:
                raise JqSyntaxError(f"bad object key at {key.pos}")
            if self.at_op(","):
                self.take()
                if self.at_op("}"):
                    break
                continue
            break
        self.expect_op("}")
        return node


MAX_EXPRESSION_LENGTH = 10_000


def parse(src: str) -> Node:
    """Parse a jq program into a ``Node`` tree. Raises ``JqSyntaxError`` (also for programs too
    long or too deeply nested to analyse — real definitions are a few hundred characters)."""
    if len(src) > MAX_EXPRESSION_LENGTH:
        raise JqSyntaxError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        return _Parser(tokenize(src)).program()
    except RecursionError:
        raise JqSyntaxError("expression nests too deeply") from None


# ---------------------------------------------------------------- which top-level fields are read

# builtins that ignore their input (safe to call with the root object as input)
_NO_INPUT = frozenset({"empty", "true", "false", "null", "nan", "infinite", "now"})


def _static_name(node: Node) -> str | None:
    """The text of a string node without interpolation or escapes, else None."""
    if node.kind != "string" or node.children or "\\" in node.value:
        return None
    return node.value


class _RootReads:
    """Conservative analysis: does an expression read the input object only through
    ``.<field>`` accesses, and which fields? Lets the evaluator hand jq a projection of the
    object (a pod's ``metadata`` instead of the whole pod) — a large part of the run cost."""

    def __init__(self) -> None:
        self.fields: set[str] = set()

    def safe(self, n: Node) -> bool:
        """True if ``n``, evaluated with the root object as input, touches the root only through
        recorded top-level fields (and so never outputs the root itself)."""
        k = n.kind
        c = n.children
        if k in ("literal", "var", "patvar", "break"):
            return True
        if k == "field":
            base = c[0]
            if base.kind == "identity":
                name = n.value or (_static_name(c[1]) if len(c) > 1 else None)
                if not name:
                    return False
                self.fields.add(name)
                return True
            return self.safe(base) and all(self.safe(x) for x in c[1:])
        if k == "index":
            base, idx = c
            if base.kind == "identity":
                name = _static_name(idx)
                if name is None:
                    return False
                self.fields.add(name)
                return True
            return self.safe(base) and self.safe(idx)
        if k in ("slice", "iterate"):
            return c[0].kind != "identity" and all(self.safe(x) for x in c)
        if k == "if" and len(c) % 2 == 0:
            return False  # no else: a false condition outputs the input itself
        if k in ("optional", "group", "neg", "array", "object", "string", "if", "pattern", "label"):
            return all(self.safe(x) for x in c)
        if k == "format":
            return bool(c) and all(self.safe(x) for x in c)
        if k == "try":
            return self.safe(c[0])  # the catch body's input is the error, not the root
        if k == "op":
            if n.value in ASSIGNMENT_OPS:
                return False
            if n.value == "|":
                return self.safe(c[0])  # the right side's input is the left side's output
            return all(self.safe(x) for x in c)
        if k == "bind":
            src, pats, body = c
            return self.safe(src) and self.safe(pats) and self.safe(body)
        if k in ("reduce", "foreach"):
            src, pats, init = c[0], c[1], c[2]
            return self.safe(src) and self.safe(pats) and self.safe(init)  # updates see the accumulator
        if k == "call":
            return not c and n.value in _NO_INPUT
        return False  # identity, recurse, def, directive, program, unknown


_CACHED_LENGTH = 1024  # longer expressions are analysed each time: a cache must stay small


def root_fields(expr: str) -> frozenset[str] | None:
    """Top-level fields of its input that ``expr`` reads, or None if it may read anything
    (conservative: any doubt gives None)."""
    if len(expr) > _CACHED_LENGTH:
        return _root_fields(expr)
    return _root_fields_cached(expr)


@functools.lru_cache(maxsize=8192)
def _root_fields_cached(expr: str) -> frozenset[str] | None:
    return _root_fields(expr)


def _root_fields(expr: str) -> frozenset[str] | None:
    try:
        tree = parse(expr)
    except JqSyntaxError:
        return None
    if len(tree.children) != 1:  # module directives
        return None
    reads = _RootReads()
    try:
        if not reads.safe(tree.children[0]):
            return None
    except RecursionError:
        return None
    return frozenset(reads.fields)


# ---------------------------------------------------------------- the check


_LITERAL_CALLS = frozenset({("true", 0), ("false", 0), ("null", 0)})


def _call_reason(name: str) -> str | None:
    if name == "del":
        return "del function is not allowed"
    if name in EXCESSIVE_OUTPUT or name in EXTRA_EXCESSIVE:
        return f"function '{name}' may produce excessive output and is not allowed"
    if name in UNBOUNDED:
        return f"function '{name}' may not terminate and is not allowed"
    if name in OUTSIDE_WORLD:
        return f"function '{name}' reads outside the object or has side effects and is not allowed"
    return None


class _Checker:
    """Walks the tree with lexical scopes to find forbidden constructs and recursive defs."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self._seen: set[str] = set()

    def add(self, reason: str) -> None:
        if reason not in self._seen:
            self._seen.add(reason)
            self.reasons.append(reason)

    def visit(self, node: Node, scope: tuple[tuple[str, int, int], ...], open_defs: frozenset[int]) -> None:
        k = node.kind
        if k == "directive":
            self.add(f"module directive '{node.value}' is not allowed")
            return
        if k == "recurse":
            self.add("recursive descent operator '..' is not allowed")
            return
        if k == "op" and node.value in ASSIGNMENT_OPS:
            self.add(f"modifying operator '{node.value}' is not allowed")
        if k in ("var", "patvar") and node.value in FORBIDDEN_VARS:
            self.add(f"variable '${node.value}' is not allowed")
        if k == "format" and f"@{node.value}" not in gojq.FORMATS:
            self.add(f"format '@{node.value}' is not available in gojq (upstream's jq engine)")
        if k == "def":
            ident = id(node)
            arity = len(node.params)
            inner = ((node.value, arity, ident), *scope)
            for p in node.params:
                inner = ((p.lstrip("$"), 0, -1), *inner)  # parameters shadow outer names
            self.visit(node.children[0], inner, open_defs | {ident})
            if len(node.children) > 1:
                self.visit(node.children[1], ((node.value, arity, ident), *scope), open_defs)
            return
        if k == "call":
            arity = len(node.children)
            target: int | None = None
            for name, ar, ident in scope:
                if name == node.value and ar == arity:
                    target = ident
                    break
            if target is None:
                reason = _call_reason(node.value)
                if reason:
                    self.add(reason)
                elif not gojq.has_function(node.value, arity) and (node.value, arity) not in _LITERAL_CALLS:
                    self.add(
                        f"function '{node.value}/{arity}' is not available in gojq (upstream's jq engine "
                        f"{gojq.VERSION}); the definition would fail there"
                    )
            else:
                if target in open_defs:
                    self.add(
                        f"recursive function '{node.value}/{arity}' is not allowed (it may not terminate)"
                    )
                # a user function shadowing a forbidden builtin is still forbidden by name (upstream)
                reason = _call_reason(node.value)
                if reason:
                    self.add(reason)
        for c in node.children:
            self.visit(c, scope, open_defs)


def check(expr: str) -> list[str]:
    """Reasons ``expr`` is not allowed; empty when it is read-only and bounded.

    Raises ``JqSyntaxError`` if the expression cannot be analysed.
    """
    tree = parse(expr)
    checker = _Checker()
    try:
        checker.visit(tree, (), frozenset())
    except RecursionError:
        raise JqSyntaxError("expression nests too deeply") from None
    if not any("recursive function" in r for r in checker.reasons):
        for reason in blowup_reasons(tree):
            checker.add(reason)
    return checker.reasons


# ---------------------------------------------------------------- exponential programs

# An expression whose estimated evaluation steps or outputs exceed these is rejected. Real
# definitions estimate below 100; ``def f(x): x,x;`` nested 20 deep estimates 2^20.
MAX_ESTIMATED_WORK = 1_000_000
MAX_ESTIMATED_OUTPUTS = 100_000
_CAP = 10**15
_MAX_STEPS = 200_000  # the estimate itself is bounded: past this the expression is "too complex"
MAX_REPEAT_LITERAL = 10_000  # "x" * N with a literal N beyond this is rejected


class _TooComplex(Exception):
    pass


Cost = tuple[int, int]  # (work, outputs), both saturating at _CAP


def _sat(x: int) -> int:
    return x if x < _CAP else _CAP


class _CostModel:
    """Static estimate of how many evaluation steps and outputs an expression costs, treating
    every data-dependent iteration (``.[]``, ``map``) as one: what grows here is the program's
    own blow-up — closures used several times and nested, comma/pipe chains — which no input
    limit bounds. Recursion is rejected separately, so the call graph is a DAG and the walk
    ends; memoised per (definition, argument costs)."""

    def __init__(self) -> None:
        self.steps = 0
        self._memo: dict[tuple[int, tuple[Cost, ...]], Cost] = {}

    def cost(self, n: Node, env: dict[tuple[str, int], Any]) -> Cost:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _TooComplex
        k, c = n.kind, n.children
        if k == "program":
            return self.cost(c[-1], env) if c else (1, 1)
        if k == "def":
            inner = {**env, (n.value, len(n.params)): ("def", n, env)}
            return self.cost(c[1], inner) if len(c) > 1 else (1, 1)
        if k == "op":
            (wa, oa), (wb, ob) = self.cost(c[0], env), self.cost(c[1], env)
            if n.value in (",", "//"):
                return _sat(wa + wb), _sat(oa + ob)
            if n.value == "|":
                return _sat(wa + oa * wb), _sat(oa * ob)
            return _sat(wb + ob * wa + 1), _sat(oa * ob)
        if k == "bind":
            (ws, os_), (wp, _), (wb, ob) = (self.cost(x, env) for x in c)
            return _sat(ws + wp + os_ * wb), _sat(os_ * ob)
        if k == "call":
            return self.call(n, env)
        if k in ("reduce", "foreach"):
            parts = [self.cost(x, env) for x in c]
            (ws, os_), (wi, oi) = parts[0], parts[2]
            wu = sum(w for w, _ in parts[3:])
            if k == "reduce":
                return _sat(ws + wi + os_ * wu), oi
            ou = 1
            for _, o in parts[3:]:
                ou = _sat(ou * o)
            return _sat(ws + wi + os_ * wu), _sat(os_ * ou)
        if k == "if":
            parts = [self.cost(x, env) for x in c]
            return _sat(1 + sum(w for w, _ in parts)), _sat(parts[0][1] * max(o for _, o in parts[1:]))
        if k == "try":
            parts = [self.cost(x, env) for x in c]
            return _sat(1 + sum(w for w, _ in parts)), _sat(sum(o for _, o in parts))
        if k == "array":
            w = self.cost(c[0], env)[0] if c else 0
            return _sat(1 + w), 1
        if k in ("group", "label"):
            return self.cost(c[0], env) if c else (1, 1)
        work, outs = 1, 1
        for x in c:
            w, o = self.cost(x, env)
            work, outs = _sat(work + w), _sat(outs * o)
        return work, outs

    def call(self, n: Node, env: dict[tuple[str, int], Any]) -> Cost:
        args = n.children
        bound = env.get((n.value, len(args)))
        if bound is None:  # a builtin: its closures run once per input element (data, not program)
            work, outs = 1, 1
            for a in args:
                w, o = self.cost(a, env)
                work, outs = _sat(work + w), _sat(outs * o)
            return work, outs
        if bound[0] == "param":
            cost: Cost = bound[1]
            return cost
        _, dnode, denv = bound
        arg_costs = tuple(self.cost(a, env) for a in args)
        key = (id(dnode), arg_costs)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        inner = {**denv, (dnode.value, len(dnode.params)): ("def", dnode, denv)}
        pre_work, fanout = 0, 1
        for p, (w, o) in zip(dnode.params, arg_costs, strict=True):
            if p.startswith("$"):  # a value parameter: the body runs once per output of the argument
                pre_work, fanout = _sat(pre_work + w), _sat(fanout * o)
                inner[(p[1:], 0)] = ("param", (1, 1))
            else:
                inner[(p, 0)] = ("param", (w, o))
        wb, ob = self.cost(dnode.children[0], inner)
        result = (_sat(pre_work + fanout * wb), _sat(fanout * ob))
        self._memo[key] = result
        return result


def _contains_string(n: Node) -> bool:
    return any(x.kind in ("string", "format") for x in n.walk())


def _big_literal(n: Node) -> float | None:
    while n.kind == "group" and n.children:
        n = n.children[0]
    if n.kind != "literal":
        return None
    try:
        return float(n.value)
    except ValueError:
        return None


def blowup_reasons(tree: Node) -> list[str]:
    """Reasons an (already parsed, recursion-free) expression may blow up in time or memory."""
    reasons: list[str] = []
    for n in tree.walk():
        if n.kind == "op" and n.value == "*" and len(n.children) == 2:
            a, b = n.children
            for num, other in ((a, b), (b, a)):
                v = _big_literal(num)
                if v is not None and abs(v) > MAX_REPEAT_LITERAL and _contains_string(other):
                    reasons.append(
                        f"string repetition by {num.value} may exhaust memory "
                        f"(at most {MAX_REPEAT_LITERAL} is allowed)"
                    )
                    break
    model = _CostModel()
    try:
        work, outs = model.cost(tree, {})
    except (_TooComplex, RecursionError):
        return [*reasons, "expression is too complex to bound (nested function calls)"]
    if work > MAX_ESTIMATED_WORK or outs > MAX_ESTIMATED_OUTPUTS:
        reasons.append(
            f"expression may take exponential time or output (about {float(work):.3g} steps and "
            f"{float(outs):.3g} outputs, limits {MAX_ESTIMATED_WORK:g} and {MAX_ESTIMATED_OUTPUTS:g}): "
            "a function that uses its argument more than once, nested, or long comma/pipe chains"
        )
    return reasons
