"""PlanDevices: give every operator call a named piece of the compilation.

A compilation over named sub-targets (`parse_named_targets`) runs each call
on one piece. The choice, in order of precedence:

1. a pin on the call site: `on_target(expr, "inference_cpu")`;
2. a pin on an enclosing function: `pin_function(func, "inference_cpu")`
   on a function called from `main` (or on `main` itself, which pins every
   call not pinned otherwise), turned into call-site pins by
   ExpandFunctionPins before partitioning (so accelerators honour them too);
3. the device policy, from the pieces able to run the op. The default,
   `"fastest_for_compute"`, puts convolutions and matrix products on the
   fastest piece and lets every other call follow its producer, so chains
   of cheap calls stay on one piece. Policies are registered by name
   (`register_device_policy`) and chosen with the PassContext config key
   `"device_policy"` (a name or a callable).

Where a tensor moves between pieces with different memories (the `c`
kind's `-memory` attribute; pieces without one share system memory), a
`device_copy` call is inserted, once per tensor and destination memory.
The result keeps one `on_target` annotation around every call; FuseOps
takes them off, fuses only within a piece and records the piece on each
primitive function (`attrs.extra["device"]`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from ..errors import TesseraError, did_you_mean, format_choices
from ..op.annotation import HOST, OnTargetAttrs, device_copy, on_target, on_target_op
from ..op.registry import Op, OpPattern
from ..relay.expr import Call, Constant, Expr, FuncAttrs, Function, GlobalVar, Tuple, TupleGetItem, Var
from ..relay.module import IRModule
from ..relay.visitor import post_order, rewrite, substitute
from ..target.named import CompilationConfig
from ..target.target import Target
from .pass_infra import FunctionPass, PassContext

PIN_ATTR = "on_target"  # FuncAttrs.extra key: the piece a whole function is pinned to
DEVICE_ATTR = "device"  # FuncAttrs.extra key on primitive functions: the piece that runs them
POLICY_CONFIG = "device_policy"
SYSTEM_MEMORY = "system"

# Rough relative throughput on multiply-accumulate-heavy kernels. M0/M3 have
# no FPU (float is emulated); M4/M33 a single-precision FPU; M7 is
# dual-issue; M55 adds Helium. A desktop core outruns them all. Good enough
# to order pieces; a policy that knows better can be registered.
RELATIVE_SPEED = {
    "cortex-m0": 1.0, "cortex-m0plus": 1.0, "cortex-m3": 1.5, "cortex-m4": 4.0,
    "cortex-m33": 4.0, "cortex-m7": 8.0, "cortex-m55": 10.0,
}
HOST_NATIVE_SPEED = 100.0
HOST_BASELINE_SPEED = 50.0  # an explicit -march (e.g. x86-64) gives up the native extensions


@dataclass(frozen=True)
class Piece:
    """One named piece of a compilation, as device planning sees it."""

    name: str
    target: Target
    memory: str
    speed: float

    def can_run(self, op: Op) -> bool:
        supports = self.target.kind.supports_op
        if supports is not None:
            return bool(supports(self.target, op))
        return op.compute is not None  # the default C flow lowers anything with a TE compute


def estimate_speed(target: Target) -> float:
    mcpu = target.get("mcpu")
    if mcpu in RELATIVE_SPEED:
        return RELATIVE_SPEED[mcpu]
    return HOST_BASELINE_SPEED if target.get("march") not in (None, "native") else HOST_NATIVE_SPEED


def pieces_of(config: CompilationConfig) -> dict[str, Piece]:
    return {name: Piece(name, t, t.get("memory") or SYSTEM_MEMORY, estimate_speed(t))
            for name, t in config.pieces.items()}


@dataclass(frozen=True)
class PlacementRequest:
    """What a device policy is asked: where should `call` run?"""

    call: Call
    candidates: tuple[Piece, ...]  # pieces able to run it, in configuration order
    producers: tuple[Piece, ...]  # pieces of the calls that produce its arguments
    host: Piece


DevicePolicy = Callable[[PlacementRequest], Piece]
DEVICE_POLICIES: dict[str, DevicePolicy] = {}


def register_device_policy(name: str) -> Callable[[DevicePolicy], DevicePolicy]:
    def register(policy: DevicePolicy) -> DevicePolicy:
        DEVICE_POLICIES[name] = policy
        return policy
    return register


def is_compute_heavy(call: Call) -> bool:
    return isinstance(call.op, Op) and call.op.pattern == OpPattern.OUT_ELEMWISE_FUSABLE


@register_device_policy("fastest_for_compute")
def fastest_for_compute(req: PlacementRequest) -> Piece:
    """Convolutions and matrix products on the fastest piece; the rest follows its producer."""
    if is_compute_heavy(req.call):
        return max(req.candidates, key=lambda p: p.speed)  # first of equals: max keeps the earliest
    for piece in req.producers:
        if piece in req.candidates:
            return piece
    return req.host if req.host in req.candidates else req.candidates[0]


@register_device_policy("host_first")
def host_first(req: PlacementRequest) -> Piece:
    """Everything on the host piece unless it cannot run the op."""
    return req.host if req.host in req.candidates else req.candidates[0]


def pin_function(func: Function, piece: str) -> Function:
    """`func` with every call inside pinned to `piece` (unless pinned otherwise)."""
    extra = dict(func.attrs.extra)
    extra[PIN_ATTR] = piece
    return Function(func.params, func.body, func.ret_type, func.attrs.with_(extra=extra))


def _is_pin(e: Expr) -> TypeGuard[Call]:
    return isinstance(e, Call) and e.op is on_target_op


def _op_calls(body: Expr) -> list[Call]:
    return [n for n in post_order(body, into_functions=False) if isinstance(n, Call) and isinstance(n.op, Op)
            and not _is_pin(n)]


def _pin_unpinned(body: Expr, piece: str) -> Expr:
    """Pin every operator call of `body` that carries no pin yet."""
    already = {id(p.args[0]) for p in post_order(body, into_functions=False) if _is_pin(p)}
    todo = {id(c) for c in _op_calls(body)} - already
    return rewrite(body, lambda old, new: on_target(new, piece) if id(old) in todo else None, into_functions=False)


def expand_function_pins(func: Function, mod: IRModule | None) -> Function:
    """Function pins as call-site pins: pinned callees are inlined, a pinned `func` pins its own calls."""

    def callee(call: Call) -> Function | None:
        op = call.op
        target = mod[op] if isinstance(op, GlobalVar) and mod is not None and op in mod else op
        if isinstance(target, Function) and PIN_ATTR in target.attrs.extra and not target.attrs.primitive:
            return target
        return None

    def visit(old: Expr, new: Expr) -> Expr | None:
        if not isinstance(new, Call):
            return None
        inner = callee(new)
        if inner is None:
            return None
        inner = expand_function_pins(inner, mod)  # nested pins first
        return substitute(inner.body, {id(p): a for p, a in zip(inner.params, new.args)})

    body = rewrite(func.body, visit, into_functions=False)
    attrs = func.attrs
    if PIN_ATTR in attrs.extra:
        piece = attrs.extra[PIN_ATTR]
        if not isinstance(piece, str):
            raise TesseraError(f"a function pin names a piece, got {piece!r}; use pin_function(func, 'name')")
        body = _pin_unpinned(body, piece)
        attrs = attrs.with_(extra={k: v for k, v in attrs.extra.items() if k != PIN_ATTR})
    return Function(func.params, body, func.ret_type, attrs)


class ExpandFunctionPins(FunctionPass):
    """Before partitioning: turn function pins into call-site pins every later pass understands."""

    name = "ExpandFunctionPins"
    opt_level = 0

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.primitive or func.attrs.compiler:
            return func
        return expand_function_pins(func, mod)


class DevicePlanner:
    """Assign pieces to the calls of one function and insert the copies."""

    def __init__(self, config: CompilationConfig, policy: DevicePolicy) -> None:
        self.config = config
        self.pieces = pieces_of(config)
        self.host = self.pieces[config.host_name]
        self.policy = policy
        self.copies: dict[tuple[int, str], Expr] = {}

    def piece(self, name: str, what: str) -> Piece:
        if name == HOST:
            return self.host
        if name not in self.pieces:
            raise TesseraError(
                f"{what} is pinned to {name!r}, which is not a piece of this compilation"
                f"{did_you_mean(name, self.pieces)}; pieces: {format_choices(self.pieces)}"
            )
        return self.pieces[name]

    def choose(self, call: Call, pin: str | None, producers: list[Piece]) -> Piece:
        op = call.op
        assert isinstance(op, Op)
        if pin is not None:
            piece = self.piece(pin, f"a call of {op.name}")
            if not piece.can_run(op):
                able = [p.name for p in self.pieces.values() if p.can_run(op)]
                raise TesseraError(
                    f"a call of {op.name} is pinned to piece {piece.name!r} ({piece.target}), which cannot run "
                    f"it; pieces that can: {', '.join(able) or 'none'}"
                )
            return piece
        candidates = tuple(p for p in self.pieces.values() if p.can_run(op))
        if not candidates:
            raise TesseraError(f"no piece of {self.config} can run {op.name}")
        chosen = self.policy(PlacementRequest(call, candidates, tuple(dict.fromkeys(producers)), self.host))
        if chosen not in candidates:
            raise TesseraError(f"device policy returned piece {getattr(chosen, 'name', chosen)!r} for {op.name}, "
                               f"which is not one of the candidates {[p.name for p in candidates]}")
        return chosen

    def move(self, value: Expr, src: Piece | None, dst: Piece) -> Expr:
        """`value` readable from `dst`'s memory: itself, or a (shared) copy."""
        if src is None or src.memory == dst.memory:
            return value
        key = (id(value), dst.memory)
        if key not in self.copies:
            self.copies[key] = on_target(device_copy(value, src.name, dst.name), dst.name)
        return self.copies[key]

    def plan(self, func: Function) -> Function:
        body = func.body
        pins = {id(p.args[0]): p.attrs_as(OnTargetAttrs).target
                for p in post_order(body, into_functions=False) if _is_pin(p)}
        new: dict[int, Expr] = {}
        where: dict[int, Piece | None] = {}  # id(new value) -> piece holding it (None: constants)

        def located(e: Expr) -> tuple[Expr, Piece | None]:
            n = new[id(e)]
            return n, where.get(id(n))

        for node in post_order(body, into_functions=False):
            if _is_pin(node):
                new[id(node)] = new[id(node.args[0])]
            elif isinstance(node, Var):
                new[id(node)] = node
                where[id(node)] = self.host  # inputs arrive in the host's memory
            elif isinstance(node, (Constant, Function, GlobalVar)) or isinstance(node, Op):
                new[id(node)] = node
            elif isinstance(node, Call) and isinstance(node.op, Op):
                sources = [located(a) for a in node.args]
                piece = self.choose(node, pins.get(id(node)), [p for _, p in sources if p is not None])
                moved = tuple(self.move(a, p, piece) for a, p in sources)
                result = on_target(Call(node.op, moved, node.attrs), piece.name)
                new[id(node)] = result
                where[id(result)] = piece
            elif isinstance(node, Call):  # a partition or other function: the host calls it
                args = tuple(self.move(*located(a), self.host) for a in node.args)
                result = Call(node.op, args, node.attrs)  # a called Function or GlobalVar stays as it is
                new[id(node)] = result
                where[id(result)] = self.host
            elif isinstance(node, Tuple):
                new[id(node)] = Tuple(tuple(new[id(f)] for f in node.fields))
            elif isinstance(node, TupleGetItem):
                tup, holder = located(node.tuple_value)
                item = TupleGetItem(tup, node.index)
                new[id(node)] = item
                where[id(item)] = holder
            else:
                raise TesseraError(f"PlanDevices: unexpected {type(node).__name__} in a dataflow graph")
        return Function(func.params, self._to_host(new[id(body)], where), func.ret_type, func.attrs)

    def _to_host(self, out: Expr, where: dict[int, Piece | None]) -> Expr:
        """The function's results end in the host's memory."""
        if isinstance(out, Tuple):
            return Tuple(tuple(self.move(f, where.get(id(f)), self.host) for f in out.fields))
        return self.move(out, where.get(id(out)), self.host)


def resolve_policy(ctx: PassContext) -> DevicePolicy:
    chosen = ctx.config.get(POLICY_CONFIG, "fastest_for_compute")
    if callable(chosen):
        return chosen
    if chosen not in DEVICE_POLICIES:
        raise TesseraError(f"unknown device policy {chosen!r}{did_you_mean(str(chosen), DEVICE_POLICIES)}; "
                           f"registered: {format_choices(DEVICE_POLICIES)}")
    return DEVICE_POLICIES[chosen]


class PlanDevices(FunctionPass):
    name = "PlanDevices"
    opt_level = 0

    def __init__(self, config: CompilationConfig) -> None:
        self.config = config

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if func.attrs.primitive or func.attrs.compiler:
            return func
        return DevicePlanner(self.config, resolve_policy(ctx)).plan(func)


def take_placement(body: Expr) -> tuple[Expr, dict[int, str]]:
    """Remove the `on_target` annotations PlanDevices left; id(call) -> its piece.

    Types are carried over (the annotations are identities), so the result
    needs no new type inference and the ids stay valid.
    """
    device_of: dict[int, str] = {}

    def visit(old: Expr, new: Expr) -> Expr | None:
        if _is_pin(new):
            inner = new.args[0]
            device_of[id(inner)] = new.attrs_as(OnTargetAttrs).target
            return inner
        if new is not old and new.checked_type_ is None and old.checked_type_ is not None:
            return new.with_type(old.checked_type_)
        return None

    return rewrite(body, visit, into_functions=False), device_of


def device_attrs(piece: str | None) -> FuncAttrs:
    return FuncAttrs(primitive=True, extra={DEVICE_ATTR: piece} if piece else {})
