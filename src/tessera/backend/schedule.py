"""Memory-aware operator ordering: which topological order of the kernels to run.

Any topological order of the top-level dataflow graph computes the same
result, but the peak of live memory differs: on branchy graphs (Inception,
DenseNet, SqueezeNet, ShuffleNet) running one branch to the end while the
others' inputs wait can cost a whole extra feature map. The scheduler here
works on an abstract graph (`Node`: tensors in, tensors out, scratch bytes),
tries a few deterministic heuristics and keeps the order with the smallest
peak; the depth-first order the graph was written in is always one of the
candidates, so the chosen order is never worse than it.

* depth-first: the graph's own order (children left to right);
* depth-first with heavy branches first: at every join, the argument whose
  sub-graph needs the most memory beyond its result runs first (the
  Sethi-Ullman order, optimal on trees);
* greedy list scheduling: of the ready kernels, run the one that frees the
  most (or peaks the least) now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Node:
    """One kernel call: tensor ids it reads and writes, and its scratch bytes."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    workspace: int = 0


@dataclass(frozen=True)
class Graph:
    """Nodes listed in a valid (the default) order; tensors by id with sizes.

    Tensors no node produces (model inputs, weights) and `pinned` tensors
    (model outputs) never count as freed; `sizes` gives pool bytes (0 for
    tensors that live outside the pool).
    """

    nodes: tuple[Node, ...]
    sizes: dict[int, int]
    pinned: frozenset[int] = frozenset()

    @cached_property
    def producers_cache(self) -> dict[int, int]:
        """Tensor id -> index of the node that writes it."""
        return {t: k for k, n in enumerate(self.nodes) for t in n.outputs}


def peak(graph: Graph, order: Sequence[int]) -> int:
    """Largest total of pool tensors alive at one step when running `order`.

    At a step, its inputs, its outputs and its scratch are alive together;
    an input is freed after its last reader.
    """
    readers: dict[int, int] = {}
    for n in graph.nodes:
        for t in set(n.inputs):
            readers[t] = readers.get(t, 0) + 1
    live = best = 0
    for k in order:
        n = graph.nodes[k]
        outs = set(n.outputs)
        live += sum(graph.sizes.get(t, 0) for t in outs)
        best = max(best, live + n.workspace)
        for t in set(n.inputs):
            readers[t] -= 1
            if readers[t] == 0 and t not in graph.pinned and t in graph.producers_cache:
                live -= graph.sizes.get(t, 0)
        for t in outs:  # results nobody reads die at once
            if readers.get(t, 0) == 0 and t not in graph.pinned:
                live -= graph.sizes.get(t, 0)
    return best


def depth_first(graph: Graph) -> list[int]:
    return list(range(len(graph.nodes)))


def heavy_first(graph: Graph) -> list[int]:
    """Post-order DFS from the sinks; at each node the costliest argument sub-graph first."""
    prod = graph.producers_cache
    need: dict[int, int] = {}  # node -> estimated peak of its sub-graph (sharing ignored)

    def out_size(k: int) -> int:
        return sum(graph.sizes.get(t, 0) for t in set(graph.nodes[k].outputs))

    def preds(k: int) -> list[int]:
        seen: list[int] = []
        for t in graph.nodes[k].inputs:
            p = prod.get(t)
            if p is not None and p not in seen:
                seen.append(p)
        return seen

    for k in range(len(graph.nodes)):  # the default order is topological
        ps = sorted(preds(k), key=lambda p: (-(need[p] - out_size(p)), p))
        held = best = 0
        for p in ps:
            best = max(best, held + need[p])
            held += out_size(p)
        need[k] = max(best, held + out_size(k) + graph.nodes[k].workspace)
    users: set[int] = {p for k in range(len(graph.nodes)) for p in preds(k)}
    sinks = [k for k in range(len(graph.nodes)) if k not in users]
    order: list[int] = []
    done: set[int] = set()
    for sink in sinks:
        stack: list[tuple[int, bool]] = [(sink, False)]
        while stack:
            k, expanded = stack.pop()
            if expanded:
                if k not in done:
                    done.add(k)
                    order.append(k)
                continue
            if k in done:
                continue
            stack.append((k, True))
            ps = sorted(preds(k), key=lambda p: (-(need[p] - out_size(p)), p))
            stack.extend((p, False) for p in reversed(ps) if p not in done)
    return order


def _greedy(graph: Graph, score: Callable[[int, int, int, int], tuple]) -> list[int]:
    """List scheduling: repeatedly run the ready node with the smallest score."""
    prod = graph.producers_cache
    readers: dict[int, int] = {}
    for n in graph.nodes:
        for t in set(n.inputs):
            readers[t] = readers.get(t, 0) + 1
    waiting = [len({prod[t] for t in n.inputs if t in prod}) for n in graph.nodes]
    users: dict[int, list[int]] = {}
    for k, n in enumerate(graph.nodes):
        for p in {prod[t] for t in n.inputs if t in prod}:
            users.setdefault(p, []).append(k)
    ready = {k for k, w in enumerate(waiting) if w == 0}
    live = 0
    order: list[int] = []
    while ready:
        def evaluate(k: int) -> tuple:
            n = graph.nodes[k]
            alloc = sum(graph.sizes.get(t, 0) for t in set(n.outputs))
            freed = sum(graph.sizes.get(t, 0) for t in set(n.inputs)
                        if readers[t] == 1 and t in prod and t not in graph.pinned)
            return score(live + alloc + n.workspace, alloc, freed, k)

        k = min(ready, key=evaluate)
        ready.remove(k)
        order.append(k)
        n = graph.nodes[k]
        live += sum(graph.sizes.get(t, 0) for t in set(n.outputs))
        for t in set(n.inputs):
            readers[t] -= 1
            if readers[t] == 0 and t in prod and t not in graph.pinned:
                live -= graph.sizes.get(t, 0)
        for u in users.get(k, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.add(u)
    return order


def greedy_free(graph: Graph) -> list[int]:
    return _greedy(graph, lambda step_peak, alloc, freed, k: (alloc - freed, step_peak, k))


def greedy_peak(graph: Graph) -> list[int]:
    return _greedy(graph, lambda step_peak, alloc, freed, k: (step_peak, alloc - freed, k))


STRATEGIES: dict[str, Callable[[Graph], list[int]]] = {
    "depth_first": depth_first,
    "heavy_first": heavy_first,
    "greedy_free": greedy_free,
    "greedy_peak": greedy_peak,
}


def best_order(graph: Graph, strategies: Sequence[str] = tuple(STRATEGIES)) -> tuple[list[int], str]:
    """The order with the smallest peak (ties go to the earlier strategy), and its strategy's name."""
    best: tuple[int, list[int], str] | None = None
    for name in strategies:
        order = STRATEGIES[name](graph)
        assert sorted(order) == list(range(len(graph.nodes))), name
        cost = peak(graph, order)
        if best is None or cost < best[0]:
            best = (cost, order, name)
    assert best is not None
    return best[1], best[2]
