"""Names from a model, made safe for C: identifiers, comment text, string literals.

Tensor, model and pool names come from the model file or the user, so they
are untrusted: a name reaches generated C only as an identifier handed out
by a `Namespace`, as comment text from `comment_text`, or as a string literal
from `string_literal`. Identifiers are deterministic and readable (a name
that already is a safe C identifier stays as it is), unique in their scope,
and never a keyword (C or C++), a standard macro or a reserved identifier.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TypeGuard

from .c_reserved import RESERVED_WORDS

# A mangled name longer than this keeps a prefix and a hash of the whole name.
MAX_IDENTIFIER = 48
_HASHED_PREFIX = MAX_IDENTIFIER - 9  # room for "_" and 8 hex digits

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C reserves `_X...` and `__...`; `ts_`/`tsgen_`/`tessera_` (any case) hold tessera's own helpers and macros.
_RESERVED_PREFIX = re.compile(r"_[A-Z_]|(?i:ts|tsgen|tessera)_")


def is_c_identifier(name: object) -> TypeGuard[str]:
    """Is `name` an ASCII C identifier (not necessarily a free one)?"""
    return isinstance(name, str) and _IDENTIFIER.fullmatch(name) is not None


def is_reserved(name: str) -> bool:
    """Is `name` a keyword, a standard macro, a library name or a reserved identifier?"""
    return name in RESERVED_WORDS or _RESERVED_PREFIX.match(name) is not None


def is_safe_identifier(name: object) -> bool:
    """Could `name` be used as it is (a short ASCII identifier nobody else claims)?"""
    return is_c_identifier(name) and len(name) <= MAX_IDENTIFIER and not is_reserved(name)


def sanitize(hint: str) -> str:
    """A C identifier resembling `hint`, free of reserved prefixes (it may still be a reserved word).

    Other ASCII characters become `_`, non-ASCII ones `_u<code point>`; a
    leading digit or reserved prefix gains a `v`; a long result is cut and
    ends in a hash of `hint`, so long names that share a prefix stay apart.
    """
    name = "".join(map(_identifier_chars, hint)) or "v"
    if name[0].isdigit() or _RESERVED_PREFIX.match(name):
        name = "v" + name
    if len(name) > MAX_IDENTIFIER:
        digest = hashlib.sha256(hint.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[:_HASHED_PREFIX]}_{digest}"
    return name


def _identifier_chars(c: str) -> str:
    if not c.isascii():
        return f"_u{ord(c):04x}"
    return c if c.isalnum() or c == "_" else "_"


class Namespace:
    """Hands out C identifiers, each distinct within one scope.

    With `fold_case`, names are also distinct ignoring case: the header's
    macros spell a tensor's field in capitals (`TSGEN_M_INPUT_<FIELD>_SIZE`).
    """

    def __init__(self, reserved: Iterable[str] = (), fold_case: bool = False) -> None:
        self._fold_case = fold_case
        self._taken: set[str] = {self._key(n) for n in reserved}
        self._names: dict[int, str] = {}

    def _key(self, name: str) -> str:
        return name.upper() if self._fold_case else name

    def is_free(self, name: str) -> bool:
        """Could `name` be handed out as it is?"""
        return is_safe_identifier(name) and self._key(name) not in self._taken

    def reserve(self, name: str) -> None:
        """Keep `name` from being handed out (it is spoken for elsewhere)."""
        self._taken.add(self._key(name))

    def name_of(self, obj: object, hint: str) -> str:
        key = id(obj)
        if key not in self._names:
            self._names[key] = self.fresh(hint)
        return self._names[key]

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        if _RESERVED_PREFIX.match(f"{base}_1"):  # `_` or `ts` would only ever yield `__1`, `ts_1`, ...
            base = "v" + base
        name, k = base, 1
        while is_reserved(name) or self._key(name) in self._taken:  # `base` is an identifier already
            name = f"{base}_{k}"
            k += 1
        self._taken.add(self._key(name))
        return name

    def assign(self, hints: Sequence[str]) -> list[str]:
        """One identifier per hint, in order: names that are already safe and free keep
        their spelling first, then the others are mangled (so `a_b` stays `a_b` next to `a b`)."""
        names: list[str | None] = [None] * len(hints)
        for k, hint in enumerate(hints):
            if self.is_free(hint):
                self.reserve(hint)
                names[k] = hint
        return [name if name is not None else self.fresh(hint) for name, hint in zip(names, hints)]


def comment_text(text: str, limit: int = 120) -> str:
    """`text` made safe inside a `/* ... */` comment, on one line.

    Printable ASCII stays; `*`, `?` and `\\` (which could close a comment,
    form a trigraph or splice lines) and every other character are written
    as `\\xNN` or `\\uNNNN`, so the text never holds `*/`, `/*`, `??`, a
    newline, NUL or a backslash at its end. Longer text is cut with `...`.
    """
    out = "".join(map(_comment_char, text))
    return out if len(out) <= limit else out[:limit - 3].rstrip("\\") + "..."


def _comment_char(c: str) -> str:
    if " " <= c <= "~" and c not in "*?\\":
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}"


# `\?` keeps `??/` from being read as a trigraph (strict ISO modes).
_C_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("?"): "\\?", ord("\n"): "\\n", ord("\t"): "\\t"}
_ASSEMBLER_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\"}


def string_literal(text: str | bytes) -> str:
    """A C string literal holding exactly the UTF-8 bytes of `text`."""
    return _quoted(text, _C_ESCAPES)


def assembler_string(text: str | bytes) -> str:
    """A GNU assembler string (e.g. an `.incbin` file name) holding exactly `text`'s bytes."""
    return _quoted(text, _ASSEMBLER_ESCAPES)


def _quoted(text: str | bytes, escapes: dict[int, str]) -> str:
    """Printable ASCII as it is, `escapes` for their bytes, three-digit octal for the rest (both C and gas)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return '"' + "".join(escapes.get(b) or (chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}") for b in data) + '"'
