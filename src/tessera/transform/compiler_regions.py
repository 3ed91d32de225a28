"""MergeCompilerRegions and PartitionGraph: from annotated calls to functions.

After AnnotateTarget every offloaded call reads `compiler_begin(x)` inputs
and is read through `compiler_end(call)`. MergeCompilerRegions joins a
region with a consumer region of the same compiler by dropping the
end→begin pair between them — unless some other path leads from one to the
other through the rest of the graph, which would make the merged region
both feed and consume an outside node (a cycle). PartitionGraph then
outlines each region into a global function carrying the compiler, the
Target and a unique `global_symbol`; a region with several outputs returns
a tuple.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from ..op.annotation import CompilerAttrs, compiler_begin, compiler_end
from ..op.registry import Op
from ..relay.expr import Call, Constant, Expr, FuncAttrs, Function, GlobalVar, Tuple, TupleGetItem, Var, children
from ..relay.module import IRModule
from ..relay.visitor import post_order, rebuild
from ..target.target import Target
from .infer_type import infer_function
from .pass_infra import Pass, PassContext



def _is(e: Expr, op: Op) -> TypeGuard[Call]:
    return isinstance(e, Call) and e.op is op


def _inputs(node: Expr) -> tuple[Expr, ...]:
    """Dataflow children; a nested (composite) function is a leaf here."""
    return () if isinstance(node, Function) else children(node)


def _is_member_call(e: Expr) -> TypeGuard[Call]:
    return isinstance(e, Call) and e.op not in (compiler_begin, compiler_end)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
        return ra


@dataclass
class _Regions:
    """Region membership of the annotated calls of one function body."""

    nodes: list[Expr]
    member_of: dict[int, int] = field(default_factory=dict)  # id(call) -> region key
    compiler: dict[int, str] = field(default_factory=dict)  # region key -> compiler name
    uf: _UnionFind = field(default_factory=_UnionFind)

    @classmethod
    def find(cls, body: Expr) -> "_Regions":
        nodes = post_order(body, into_functions=False)
        regions = cls(nodes)
        # a call is a member if it reads a begin or is read through an end
        for node in nodes:
            if _is(node, compiler_end) and _is_member_call(node.args[0]):
                regions._add(node.args[0], node.attrs_as(CompilerAttrs).compiler)
            if _is_member_call(node) and any(_is(a, compiler_begin) for a in node.args):
                name = next(a.attrs_as(CompilerAttrs).compiler for a in node.args if _is(a, compiler_begin))
                regions._add(node, name)
        # members read members directly inside merged regions: same region
        for node in reversed(nodes):
            if id(node) in regions.member_of and isinstance(node, Call):  # members are calls
                for a in node.args:
                    if _is_member_call(a):
                        if id(a) not in regions.member_of:
                            regions._add(a, regions.compiler[regions.member_of[id(node)]])
                        regions.uf.union(regions.member_of[id(node)], regions.member_of[id(a)])
        return regions

    def _add(self, call: Call, compiler: str) -> None:
        if id(call) not in self.member_of:
            self.member_of[id(call)] = id(call)
            self.compiler[id(call)] = compiler

    def region(self, e: Expr) -> int | None:
        key = self.member_of.get(id(e))
        return None if key is None else self.uf.find(key)


def _unit_graph(regions: _Regions) -> tuple[dict[int, set[int]], dict[int, int]]:
    """Successor sets between units (a region, or any other node), and unit per node."""
    unit: dict[int, int] = {}
    for node in regions.nodes:
        r = regions.region(node)
        if r is not None:
            unit[id(node)] = r
        elif _is(node, compiler_begin) or _is(node, compiler_end):
            continue
        else:
            unit[id(node)] = id(node)

    def source(e: Expr) -> int:
        while _is(e, compiler_begin) or _is(e, compiler_end):
            e = e.args[0]
        return unit[id(e)]

    succ: dict[int, set[int]] = {}
    for node in regions.nodes:
        if id(node) not in unit:
            continue
        u = unit[id(node)]
        for child in _inputs(node):
            s = source(child)
            if s != u:
                succ.setdefault(s, set()).add(u)
    return succ, unit


def _reaches_indirectly(succ: dict[int, set[int]], a: int, b: int, uf: _UnionFind) -> bool:
    """Is there a path a -> x -> ... -> b through some unit x outside {a, b}?"""
    ra, rb = uf.find(a), uf.find(b)
    start = [s for s in succ.get(ra, ()) if uf.find(s) not in (ra, rb)]
    seen: set[int] = set()
    while start:
        x = uf.find(start.pop())
        if x == rb:
            return True
        if x in seen or x == ra:
            continue
        seen.add(x)
        start.extend(succ.get(x, ()))
    return False


def merge_regions(func: Function, mod: IRModule | None = None) -> Function:
    regions = _Regions.find(func.body)
    succ, unit = _unit_graph(regions)
    merged_succ: dict[int, set[int]] = {k: set(v) for k, v in succ.items()}
    # candidate merges: begin(end(c)) read by a member of another region of the same compiler
    for node in regions.nodes:
        if not _is_member_call(node) or regions.region(node) is None:
            continue
        for a in node.args:
            if not (_is(a, compiler_begin) and _is(a.args[0], compiler_end)):
                continue
            producer = a.args[0].args[0]
            rp, rc = regions.region(producer), regions.region(node)
            if rp is None or rc is None or rp == rc:
                continue
            if regions.compiler[regions.member_of[id(producer)]] != regions.compiler[regions.member_of[id(node)]]:
                continue
            if _reaches_indirectly(merged_succ, rp, rc, regions.uf):
                continue
            root = regions.uf.union(rp, rc)
            other = rc if root == rp else rp
            merged_succ.setdefault(root, set()).update(merged_succ.pop(other, set()))
    # drop end->begin pairs inside merged regions
    new: dict[int, Expr] = {}
    for node in regions.nodes:
        kids = _inputs(node)
        if not kids:
            new[id(node)] = node
            continue
        if _is_member_call(node) and regions.region(node) is not None:
            args = []
            for a in node.args:
                if _is(a, compiler_begin) and _is(a.args[0], compiler_end) \
                        and regions.region(a.args[0].args[0]) == regions.region(node):
                    args.append(new[id(a.args[0].args[0])])
                else:
                    args.append(new[id(a)])
            new[id(node)] = Call(node.op, tuple(args), node.attrs)
            continue
        new[id(node)] = rebuild(node, tuple(new[id(k)] for k in kids))
    out = Function(func.params, new[id(func.body)], func.ret_type, func.attrs)
    return infer_function(out, mod)


class MergeCompilerRegions(Pass):
    name = "MergeCompilerRegions"
    opt_level = 0

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        main = mod.main
        return mod.with_function("main", merge_regions(main, mod))


# ------------------------------------------------------------------ outline
def _unit_order(regions: _Regions) -> tuple[list[int], dict[int, int], dict[int, list[Expr]]]:
    """Units (regions contracted to one node) in a topological order.

    Returns the order, the unit of every node and the nodes of each unit.
    A `compiler_begin` belongs to the region of the member that reads it.
    """
    unit: dict[int, int] = {}
    for node in regions.nodes:
        r = regions.region(node)
        if r is not None and _is_member_call(node):
            unit[id(node)] = r
            for a in node.args:
                if _is(a, compiler_begin):
                    unit[id(a)] = r
    for node in regions.nodes:
        unit.setdefault(id(node), id(node))
    nodes_of: dict[int, list[Expr]] = {}
    deps: dict[int, set[int]] = {}
    for node in regions.nodes:
        u = unit[id(node)]
        nodes_of.setdefault(u, []).append(node)
        deps.setdefault(u, set()).update(unit[id(c)] for c in _inputs(node) if unit[id(c)] != u)
    first = {u: k for k, u in enumerate(dict.fromkeys(unit[id(n)] for n in regions.nodes))}
    users: dict[int, list[int]] = {}
    for u, ds in deps.items():
        for d in ds:
            users.setdefault(d, []).append(u)
    waiting = {u: len(ds) for u, ds in deps.items()}
    ready = [(first[u], u) for u, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in users.get(u, ()):
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, (first[v], v))
    if len(order) != len(waiting):
        raise AssertionError("compiler regions form a cycle; MergeCompilerRegions should have prevented it")
    return order, unit, nodes_of


def _outline_regions(func: Function, targets: Mapping[str, Target], prefix: str,
                     mod: IRModule) -> tuple[Function, dict[str, Function]]:
    regions = _Regions.find(func.body)
    order, unit, nodes_of = _unit_order(regions)
    functions: dict[str, Function] = {}
    new: dict[int, Expr] = {}
    outputs_of: dict[int, list[Expr]] = {}
    for node in regions.nodes:
        if _is(node, compiler_end):
            r = regions.region(node.args[0])
            if r is not None and node.args[0] not in outputs_of.setdefault(r, []):
                outputs_of[r].append(node.args[0])
    counter: dict[str, int] = {}
    region_calls: dict[int, Call] = {}
    for u in order:
        members = [n for n in nodes_of[u] if _is_member_call(n) and regions.region(n) == u]
        if not members:
            for node in nodes_of[u]:
                kids = _inputs(node) if not isinstance(node, Function) else ()
                if _is(node, compiler_end):
                    r = regions.region(node.args[0])
                    if r is None:
                        raise AssertionError("a compiler_end outside every region survived MergeCompilerRegions")
                    call, outs = region_calls[r], outputs_of[r]
                    new[id(node)] = call if len(outs) == 1 else TupleGetItem(call, outs.index(node.args[0]))
                else:
                    new[id(node)] = rebuild(node, tuple(new[id(c)] for c in kids)) if kids else node
            continue
        compiler = regions.compiler[regions.member_of[id(members[0])]]
        target = targets.get(compiler)
        bind = target.kind.bind_constants if target is not None else False
        k = counter.get(compiler, 0)
        counter[compiler] = k + 1
        symbol = mod.unique_name(f"{prefix}{compiler.replace('-', '_')}_{k}")
        outs = outputs_of.get(u, [members[-1]])
        fn, inputs = _region_function(members, outs, compiler, symbol, target, bind)
        functions[symbol] = fn
        region_calls[u] = Call(GlobalVar(symbol), tuple(new[id(x)] for x in inputs))
    main = Function(func.params, new[id(func.body)], func.ret_type, func.attrs)
    return main, functions


def _region_function(members: list[Call], outputs: list[Expr], compiler: str, symbol: str,
                     target: Target | None, bind_constants: bool) -> tuple[Function, list[Expr]]:
    inputs: list[Expr] = []
    params: dict[int, Var] = {}
    local: dict[int, Expr] = {}
    for m in members:  # topological order
        args = []
        for a in m.args:
            if id(a) in local:
                args.append(local[id(a)])
                continue
            x = a.args[0] if _is(a, compiler_begin) else a
            if bind_constants and isinstance(x, Constant):
                args.append(x)
                continue
            if id(x) not in params:
                params[id(x)] = Var(f"{compiler.replace('-', '_')}_in{len(inputs)}", x.checked_type)
                inputs.append(x)
            args.append(params[id(x)])
        local[id(m)] = Call(m.op, tuple(args), m.attrs)
    body = local[id(outputs[0])] if len(outputs) == 1 else Tuple(tuple(local[id(o)] for o in outputs))
    attrs = FuncAttrs(primitive=True, compiler=compiler, global_symbol=symbol, target=target)
    return Function(tuple(params[id(x)] for x in inputs), body, attrs=attrs), inputs


class PartitionGraph(Pass):
    """Outline each compiler region of `main` into a global function."""

    name = "PartitionGraph"
    opt_level = 0

    def __init__(self, targets: Mapping[str, Target] | None = None, prefix: str = "tsgen_") -> None:
        self.targets = dict(targets or {})
        self.prefix = prefix

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        main, functions = _outline_regions(mod.main, self.targets, self.prefix, mod)
        result = mod
        for symbol, fn in functions.items():
            result = result.with_function(symbol, infer_function(fn, result))
        return result.with_function("main", infer_function(main, result))
