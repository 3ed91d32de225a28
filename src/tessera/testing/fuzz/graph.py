"""Values and the graph builder that random operators extend.

A `Value` is a tensor of the graph under construction together with what
the generator can prove about it: bounds on its elements, whether it may
hold NaN or infinity, and how far a correct implementation may stray from
the reference (`tol`, a relative error; 0 means every correct
implementation gives the same bits). Operators use these facts to stay
inside their defined domain and to avoid ill-conditioned cases (a Floor of
a value that carries rounding error would compare discontinuities).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypedDict, TypeVar, Unpack

import numpy as np
import onnx
from onnx import helper, numpy_helper

T = TypeVar("T")

FLOATS = ("float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
ALL_DTYPES = NUMERIC + ("bool",)

MAX_ELEMENTS = 384  # keeps most cases fast to run and to compile
LARGE_ELEMENTS = 1 << 17  # a few cases are large enough for parallel loops and register tiles


class Reject(Exception):
    """The generator cannot apply an operator here; try another one."""


class Chooser(Protocol):
    """The source of every random decision (hypothesis data or a seeded RNG)."""

    def integer(self, lo: int, hi: int) -> int: ...  # inclusive bounds

    def choice(self, options: Sequence[T]) -> T: ...

    def boolean(self, p: float = 0.5) -> bool: ...


class RandomChooser:
    """A Chooser over `random.Random`, for the long fuzz runs."""

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        if not options:
            raise Reject("nothing to choose from")
        return options[self._rng.randrange(len(options))]

    def boolean(self, p: float = 0.5) -> bool:
        return self._rng.random() < p


def finfo_max(dtype: str) -> float:
    return float(np.finfo(dtype).max) if dtype in FLOATS else float(np.iinfo(dtype).max)


def dtype_range(dtype: str) -> tuple[float, float]:
    if dtype == "bool":
        return 0.0, 1.0
    if dtype in FLOATS:
        m = float(np.finfo(dtype).max)
        return -m, m
    info = np.iinfo(dtype)
    return float(info.min), float(info.max)


def eps(dtype: str) -> float:
    return float(np.finfo(dtype).eps) if dtype in FLOATS else 0.0


@dataclass(frozen=True)
class Value:
    """A tensor of the graph and the facts the generator knows about it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    lo: float = -math.inf  # every element is >= lo ...
    hi: float = math.inf  # ... and <= hi (NaN aside)
    finite: bool = True  # no NaN and no infinity
    tol: float = 0.0  # relative error a correct result may carry; 0: exact

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def exact(self) -> bool:
        return self.tol == 0.0

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))


class Facts(TypedDict, total=False):
    """What an operator's rule derived about one output (the `Value` fields of the same names).

    A missing entry means "unknown": the `Value` default applies.
    """

    lo: float
    hi: float
    finite: bool
    tol: float


def facts(dtype: str, lo: float, hi: float, finite: bool, tol: float) -> Facts:
    """Normalised Value facts: bounds past the dtype's range mean overflow."""
    if dtype == "bool":
        return {"lo": 0.0, "hi": 1.0, "finite": True, "tol": 0.0}
    if math.isnan(lo) or math.isnan(hi):
        lo, hi, finite = -math.inf, math.inf, False
    dlo, dhi = dtype_range(dtype)
    if dtype in FLOATS:
        if lo < dlo or hi > dhi:
            finite = False
    elif lo < dlo or hi > dhi or not finite:
        raise Reject(f"{dtype} values in [{lo}, {hi}] could overflow")
    return {"lo": lo, "hi": hi, "finite": finite, "tol": tol if dtype in FLOATS else 0.0}


@dataclass
class Feed:
    """A graph input and the data the case runs it with."""

    value: Value
    data: np.ndarray


class LeafOptions(TypedDict, total=False):
    """What `GraphBuilder.operand` passes on to `leaf` when it makes a new value."""

    lo: float | None
    hi: float | None
    nonzero: bool
    constant_ok: bool


class GraphBuilder:
    """An ONNX graph under construction, with its inputs' data."""

    def __init__(self, chooser: Chooser, opset: int, avoid: frozenset[str], max_elements: int = MAX_ELEMENTS) -> None:
        self.chooser = chooser
        self.opset = opset
        self.max_elements = max_elements
        self.avoid = avoid  # known tessera bugs the generator steers clear of (see generate.KNOWN_BUGS)
        self.rng = np.random.default_rng(chooser.integer(0, 2**32 - 1))
        self.nodes: list[onnx.NodeProto] = []
        self.feeds: list[Feed] = []
        self.initializers: list[onnx.TensorProto] = []
        self.values: list[Value] = []  # every value so far, for reuse as operands
        self.op_tags: list[str] = []  # "OpType" or "OpType:detail" of each node, for statistics
        self.hazards: set[str] = set()  # known bugs this graph may hit (when they are not avoided)
        self.data: dict[str, np.ndarray] = {}  # the values of inputs and initializers, by name
        self._count = 0

    # ------------------------------------------------------------ names
    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    # ------------------------------------------------------------ leaves
    def random_data(self, dtype: str, shape: tuple[int, ...], lo: float | None = None,
                    hi: float | None = None, nonzero: bool = False) -> np.ndarray:
        """Data in a style chosen at random; grids make ties and exact halves likely."""
        if dtype == "bool":
            return np.asarray(self.rng.random(shape) < 0.5)
        if dtype in INTS:
            ilo = int(lo) if lo is not None else (0 if dtype in UNSIGNED else -8)
            ihi = int(hi) if hi is not None else (15 if dtype in UNSIGNED else 8)
            data = np.asarray(self.rng.integers(ilo, ihi + 1, size=shape), dtype=dtype)
            if nonzero:
                data[data == 0] = ihi if ihi != 0 else ilo
            return data
        style = self.chooser.choice(("normal", "grid", "uniform"))
        flo = -4.0 if lo is None else lo
        fhi = 4.0 if hi is None else hi
        if style == "grid":  # quarters: ties for ArgMax/TopK, exact halves for Round
            data = self.rng.integers(math.ceil(flo * 4), math.floor(fhi * 4) + 1, size=shape) / 4.0
        elif style == "normal":
            data = np.clip(self.rng.standard_normal(shape) * (fhi - flo) / 6 + (fhi + flo) / 2, flo, fhi)
        else:
            data = self.rng.uniform(flo, fhi, size=shape)
        data = np.asarray(data, dtype=dtype)
        if nonzero:
            data[data == 0] = fhi if fhi != 0 else flo
        return data

    def _leaf_value(self, name: str, data: np.ndarray) -> Value:
        dtype = data.dtype.name
        if data.size and dtype != "bool":
            lo, hi = float(data.min()), float(data.max())
        else:
            lo, hi = (0.0, 1.0) if dtype == "bool" else (0.0, 0.0)
        return Value(name, dtype, tuple(data.shape), lo, hi, True, 0.0)

    def input(self, data: np.ndarray) -> Value:
        value = self._leaf_value(self.fresh("in"), data)
        self.feeds.append(Feed(value, data))
        self.data[value.name] = data
        self.values.append(value)
        return value

    def constant(self, data: np.ndarray, reusable: bool = True) -> Value:
        """An initializer (attribute-like inputs pass reusable=False)."""
        if data.ndim == 0:
            if "scalar_initializer" in self.avoid:
                raise Reject("0-d initializers are avoided (known bug)")
            self.hazards.add("scalar_initializer")
        value = self._leaf_value(self.fresh("c"), data)
        self.data[value.name] = data
        self.initializers.append(numpy_helper.from_array(np.asarray(data), value.name))
        if reusable:
            self.values.append(value)
        return value

    def ints(self, values: Sequence[int], dtype: str = "int64") -> Value:
        """A 1-d integer initializer holding axes, shapes, sizes and the like."""
        return self.constant(np.asarray(list(values), dtype=dtype).reshape(len(values)), reusable=False)

    def scalar(self, value: float | int | bool, dtype: str) -> Value:
        """A 0-d constant: a Constant node, or an initializer unless those are avoided."""
        data = np.asarray(value, dtype=dtype)
        if "scalar_initializer" not in self.avoid and self.chooser.boolean(0.5):
            return self.constant(data, reusable=False)
        fact: Facts = {"lo": float(data), "hi": float(data), "finite": bool(np.isfinite(data)), "tol": 0.0}
        return self.node("Constant", [], {"value": numpy_helper.from_array(data)}, [fact])[0]

    def leaf(self, dtype: str, shape: tuple[int, ...], lo: float | None = None, hi: float | None = None,
             nonzero: bool = False, constant_ok: bool = True) -> Value:
        """A new graph input, or sometimes an initializer, of random data."""
        if math.prod(shape) > self.max_elements:
            raise Reject(f"shape {shape} is too large")
        data = self.random_data(dtype, shape, lo, hi, nonzero)
        if constant_ok and self.chooser.boolean(0.3):
            try:
                return self.constant(data)
            except Reject:
                pass
        return self.input(data)

    def operand(self, dtype: str, shape: tuple[int, ...], **kw: Unpack[LeafOptions]) -> Value:
        """A second operand: an earlier value of this dtype and shape, or a new leaf."""
        reusable = [v for v in self.values if v.dtype == dtype and v.shape == shape]
        if reusable and not kw and self.chooser.boolean(0.25):
            return self.chooser.choice(reusable)
        return self.leaf(dtype, shape, **kw)

    # ------------------------------------------------------------ nodes
    def node(self, op_type: str, inputs: Sequence[Value | None], attrs: Mapping[str, object] | None = None,
             outputs: Sequence[Facts] = ({},), tag: str | None = None) -> list[Value]:
        """Add a node; ONNX shape inference gives each output's dtype and shape.

        `outputs` holds, per output, the facts (lo, hi, finite, tol) the
        operator's rule derived; missing facts mean "unknown".
        """
        names = [self.fresh("v") for _ in outputs]
        proto = helper.make_node(op_type, [v.name if v is not None else "" for v in inputs], names,
                                 name=self.fresh(f"{op_type}_"))
        # as make_node(**attrs) would, without attribute names that could clash with its own parameters
        proto.attribute.extend(helper.make_attribute(key, value) for key, value in sorted((attrs or {}).items())
                               if value is not None)
        self.nodes.append(proto)
        try:
            types = self._infer(names)
        except Reject:
            self.nodes.pop()
            raise
        result = []
        for name, (dtype, shape), fact in zip(names, types, outputs):
            if math.prod(shape) > self.max_elements:
                self.nodes.pop()
                raise Reject(f"{op_type} output {shape} is too large")
            try:
                full = facts(dtype, float(fact.get("lo", -math.inf)), float(fact.get("hi", math.inf)),
                             bool(fact.get("finite", False)), float(fact.get("tol", 0.0)))
            except Reject:
                self.nodes.pop()
                raise
            result.append(Value(name, dtype, shape, **full))
        self.values.extend(result)
        self.op_tags.append(tag or op_type)
        return result

    def _infer(self, names: Sequence[str]) -> list[tuple[str, tuple[int, ...]]]:
        model = self.model([])
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        except Exception as err:  # inference errors are the generator's mistakes: try something else
            raise Reject(f"shape inference: {err}") from None
        found = {vi.name: vi for vi in inferred.graph.value_info}
        out = []
        for name in names:
            vi = found.get(name)
            if vi is None or not vi.type.HasField("tensor_type"):
                raise Reject(f"no inferred type for {name}")
            tt = vi.type.tensor_type
            if tt.elem_type not in onnx.helper.get_all_tensor_dtypes() or not tt.HasField("shape"):
                raise Reject(f"no static type for {name}")
            dims = []
            for d in tt.shape.dim:
                if not d.HasField("dim_value"):
                    raise Reject(f"dynamic shape for {name}")
                dims.append(d.dim_value)
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
            if dtype not in ALL_DTYPES:
                raise Reject(f"{dtype} output")
            out.append((dtype, tuple(dims)))
        return out

    # ------------------------------------------------------------ model
    def model(self, outputs: Sequence[Value]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "fuzz",
            [helper.make_tensor_value_info(f.value.name, helper.np_dtype_to_tensor_dtype(np.dtype(f.value.dtype)),
                                           f.value.shape) for f in self.feeds],
            [helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), v.shape)
             for v in outputs],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="tessera-fuzz")
        model.ir_version = 8 if self.opset <= 18 else 9  # what onnxruntime reads for these opsets
        return model


def derived(v: Value, **changes: Unpack[Facts]) -> Facts:
    """The facts of `v`, with some changed (for an output that keeps most of them)."""
    base: Facts = {"lo": v.lo, "hi": v.hi, "finite": v.finite, "tol": v.tol}
    base.update(changes)
    return base


def same_facts(v: Value) -> Facts:
    return derived(v)


def with_name(v: Value, name: str) -> Value:
    return replace(v, name=name)
