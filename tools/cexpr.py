"""The #define constants of C headers, evaluated: enough of the C preprocessor and of C's integer
expressions to read the register headers the chip vendors publish (nrfx, the SAM D21 CMSIS pack,
ESP-IDF, Arm's CMSIS core). Used by tools/vendor_registers.py; nothing in poet imports it.

What it does not do: #if (every #define in a file is taken, so a header whose branches define one
name twice keeps the last, and the caller picks files where that does not matter), stringising (#),
variadic macros. Casts to the integer and register types these headers use are skipped, a pointer
dereference `*(T *)addr` reads as `addr` (its address is what the tables want)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MASK = (1 << 64) - 1
INT = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)")
TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|[A-Za-z_]\w*|<<|>>|<=|>=|==|!=|&&|\|\|"
                   r"|[-+*/%()~!<>&|^?:,])")
# Words a cast is made of in these headers: C's integer types, the fixed-width ones and the vendors'
# register typedefs (SAM D21 CMSIS: RwReg, RoReg8, ...; nrfx and ESP-IDF: none in constants).
TYPE_WORDS = re.compile(r"^(?:u?int(?:8|16|32|64)_t|unsigned|signed|int|long|short|char|const|volatile|"
                        r"(?:Rw|Ro|Wo)Reg(?:8|16)?|uintptr_t|size_t)$")


@dataclass(frozen=True)
class Macro:
    params: tuple[str, ...] | None  # None: an object-like macro
    body: str


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n") or " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def defines(text: str) -> dict[str, Macro]:
    """Every #define of a header, continuation lines joined and comments dropped."""
    out: dict[str, Macro] = {}
    for line in strip_comments(text).replace("\\\n", " ").splitlines():
        m = re.match(r"\s*#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)$", line)
        if not m:
            continue
        params = tuple(p.strip() for p in m.group(3).split(",") if p.strip()) if m.group(2) else None
        out[m.group(1)] = Macro(params, m.group(4).strip())
    return out


def enums(text: str) -> dict[str, int]:
    """The enumerators of every `enum { ... }` in a header, numbered as C numbers them."""
    out: dict[str, int] = {}
    for body in re.findall(r"enum\s*\w*\s*\{(.*?)\}", strip_comments(text), flags=re.S):
        nxt = 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            name, _, value = item.partition("=")
            name = name.strip()
            if value.strip():
                nxt = _Parser(tokens(value.strip()), out).parse()
            out[name] = nxt
            nxt += 1
    return out


class Evaluator:
    """Expands a name (or `NAME(args)`) with a table of macros and evaluates the C expression."""

    def __init__(self, macros: dict[str, Macro], names: dict[str, int] | None = None) -> None:
        self.macros = macros
        self.names = names or {}

    # ------------------------------------------------------------------ expansion

    def expand(self, text: str, seen: frozenset[str] = frozenset()) -> str:
        out, pos = [], 0
        for m in re.finditer(r"[A-Za-z_]\w*", text):
            name = m.group()
            if m.start() < pos:
                continue
            macro = self.macros.get(name)
            if macro is None or name in seen or (m.start() > 0 and text[m.start() - 1].isdigit()):
                continue
            out.append(text[pos:m.start()])
            if macro.params is None:
                out.append("(" + self.expand(macro.body, seen | {name}) + ")")
                pos = m.end()
                continue
            args, end = _call_args(text, m.end())
            if args is None:  # a function-like macro's name without arguments is left alone
                out.append(name)
                pos = m.end()
                continue
            args = [self.expand(a, seen) for a in args]
            body = macro.body
            for p, a in zip(macro.params, args, strict=False):
                body = re.sub(rf"\b{re.escape(p)}\b", lambda _m, a=a: f"({a})", body)
            body = re.sub(r"\s*##\s*", "", body)
            out.append("(" + self.expand(body, seen | {name}) + ")")
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def value(self, expr: str) -> int:
        """The value of a C constant expression after expansion, as an unsigned 64-bit number."""
        text = self.expand(expr)
        # `x ## U` pasted onto a number leaves suffixes inside parentheses: `(0x1)U`; drop them
        text = re.sub(r"\)\s*[uUlL]+\b", ")", text)
        return _Parser(tokens(text), self.names).parse() & MASK


def _call_args(text: str, at: int) -> tuple[list[str] | None, int]:
    i = at
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] != "(":
        return None, at
    depth, start, args = 0, i + 1, []
    for j in range(i, len(text)):
        c = text[j]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append(text[start:j])
                return [a.strip() for a in args if a.strip() or len(args) > 1], j + 1
        elif c == "," and depth == 1:
            args.append(text[start:j])
            start = j + 1
    raise ValueError(f"unbalanced parentheses in {text!r}")


def tokens(text: str) -> list[str]:
    toks, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot read {text[pos:]!r}")
        toks.append(m.group(1))
        pos = m.end()
    return toks


BINARY: dict[str, tuple[int, Callable[[int, int], int]]] = {
    "||": (1, lambda a, b: int(bool(a) or bool(b))), "&&": (2, lambda a, b: int(bool(a) and bool(b))),
    "|": (3, lambda a, b: a | b), "^": (4, lambda a, b: a ^ b), "&": (5, lambda a, b: a & b),
    "==": (6, lambda a, b: int(a == b)), "!=": (6, lambda a, b: int(a != b)),
    "<": (7, lambda a, b: int(a < b)), ">": (7, lambda a, b: int(a > b)),
    "<=": (7, lambda a, b: int(a <= b)), ">=": (7, lambda a, b: int(a >= b)),
    "<<": (8, lambda a, b: (a << b) & MASK), ">>": (8, lambda a, b: a >> b),
    "+": (9, lambda a, b: (a + b) & MASK), "-": (9, lambda a, b: (a - b) & MASK),
    "*": (10, lambda a, b: (a * b) & MASK), "/": (10, lambda a, b: a // b), "%": (10, lambda a, b: a % b),
}


class _Parser:
    def __init__(self, toks: list[str], names: dict[str, int]) -> None:
        self.toks, self.i, self.names = toks, 0, names

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            rest, whole = " ".join(self.toks[self.i:]), " ".join(self.toks)
            raise ValueError(f"expected {want or 'more'} at {rest!r} in {whole!r}")
        self.i += 1
        return tok

    def parse(self) -> int:
        v = self.ternary()
        if self.peek() is not None:
            raise ValueError(f"left over: {' '.join(self.toks[self.i:])!r}")
        return v

    def ternary(self) -> int:
        cond = self.binary(1)
        if self.peek() == "?":
            self.take("?")
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            return a if cond else b
        return cond

    def binary(self, level: int) -> int:
        left = self.unary()
        while (tok := self.peek()) in BINARY and BINARY[tok][0] >= level:  # type: ignore[comparison-overlap]
            prec, fn = BINARY[self.take()]
            right = self.binary(prec + 1)
            left = fn(left, right)
        return left

    def _cast_ahead(self) -> int:
        """How many tokens a cast `( type words [*] )` starting here spans, or 0."""
        j = self.i + 1
        words = 0
        while j < len(self.toks) and (TYPE_WORDS.match(self.toks[j]) or self.toks[j] == "*"):
            words += self.toks[j] != "*"
            j += 1
        return j - self.i + 1 if words and j < len(self.toks) and self.toks[j] == ")" else 0

    def unary(self) -> int:
        tok = self.peek()
        if tok == "(":
            span = self._cast_ahead()
            if span:
                self.i += span
                return self.unary()
            self.take("(")
            v = self.ternary()
            self.take(")")
            return v
        if tok in ("-", "+", "~", "!", "*"):
            self.take()
            v = self.unary()
            return {"-": -v & MASK, "+": v, "~": ~v & 0xFFFFFFFF if v <= 0xFFFFFFFF else ~v & MASK,
                    "!": int(not v), "*": v}[tok]
        tok = self.take()
        m = INT.fullmatch(tok)
        if m:
            return int(m.group(1), 0) if not m.group(1).startswith("0") or m.group(1).lower().startswith("0x") \
                else int(m.group(1), 8)
        if tok in self.names:
            return self.names[tok]
        raise ValueError(f"unknown name {tok!r}")
