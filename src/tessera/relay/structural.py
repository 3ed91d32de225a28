"""Structural equality and hashing of Relay expressions.

Two expressions are structurally equal when they compute the same thing the
same way: same operators with equal attributes, equal constants, and
variables that correspond one-to-one at their binding sites (alpha
equivalence). Free variables must be the same object unless
`map_free_vars` is set. Both functions walk iteratively (graphs are deep).
"""

from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np

from .expr import Call, Constant, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, children
from .visitor import post_order


def _const_equal(a: Constant, b: Constant) -> bool:
    x, y = a.data, b.data
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _shallow_equal(a: Expr, b: Expr) -> bool:
    """Equal apart from children (and variables, handled by the caller)."""
    if type(a) is not type(b):
        return False
    # Each branch tests both sides so the checker knows `b`'s class too.
    if isinstance(a, Constant) and isinstance(b, Constant):
        return _const_equal(a, b)
    if isinstance(a, GlobalVar) and isinstance(b, GlobalVar):
        return a.name_hint == b.name_hint
    if isinstance(a, Call) and isinstance(b, Call):
        ops_match = a.op is b.op or isinstance(a.op, (Function, GlobalVar))
        return ops_match and a.attrs == b.attrs and len(a.args) == len(b.args)
    if isinstance(a, Tuple) and isinstance(b, Tuple):
        return len(a.fields) == len(b.fields)
    if isinstance(a, TupleGetItem) and isinstance(b, TupleGetItem):
        return a.index == b.index
    if isinstance(a, Function) and isinstance(b, Function):
        return (
            len(a.params) == len(b.params)
            and all(p.type_annotation == q.type_annotation for p, q in zip(a.params, b.params))
            and a.attrs == b.attrs
        )
    return isinstance(a, (Let, Var))


def structural_equal(a: Expr, b: Expr, map_free_vars: bool = False) -> bool:
    var_map: dict[int, Var] = {}  # id(var in a) -> var in b
    reverse: dict[int, Var] = {}
    done: set[tuple[int, int]] = set()
    stack: list[tuple[Expr, Expr]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        key = (id(x), id(y))
        if key in done:
            continue
        done.add(key)
        if isinstance(x, Var) or isinstance(y, Var):
            if not (isinstance(x, Var) and isinstance(y, Var)):
                return False
            mapped = var_map.get(id(x))
            if mapped is not None:
                if mapped is not y:
                    return False
                continue
            if id(y) in reverse:
                return False
            if x is not y and not map_free_vars:
                return False
            if x.type_annotation != y.type_annotation:
                return False
            var_map[id(x)], reverse[id(y)] = y, x
            continue
        if not _shallow_equal(x, y):
            return False
        if isinstance(x, Function) and isinstance(y, Function):
            for p, q in zip(x.params, y.params):
                if id(p) in var_map or id(q) in reverse:
                    return False
                var_map[id(p)], reverse[id(q)] = q, p
        if isinstance(x, Let) and isinstance(y, Let):
            var_map[id(x.var)], reverse[id(y.var)] = y.var, x.var
        xs, ys = children(x), children(y)
        if len(xs) != len(ys):
            return False
        stack.extend(zip(reversed(xs), reversed(ys)))
    return True


def _attr_token(attrs: object) -> bytes:
    return repr(attrs).encode()


def structural_hash(e: Expr, map_free_vars: bool = False) -> int:
    """A hash consistent with `structural_equal` (equal expressions hash equal)."""
    order = post_order(e)
    var_index: dict[int, int] = {}
    bound: set[int] = set()
    for node in order:
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
        elif isinstance(node, Let):
            bound.add(id(node.var))
    digests: dict[int, bytes] = {}
    for node in order:
        h = hashlib.blake2b(type(node).__name__.encode(), digest_size=16)
        if isinstance(node, Var):
            h.update(str(node.type_annotation).encode())
            if id(node) in bound or map_free_vars:
                var_index.setdefault(id(node), len(var_index))
                h.update(str(var_index[id(node)]).encode())
            else:
                h.update(str(id(node)).encode())
        elif isinstance(node, Constant):
            h.update(node.data.dtype.str.encode() + str(node.data.shape).encode())
            h.update(hashlib.blake2b(np.ascontiguousarray(node.data).tobytes(), digest_size=16).digest())
        elif isinstance(node, GlobalVar):
            h.update(node.name_hint.encode())
        elif isinstance(node, Call):
            name: Optional[str] = getattr(node.op, "name", None)
            h.update((name or "call").encode() + _attr_token(node.attrs))
        elif isinstance(node, TupleGetItem):
            h.update(str(node.index).encode())
        elif isinstance(node, Function):
            h.update(repr(node.attrs).encode())
        for child in children(node):
            h.update(digests[id(child)])
        digests[id(node)] = h.digest()
    return int.from_bytes(digests[id(e)][:8], "little")
