"""Shape classes: kernels whose C differs only in integer constants share one compiled function.

DenseNet-121's layers repeat one pattern on a growing number of channels:
its 59 1x1 convolutions differ only in the input channel count, its 58
batch-norm + ReLU kernels and 54 concatenations likewise. Generated apart,
each is compiled apart, and gcc's time grows with the kernel count. Here
the kernels of a unit are grouped by their C text with the integer literals
taken out (the *skeleton*); a group of two or more becomes one static
function taking the literals that differ as `int32_t` arguments, and each
kernel a one-line exported wrapper passing its own values.

Literals that shape the code gcc makes stay in the skeleton, so kernels
that differ there are not grouped: the bounds of short loops (register
tiles, pooling windows: at most SMALL_TRIP_COUNT trips), of the loop gcc
vectorises (the innermost one left once short nests are unrolled) and of
loops gcc is told to unroll; divisors (a constant divides by
multiplication); array sizes, preprocessor lines, strings, attributes and
`INT64_C` arguments. The shared function is `noipa`: gcc would otherwise
clone it per constant and compile it once per kernel again.

Measured on AMD EPYC (Zen 4): DenseNet-121's 187 kernels become 30
functions and its gcc time falls from 9.1 to 2.2 CPU seconds; the shared
kernels run as fast as the specialised ones (each within a few percent,
the models' 1-thread latency unchanged).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

SHARED_MACRO = "TS_SHAPE_CLASS"
# the linkage of a shared function: static, and never cloned or inlined into its wrappers
SHARED_MACRO_LINES = "\n".join([
    f"#ifndef {SHARED_MACRO}",
    "#if defined(__GNUC__) && !defined(__clang__)",
    f"#define {SHARED_MACRO} static __attribute__((noipa))",
    "#elif defined(__GNUC__)",
    f"#define {SHARED_MACRO} static __attribute__((noinline))",
    "#else",
    f"#define {SHARED_MACRO} static",
    "#endif",
    "#endif",
])
ARG_PREFIX = "ts_shape_"  # the shared function's extra arguments: ts_shape_0, ts_shape_1, ...
_NAME = "TS_SHAPE_CLASS_FUNCTION"  # stands for the kernel's name in a skeleton
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")
_SIGNATURE = re.compile(r"TS_EXPORT int32_t (\w+)\(([^)]*)\) \{\n")
_ARRAY_DECLARATION = re.compile(r"^\s*[A-Za-z_][\w ]*\s\w+\[\d+\];$")
INT32_MAX = 2**31 - 1
# where C wants constant expressions, or a literal may not stand for a number: strings, attributes and
# builtins, static initialisers, case labels
_CONSTANT_CONTEXTS = ('"', "__", "static ", "= {", "case ")


@dataclass(frozen=True)
class Skeleton:
    """A kernel's C text split at its open literals: `pieces` joined by `values` is the text again."""

    name: str
    params: str  # the C parameter list
    pieces: tuple[str, ...]  # the kernel name replaced by a placeholder
    values: tuple[int, ...]


@dataclass
class _Loop:
    line: int
    indent: int
    bound: int | None  # the trip count, when a literal
    children: list["_Loop"]

    @property
    def trips_inside(self) -> int | None:
        """Iterations of this loop nest's body statements, if every bound is a literal."""
        inner = [c.trips_inside for c in self.children]
        if self.bound is None or None in inner:
            return None
        return self.bound * max([t for t in inner if t is not None] or [1])

    @property
    def unrolled(self) -> bool:
        """Whether gcc unrolls the whole nest (a few iterations, as of a pooling window)."""
        trips = self.trips_inside
        return trips is not None and trips <= SMALL_TRIP_COUNT

    @property
    def depth(self) -> int:
        """Loop levels gcc keeps, this one included: 1 for the loop it vectorises."""
        return (0 if self.unrolled else 1) + max([c.depth for c in self.children] or [0])


SMALL_TRIP_COUNT = 16  # loops this short are register tiles or windows gcc unrolls: their bounds stay
_BOUND = re.compile(r"for \(\w+ \w+ = 0; \w+ < (\d+);")


def _loops(lines: Sequence[str]) -> list[_Loop]:
    """Every `for` of a kernel's text, nested by indentation."""
    found: list[_Loop] = []
    stack: list[_Loop] = []
    for k, line in enumerate(lines):
        text = line.lstrip()
        indent = len(line) - len(text)
        while stack and text and indent <= stack[-1].indent:
            stack.pop()
        if text.startswith("for ("):
            bound = _BOUND.match(text)
            loop = _Loop(k, indent, int(bound.group(1)) if bound else None, [])
            if stack:
                stack[-1].children.append(loop)
            stack.append(loop)
            found.append(loop)
    return found


def _closed_lines(lines: Sequence[str]) -> set[int]:
    """Lines whose literals must stay: the bounds of short loops, of the loop gcc vectorises and of
    loops gcc is told to unroll; preprocessor lines, strings, builtins, attributes, array sizes."""
    closed = {k for k, line in enumerate(lines) if line.lstrip().startswith("#") or _ARRAY_DECLARATION.match(line)
              or any(mark in line for mark in _CONSTANT_CONTEXTS)}
    for loop in _loops(lines):
        short = loop.bound is not None and loop.bound <= SMALL_TRIP_COUNT
        pragma = loop.line > 0 and lines[loop.line - 1].lstrip().startswith("#pragma")
        if short or pragma or loop.depth <= 1:
            closed.add(loop.line)
    return closed


def skeleton(text: str) -> Skeleton | None:
    """`text` (one kernel's C definition) split at its open literals; None if it is no plain kernel
    or has no loop."""
    signature = _SIGNATURE.match(text)
    if signature is None or _NAME in text or ARG_PREFIX in text:
        return None
    name, params = signature.group(1), signature.group(2)
    body = re.sub(rf"\b{name}\b", _NAME, text)
    lines = body.split("\n")
    if not _loops(lines):  # straight-line code costs gcc next to nothing: sharing would only add a call
        return None
    closed_lines = _closed_lines(lines)
    pieces, values, kept = [], [], ""
    for k, line in enumerate(lines):
        closed = k in closed_lines
        last = 0
        for m in _INT.finditer(line):
            value = int(m.group())
            before = line[: m.start()].rstrip()
            if closed or value > INT32_MAX or before.endswith(("/", "%", "_C(")):
                continue
            pieces.append(kept + line[last:m.start()])
            values.append(value)
            kept, last = "", m.end()
        kept += line[last:] + ("\n" if k < len(lines) - 1 else "")
    pieces.append(kept)
    return Skeleton(name, params, tuple(pieces), tuple(values))


def _argument_names(params: str) -> list[str]:
    if params.strip() in ("", "void"):
        return []
    return [re.findall(r"\w+", p)[-1] for p in params.split(",")]


def shared_source(members: Sequence[Skeleton], taken: set[str]) -> tuple[str, str]:
    """(name, C text) of the function `members` (one skeleton) share, then one wrapper per member.

    A literal the members agree on stays; each distinct column of values is one argument."""
    columns = list(zip(*(m.values for m in members)))
    open_columns: dict[tuple[int, ...], int] = {}
    for column in columns:
        if len(set(column)) > 1:
            open_columns.setdefault(column, len(open_columns))
    digest = hashlib.sha256("\0".join(members[0].pieces).encode()).hexdigest()[:8]
    name = f"{members[0].name}_shape_{digest}"
    while name in taken:
        name += "_"
    first = members[0]
    parts = [first.pieces[0]]
    for k, column in enumerate(columns):
        slot = open_columns.get(column)
        parts.append(str(column[0]) if slot is None else f"{ARG_PREFIX}{slot}")
        parts.append(first.pieces[k + 1])
    extra = [f"int32_t {ARG_PREFIX}{j}" for j in range(len(open_columns))]
    params = ", ".join(p for p in (first.params if first.params.strip() != "void" else "", *extra) if p)
    shared = "".join(parts).replace(f"TS_EXPORT int32_t {_NAME}({first.params})",
                                    f"{SHARED_MACRO} int32_t {name}({params})", 1)
    wrappers = []
    for row, member in enumerate(members):
        values = [str(column[row]) for column, _ in sorted(open_columns.items(), key=lambda kv: kv[1])]
        args = ", ".join([*_argument_names(member.params), *values])
        wrappers.append(f"TS_EXPORT int32_t {member.name}({member.params}) {{\n  return {name}({args});\n}}")
    return name, "\n\n".join([shared, *wrappers])


def shape_classes(texts: Sequence[str]) -> list[list[int]]:
    """Indices of `texts` grouped by skeleton, in order of first appearance (a kernel that is no
    plain kernel is a group of its own)."""
    groups: dict[object, list[int]] = {}
    for k, text in enumerate(texts):
        found = skeleton(text)
        key: object = ("alone", k) if found is None else (found.params, found.pieces)
        groups.setdefault(key, []).append(k)
    return list(groups.values())
