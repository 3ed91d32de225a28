"""Traversal and rewriting of Relay graphs without Python recursion.

Graphs of real models are deep (DenseNet-121 chains over a thousand calls),
so traversals here use an explicit stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from .expr import Call, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, children


def post_order(root: Expr, into_functions: bool = True,
               is_leaf: Callable[[Expr], bool] | None = None) -> list[Expr]:
    """Every node reachable from `root` once, children before parents.

    With `into_functions=False`, nested Function nodes are leaves; `is_leaf`
    marks other nodes whose children are not visited (never the root).
    """
    order: list[Expr] = []
    visited: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        if node is not root:
            if isinstance(node, Function) and not into_functions:
                continue
            if is_leaf is not None and is_leaf(node):
                continue
        for child in reversed(children(node)):
            if id(child) not in visited:
                stack.append((child, False))
    return order


def rebuild(node: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`node` with new children (itself when none changed). Types are dropped."""
    old = children(node)
    if len(kids) == len(old) and all(a is b for a, b in zip(kids, old)):
        return node
    if isinstance(node, Call):
        if isinstance(node.op, (Function, GlobalVar)):
            callee = kids[0]
            if not isinstance(callee, (Function, GlobalVar)):
                raise TypeError(f"a called function must stay a Function or GlobalVar, got {type(callee).__name__}")
            return Call(callee, kids[1:], node.attrs)
        return Call(node.op, kids, node.attrs)
    if isinstance(node, Tuple):
        return Tuple(kids)
    if isinstance(node, TupleGetItem):
        return TupleGetItem(kids[0], node.index)
    if isinstance(node, Function):
        params = tuple(p for p in kids[:-1] if isinstance(p, Var))
        if len(params) != len(kids) - 1:
            raise TypeError("function parameters must stay variables")
        return Function(params, kids[-1], node.ret_type, node.attrs)
    if isinstance(node, Let):
        assert isinstance(kids[0], Var)
        return Let(kids[0], kids[1], kids[2])
    raise TypeError(f"cannot rebuild leaf {type(node).__name__}")


Rewriter = Callable[[Expr, Expr], "Expr | None"]


def rewrite(root: Expr, fn: Rewriter, into_functions: bool = True,
            is_leaf: Callable[[Expr], bool] | None = None) -> Expr:
    """Bottom-up rewrite. `fn(original, rebuilt)` returns a replacement or None.

    `rebuilt` is the node with its children already rewritten. Nodes for
    which `is_leaf` holds are passed to `fn` without visiting their children.
    """
    memo: dict[int, Expr] = {}
    for node in post_order(root, into_functions, is_leaf):
        if node is not root and (
            (isinstance(node, Function) and not into_functions) or (is_leaf is not None and is_leaf(node))
        ):
            new = node
        else:
            kids = tuple(memo[id(k)] for k in children(node))
            new = rebuild(node, kids) if kids else node
        replacement = fn(node, new)
        memo[id(node)] = new if replacement is None else replacement
    return memo[id(root)]


def substitute(root: Expr, mapping: Mapping[int, Expr]) -> Expr:
    """Replace nodes by identity (`id(node) -> replacement`)."""
    return rewrite(root, lambda old, new: mapping.get(id(old)))


def iter_calls(root: Expr) -> Iterator[Call]:
    for node in post_order(root):
        if isinstance(node, Call):
            yield node


def free_vars(root: Expr) -> list[Var]:
    """Variables used but not bound inside `root`, in first-use order."""
    bound: set[int] = set()
    for node in post_order(root):
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
        elif isinstance(node, Let):
            bound.add(id(node.var))
    seen: set[int] = set()
    result: list[Var] = []
    for node in post_order(root):
        if isinstance(node, Var) and id(node) not in bound and id(node) not in seen:
            seen.add(id(node))
            result.append(node)
    return result
