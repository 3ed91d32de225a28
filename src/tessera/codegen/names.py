"""Unique, keyword-safe C identifiers."""

from __future__ import annotations

import re

C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Bool _Complex _Imaginary main""".split()
)


class Namespace:
    """Hands out C identifiers, each distinct within one scope."""

    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self._used: set[str] = set(reserved) | C_KEYWORDS
        self._names: dict[int, str] = {}

    def name_of(self, obj: object, hint: str) -> str:
        key = id(obj)
        if key not in self._names:
            self._names[key] = self.fresh(hint)
        return self._names[key]

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        name, k = base, 1
        while name in self._used:
            name = f"{base}_{k}"
            k += 1
        self._used.add(name)
        return name


def sanitize(hint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
    if name[0].isdigit():
        name = "v" + name
    return name
