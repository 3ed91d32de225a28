"""TIR -> C source: the default code generator of the `c` target kind.

One translation unit holds any number of kernels, each an exported function
`int32_t name(const T* p0, ..., T* out)` returning 0 on success. Output is
deterministic: names come from a per-function namespace, helpers are emitted
in first-use order. Subclasses (e.g. a library target's TIRToRuntime) override
`preamble_lines` or `emit_extern_call` and inherit the rest.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Container, Iterable, Sequence

import numpy as np

from .. import dtype as dt
from ..crt.status import Status, is_status
from ..errors import CompileError
from ..tir import expr as E
from ..tir import stmt as S
from ..tir.buffer import Buffer, Scope
from ..tir.index_width import widen_indices
from ..tir.int8_dot import use_int8_dot
from ..tir.int8_dot_pairs import pair_int8_dots
from ..tir.int8_dot_quads import quad_int8_dots
from ..tir.int8_dot_rows import row_int8_dots
from ..tir.int8_dot_slides import slide_int8_dots
from ..tir.layout import flat_index
from ..util.dispatch import TypeDispatch
from .c_fast_math import DEPENDS as FAST_MATH_DEPENDS
from .c_fast_math import INTRINSICS as FAST_MATH
from ..op.nn.gemm import GemmKernel
from ..op.nn.pool_rows import Pool2dKernel
from .c_helpers import helper_name, helper_source
from .c_library import LibraryFunction, gemm_function, row_function
from .c_pool import pool2d_source
from .c_rows import ROW_KERNELS
from .c_reserved import RESERVED_WORDS
from .c_scope import CLASSIFY_INTRINSICS, FLOAT_INTRINSICS, called_functions
from .names import Namespace, is_c_identifier

EXPORT_MACRO = "TS_EXPORT"
# PrimFunc attribute: gcc optimize options for this one kernel (a tuned choice, backend/kernel_flags.py)
OPTIMIZE_ATTR = "c.optimize"
# Parallel loops run on OpenMP threads where the C compiler has -fopenmp (host
# builds); elsewhere (Cortex-M) the same source compiles to plain loops.
PARALLEL_FOR, PARALLEL_FOR_2 = "TS_PARALLEL_FOR", "TS_PARALLEL_FOR_2"
PARALLEL_MACROS = [
    "",
    "#if defined(_OPENMP)",
    f'#define {PARALLEL_FOR} _Pragma("omp parallel for schedule(static)")',
    f'#define {PARALLEL_FOR_2} _Pragma("omp parallel for collapse(2) schedule(static)")',
    "#else",
    f"#define {PARALLEL_FOR}",
    f"#define {PARALLEL_FOR_2}",
    "#endif",
]

_PLAIN_BINOPS = {
    E.BinOp.ADD, E.BinOp.SUB, E.BinOp.MUL, E.BinOp.EQ, E.BinOp.NE, E.BinOp.LT, E.BinOp.LE,
    E.BinOp.GT, E.BinOp.GE, E.BinOp.AND, E.BinOp.OR, E.BinOp.BITAND, E.BinOp.BITOR,
    E.BinOp.BITXOR, E.BinOp.SHL, E.BinOp.SHR,
}


def float_literal(value: float, dtype: str) -> str:
    if dt.is_storage_only(dtype):  # float16 / bfloat16: the bit pattern
        bits = int(np.asarray(value, dtype=dt.to_numpy(dtype)).view(np.uint16))
        return f"UINT16_C(0x{bits:04X})"
    if math.isnan(value):
        return "NAN" if dtype == "float32" else "((double)NAN)"
    if math.isinf(value):
        text = "INFINITY" if dtype == "float32" else "((double)INFINITY)"
        return text if value > 0 else f"(-{text})"
    if dtype == "float32":
        text = f"{value:.9g}"
        if not any(c in text for c in ".en"):
            text += ".0"
        return text + "f"
    text = repr(float(value))
    return text if any(c in text for c in ".en") else text + ".0"


def int_literal(value: int, dtype: str) -> str:
    if dtype in ("int64", "uint64"):
        if dtype == "int64" and value == dt.min_value("int64"):
            return "INT64_MIN"
        return f"INT64_C({value})" if dtype == "int64" else f"UINT64_C({value})"
    if dtype == "int32" and value == dt.min_value("int32"):
        return "INT32_MIN"
    if dtype == "uint32":
        return f"{value}u"
    return str(value)


# in order: int8 dot loops as calls (DOT_INT8), two channels sharing a run (DOT2), then two positions of
# those pairs (DOT2X2), four rows where no second position is left (DOT4), depthwise column pairs (SLIDE2)
INT8_DOT_PASSES: tuple[Callable[[S.PrimFunc], S.PrimFunc], ...] = (
    use_int8_dot, pair_int8_dots, quad_int8_dots, row_int8_dots, slide_int8_dots)


class CodeGenC:
    """Accumulates kernels into one C translation unit."""

    def __init__(self) -> None:
        self._helpers: dict[str, str] = {}
        self._direct: set[str] = set()  # helpers the unit's own functions use (not only its library functions)
        self._library: dict[str, LibraryFunction] = {}  # by symbol, in first-use order
        self._functions: list[str] = []
        self._uses_workspace = False
        self._uses_parallel = False
        self._uses_status = False
        self._exported: list[str] = []
        self._declarations: list[str] = []

    # ------------------------------------------------------------ public API
    def add_function(self, func: S.PrimFunc) -> None:
        # int8 dot loops become helper calls just before writing, after memory planning (see int8_dot)
        lowered = widen_indices(func)
        for rewrite in INT8_DOT_PASSES:
            lowered = rewrite(lowered)
        _FunctionWriter(self, lowered).write()
        self._exported.append(func.name)

    @property
    def function_names(self) -> list[str]:
        return list(self._exported)

    @property
    def function_sources(self) -> list[str]:
        """The C definitions of the kernels added so far."""
        return list(self._functions)

    def merge(self, other: CodeGenC, functions: Sequence[str], exported: Sequence[str]) -> None:
        """Add `other`'s helpers, declarations and includes to this unit, and `functions` (C definitions
        exporting `exported`) in place of its kernels: codegen/c_host.py writes kernels one by one, then
        groups them into translation units."""
        for name, text in other._helpers.items():
            self._helpers.setdefault(name, text)
        self._direct |= other._direct
        for symbol, fn in other._library.items():
            self._library.setdefault(symbol, fn)
        self._declarations += [d for d in other._declarations if d not in self._declarations]
        self._uses_workspace |= other._uses_workspace
        self._uses_parallel |= other._uses_parallel
        self._uses_status |= other._uses_status
        self._functions.extend(functions)
        self._exported.extend(exported)

    def add_helper(self, name: str, text: str) -> None:
        """C text the unit's functions need once, ahead of them (kept in first-use order)."""
        self._helpers.setdefault(name, text)
        self._direct.add(name)

    def declare(self, func: S.PrimFunc) -> None:
        """Declare a function this unit calls but another defines (e.g. kernels called by the executor)."""
        self._declarations.append(prototype(func))

    @property
    def library_functions(self) -> list[LibraryFunction]:
        """The shared library functions (c_library) the unit's functions call, in first-use order."""
        return [fn for fn in self._library.values() if fn.shared]

    def source(self, library_unit: bool = False) -> str:
        """The unit's C text. Its library functions are defined in it (`static`), or, with `library_unit`,
        only declared: a unit of their own defines them (c_library.library_source)."""
        parts = ["\n".join(self.preamble_lines())]
        declarations = list(self._declarations)
        helpers = self._helpers
        if library_unit:
            shared = self.library_functions
            declarations += [fn.prototype for fn in shared]
            kept = {name for fn in self._library.values() if not fn.shared for name, _ in fn.inline_parts}
            elsewhere = {name for fn in shared for name, _ in fn.inline_parts} - self._direct - kept
            helpers = {name: text for name, text in helpers.items() if name not in elsewhere}
        if declarations:
            parts.append("\n".join(declarations))
        if helpers:
            parts.append("\n".join(helpers.values()))
        parts.extend(self._functions)
        return "\n\n".join(parts) + "\n"

    # --------------------------------------------------- subclass extension
    def preamble_lines(self) -> list[str]:
        lines = [
            "/* Generated by tessera. Do not edit. */",
            "#include <math.h>",
            "#include <stddef.h>",
            "#include <stdint.h>",
        ]
        if self._uses_workspace:
            lines.append('#include "tessera/c_backend_api.h"')
        if self._uses_status:
            lines.append('#include "tessera/c_runtime_api.h"')
        lines += [
            "",
            f"#ifndef {EXPORT_MACRO}",
            "#if defined(__GNUC__)",
            f'#define {EXPORT_MACRO} __attribute__((visibility("default")))',
            "#else",
            f"#define {EXPORT_MACRO}",
            "#endif",
            "#endif",
        ]
        if self._uses_parallel:
            lines += PARALLEL_MACROS
        return lines

    def emit_extern_call(self, name: str, args: list[str], call: E.Call) -> str:
        """C text for `call_extern(name, args)`; libraries may override."""
        return f"{name}({', '.join(args)})"

    def declare_helper(self, kind: str, dtype: str) -> str:
        name = helper_name(kind, dtype)
        if name not in self._helpers:
            self._helpers[name] = helper_source(kind, dtype)
        self._direct.add(name)
        return name

    def declare_source(self, name: str, source: str) -> None:
        """Define `name` in this unit by its C text `source` (once, in first-use order)."""
        self._helpers.setdefault(name, source)
        self._direct.add(name)

    def declare_library(self, fn: LibraryFunction) -> None:
        """Call the library function `fn` from this unit: its C joins the unit's helpers, in first-use order
        (`source` may leave it to a library unit instead)."""
        self._library.setdefault(fn.symbol, fn)
        for name, text in fn.inline_parts:
            self._helpers.setdefault(name, text)

    def declare_gemm(self, kernel: GemmKernel, entry: str) -> None:
        """Define the packed-panel GEMM `kernel` (and the ISA headers it needs) in this unit, with the
        entry `entry` (one of `kernel.entries`)."""
        self.declare_library(gemm_function(kernel, entry))

    def note_workspace(self) -> None:
        self._uses_workspace = True

    def note_parallel(self) -> None:
        self._uses_parallel = True

    def note_status(self) -> None:
        self._uses_status = True


def _param_decls(func: S.PrimFunc, name_of: Callable[[Buffer], str]) -> list[str]:
    params = []
    shared = func.attrs.get(S.MAY_ALIAS_ATTR, ())
    if not isinstance(shared, Container):
        raise CompileError(f"kernel {func.name}: attribute {S.MAY_ALIAS_ATTR!r} must hold parameter indices, "
                           f"got {shared!r}")
    for k, buf in enumerate(func.params):
        const = "const " if k < func.num_inputs else ""
        restrict = "" if k in shared else "restrict "
        params.append(f"{const}{dt.c_type(buf.dtype)}* {restrict}{name_of(buf)}")
    return params


def function_namespace(func: S.PrimFunc) -> Namespace:
    """The names of one C function: its own name and whatever it calls stay out of reach of its locals."""
    if not is_c_identifier(func.name) or func.name in RESERVED_WORDS:
        raise CompileError(f"kernel name {func.name!r} is not a valid C identifier")
    return Namespace({func.name, *called_functions(func.body)})


def prototype(func: S.PrimFunc) -> str:
    ns = function_namespace(func)
    params = _param_decls(func, lambda b: ns.name_of(b, b.name))
    return f"int32_t {func.name}({', '.join(params) or 'void'});"


# The C text of each statement and expression class: methods of _FunctionWriter, registered where defined.
_STMTS: TypeDispatch[_FunctionWriter, S.Stmt, None] = TypeDispatch()
_EXPRS: TypeDispatch[_FunctionWriter, E.PrimExpr, str] = TypeDispatch()


class _FunctionWriter:
    def __init__(self, gen: CodeGenC, func: S.PrimFunc, ns: Namespace | None = None) -> None:
        self.gen = gen
        self.func = func
        self.ns = function_namespace(func) if ns is None else ns
        self.lines: list[str] = []
        self.indent = 1
        self.nonneg: set[int] = set()  # ids of variables known to be >= 0
        self.scalars: set[int] = set()  # ids of 1-element local buffers held in scalars
        self.const_buffers: set[int] = set()  # ids of read-only parameters
        self._collapsed_inner: S.For | None = None  # inner loop of the last collapsed parallel pair
        self._workspace: list[str] = []  # run-time scratch live here, freed by an early return
        self._parallel_depth = 0  # OpenMP loops forbid `return` inside them
        self._scratch_failed: str | None = None  # set when run-time scratch inside a parallel loop failed

    def write(self) -> None:
        f = self.func
        self.const_buffers.update(id(b) for b in f.params[: f.num_inputs])
        params = _param_decls(f, lambda b: self.ns.name_of(b, b.name))
        signature = f"{EXPORT_MACRO} int32_t {f.name}({', '.join(params) or 'void'})"
        options = f.attrs.get(OPTIMIZE_ATTR)
        if isinstance(options, tuple) and options:
            # the options come from a fixed table (backend/kernel_flags.py); still, only plain flag
            # words ever reach the C text
            if not all(isinstance(o, str) and re.fullmatch(r"[A-Za-z0-9-]+", o) for o in options):
                raise CompileError(f"kernel {f.name}: optimize options {options!r} are not plain gcc flag words")
            quoted = ", ".join(f'"{o}"' for o in options)
            signature = f"__attribute__((optimize({quoted}))) {signature}"
        self.stmt(f.body)
        body = "\n".join(self.lines)
        self.gen._functions.append(f"{signature} {{\n{body}\n  return 0;\n}}")

    # ------------------------------------------------------------ statements
    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def stmt(self, s: S.Stmt) -> None:
        handler = _STMTS.get(type(s))
        if handler is None:
            raise CompileError(f"C codegen: unsupported statement {type(s).__name__}")
        handler(self, s)

    @_STMTS.register(S.For)
    def _for(self, s: S.For) -> None:
        var = self.ns.name_of(s.loop_var, s.loop_var.name)
        c = dt.c_type(s.loop_var.dtype)
        self.nonneg.add(id(s.loop_var))
        outermost_parallel = s.kind is S.ForKind.PARALLEL and not self._parallel_depth
        if outermost_parallel and _has_scratch(s.body):
            # each thread's scratch: a failed allocation skips the iteration, the kernel fails after the loop
            self._scratch_failed = self.ns.fresh("scratch_failed")
            self.emit(f"int32_t {self._scratch_failed} = 0;")
        if s.kind is S.ForKind.PARALLEL and s is not self._collapsed_inner:
            self.gen.note_parallel()
            if isinstance(s.body, S.For) and s.body.kind is S.ForKind.PARALLEL:
                self._collapsed_inner = s.body  # covered by this pragma
                self.emit(PARALLEL_FOR_2)
            else:
                self.emit(PARALLEL_FOR)
        elif s.kind is S.ForKind.UNROLLED:
            self.emit("#pragma GCC unroll 16")
        elif s.kind is S.ForKind.VECTORIZED:
            self.emit("#pragma GCC ivdep")
        self.emit(f"for ({c} {var} = 0; {var} < {self.expr(s.extent)}; ++{var}) {{")
        self.indent += 1
        parallel = s.kind is S.ForKind.PARALLEL
        self._parallel_depth += parallel
        self.stmt(s.body)
        self._parallel_depth -= parallel
        self.indent -= 1
        self.emit("}")
        if outermost_parallel and self._scratch_failed is not None:
            failed, self._scratch_failed = self._scratch_failed, None
            self.emit(f"if ({failed}) {{")
            self.indent += 1
            self._return_status("-1")
            self.indent -= 1
            self.emit("}")

    @_STMTS.register(S.SeqStmt)
    def _seq(self, s: S.SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    @_STMTS.register(S.BufferStore)
    def _store(self, s: S.BufferStore) -> None:
        self.emit(f"{self.lvalue(s.buffer, s.indices)} = {self.expr(s.value)};")

    @_STMTS.register(S.IfThenElse)
    def _if(self, s: S.IfThenElse) -> None:
        cond = self.expr(s.cond)
        if cond.startswith("(") and cond.endswith(")") and _balanced(cond[1:-1]):
            cond = cond[1:-1]
        self.emit(f"if ({cond}) {{")
        self.indent += 1
        self.stmt(s.then_case)
        self.indent -= 1
        if s.else_case is not None:
            self.emit("} else {")
            self.indent += 1
            self.stmt(s.else_case)
            self.indent -= 1
        self.emit("}")

    @_STMTS.register(S.Allocate)
    def _allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        name = self.ns.name_of(buf, buf.name)
        c = dt.c_type(buf.dtype)
        if buf.scope is Scope.LOCAL and buf.size == 1:
            self.scalars.add(id(buf))
            self.emit(f"{c} {name};")
            self.stmt(s.body)
            return
        if buf.scope is Scope.LOCAL:
            self.emit(f"{c} {name}[{buf.size}];")
            self.stmt(s.body)
            return
        self.gen.note_workspace()
        self.emit(
            f"{c}* {name} = ({c}*)TSBackendAllocWorkspace({buf.nbytes}u);"
        )
        if self._parallel_depth:  # (no return from inside an OpenMP loop)
            self.emit(f"if ({name} == NULL) {{ {self._scratch_failed} = 1; continue; }}")
            self.stmt(s.body)
        else:
            self.emit(f"if ({name} == NULL) return -1;")
            self._workspace.append(name)
            self.stmt(s.body)
            self._workspace.pop()
        self.emit(f"TSBackendFreeWorkspace({name});")

    @_STMTS.register(S.LetStmt)
    def _let(self, s: S.LetStmt) -> None:
        name = self.ns.name_of(s.var, s.var.name)
        self.emit(f"const {dt.c_type(s.var.dtype)} {name} = {self.expr(s.value)};")
        self.stmt(s.body)

    @_STMTS.register(S.Evaluate)
    def _evaluate(self, s: S.Evaluate) -> None:
        self.emit(f"{self.expr(s.value)};")

    @_STMTS.register(S.Return)
    def _return(self, s: S.Return) -> None:
        if self._parallel_depth:
            raise CompileError(f"kernel {self.func.name}: cannot return from inside a parallel loop")
        value = self.expr(s.value)
        if isinstance(s.value, E.IntImm) and is_status(s.value.value):
            self.gen.note_status()
            value = Status(s.value.value).c_name  # the header's name, not a bare number
        self._return_status(value)

    def _return_status(self, value: str) -> None:
        for name in reversed(self._workspace):  # an early return still frees, innermost first
            self.emit(f"TSBackendFreeWorkspace({name});")
        self.emit(f"return {value};")

    # ----------------------------------------------------------- expressions
    def lvalue(self, buf: Buffer, indices: Iterable[E.PrimExpr]) -> str:
        name = self.ns.name_of(buf.root, buf.root.name)
        if id(buf.root) in self.scalars:
            return name
        index = self.expr(flat_index(buf, tuple(indices)))
        if buf.dtype != buf.root.dtype or buf.total_byte_offset:
            # a typed region of a byte pool (the AOT executor copying a weight to an output)
            return f"{self._buffer_ptr(E.BufferPtr(buf, E.IntImm(0)))}[{index}]"
        return f"{name}[{index}]"

    def expr(self, e: E.PrimExpr) -> str:
        handler = _EXPRS.get(type(e))
        if handler is None:
            raise CompileError(f"C codegen: unsupported expression {type(e).__name__}")
        return handler(self, e)

    @_EXPRS.register(E.Var)
    def _var(self, e: E.Var) -> str:
        return self.ns.name_of(e, e.name)

    @_EXPRS.register(E.IntImm)
    def _int(self, e: E.IntImm) -> str:
        return int_literal(e.value, e.dtype)

    @_EXPRS.register(E.FloatImm)
    def _float(self, e: E.FloatImm) -> str:
        return float_literal(e.value, e.dtype)

    @_EXPRS.register(E.BufferLoad)
    def _load(self, e: E.BufferLoad) -> str:
        return self.lvalue(e.buffer, e.indices)

    @_EXPRS.register(E.BufferPtr)
    def _buffer_ptr(self, e: E.BufferPtr) -> str:
        buf, root = e.buffer, e.buffer.root
        name = self.ns.name_of(root, root.name)
        if buf.dtype != root.dtype or buf.total_byte_offset:
            # a typed region of a byte pool: offset in bytes, then cast
            const = "const " if id(root) in self.const_buffers else ""
            base = f"({name} + {buf.total_byte_offset})" if buf.total_byte_offset else name
            name = f"(({const}{dt.c_type(buf.dtype)}*){base})"
        if E.is_const(e.offset, 0):
            return name
        return f"({name} + {self.expr(e.offset)})"

    @_EXPRS.register(E.Cast)
    def _cast(self, e: E.Cast) -> str:
        if dt.is_storage_only(e.dtype) or dt.is_storage_only(e.value.dtype):
            return self._convert_storage(e)
        if e.dtype == "bool":
            return f"(({self.expr(e.value)}) != 0)"
        return f"(({dt.c_type(e.dtype)})({self.expr(e.value)}))"

    def _convert_storage(self, e: E.Cast) -> str:
        """A cast from or to float16/bfloat16 (uint16_t bits): through float, by the conversion helpers."""
        value, src = self.expr(e.value), e.value.dtype
        if dt.is_storage_only(src):
            value, src = f"{self.gen.declare_helper('from', src)}({value})", "float32"
        if dt.is_storage_only(e.dtype):
            self.gen.declare_helper("narrow", e.dtype)  # (what the narrowing helper calls, declared first)
            return f"{self.gen.declare_helper('to', e.dtype)}({value})"
        if e.dtype == "float32":
            return value
        if e.dtype == "bool":
            return f"(({value}) != 0)"
        return f"(({dt.c_type(e.dtype)})({value}))"

    @_EXPRS.register(E.Select)
    def _select(self, e: E.Select) -> str:
        if e.guarded:  # a C conditional evaluates only the chosen side
            return f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"
        helper = self.gen.declare_helper("select", e.dtype)
        return f"{helper}({self.expr(e.cond)}, {self.expr(e.true_value)}, {self.expr(e.false_value)})"

    @_EXPRS.register(E.UnaryOp)
    def _unary(self, e: E.UnaryOp) -> str:
        return f"({e.op.value}{self.expr(e.a)})"

    def is_nonneg(self, e: E.PrimExpr) -> bool:
        if isinstance(e, E.IntImm):
            return e.value >= 0
        if isinstance(e, E.Var):
            return id(e) in self.nonneg
        if isinstance(e, E.BinaryOp) and e.op in (
            E.BinOp.ADD, E.BinOp.MUL, E.BinOp.FLOORDIV, E.BinOp.FLOORMOD, E.BinOp.MIN, E.BinOp.MAX,
        ):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if isinstance(e, E.Cast):
            return not dt.is_float(e.value.dtype) and self.is_nonneg(e.value)
        return False

    @_EXPRS.register(E.BinaryOp)
    def _binary(self, e: E.BinaryOp) -> str:
        negated = _silu_argument(e)
        if negated is not None:  # SiLU, x / (1 + e^-x): x carries a NaN, so the denominator need not
            return f"({self.expr(e.a)} / {self._fast_math_helper('silu_denominator')}({self.expr(negated)}))"
        exponent = _one_plus_argument(e, E.Intrinsic.EXP)
        if exponent is not None:  # a sigmoid's denominator, in one helper cheaper than 1 + exp
            return f"{self._fast_math_helper('one_plus_exp')}({self.expr(exponent)})"
        tangent = _one_plus_argument(e, E.Intrinsic.TANH)
        if tangent is not None:  # tanh-GELU's 1 + tanh(u) = 2 / (1 + e^(-2u)): one exp, no cancellation near -1
            return f"(2.0f / {self._fast_math_helper('one_plus_exp')}((-2.0f * {self.expr(tangent)})))"
        a, b = self.expr(e.a), self.expr(e.b)
        d = e.a.dtype
        if dt.is_storage_only(d):  # uint16_t bits: C arithmetic on them would be silently wrong
            raise CompileError(f"C codegen: {e.op.value} of {d} values; {d} only holds values, kernels compute "
                               "in float32 (cast first)")
        is_float = dt.is_float(d)
        op = e.op
        if op in _PLAIN_BINOPS:
            return f"({a} {op.value} {b})"
        if op is E.BinOp.DIV:
            return f"({a} / {b})"
        saturated = _int8_saturated(e)
        if saturated is not None:
            return f"{self.gen.declare_helper('ssat8', d)}({self.expr(saturated)})"
        if op in (E.BinOp.MIN, E.BinOp.MAX):
            kind = ("min" if op is E.BinOp.MIN else "max")
            return f"{self.gen.declare_helper(kind, d)}({a}, {b})"
        if op in (E.BinOp.FLOORDIV, E.BinOp.FLOORMOD):
            if is_float:
                if op is E.BinOp.FLOORDIV:
                    return f"{_float_fn('floor', d)}({a} / {b})"
                return f"{self.gen.declare_helper('ffloormod', d)}({a}, {b})"
            if dt.is_unsigned(d) or (self.is_nonneg(e.a) and self.is_nonneg(e.b)):
                return f"({a} {'/' if op is E.BinOp.FLOORDIV else '%'} {b})"
            kind = "floordiv" if op is E.BinOp.FLOORDIV else "floormod"
            return f"{self.gen.declare_helper(kind, d)}({a}, {b})"
        if op is E.BinOp.TRUNCMOD:
            return f"{_float_fn('fmod', d)}({a}, {b})" if is_float else f"({a} % {b})"
        if op is E.BinOp.POW:
            if is_float:
                return f"{_float_fn('pow', d)}({a}, {b})"
            return f"{self.gen.declare_helper('ipow', d)}({a}, {b})"
        raise CompileError(f"C codegen: unsupported operator {op}")

    @_EXPRS.register(E.ElementMap)
    def _element_map(self, e: E.ElementMap) -> str:
        """The name of a function of this unit that runs the map on a block of elements (`rows` rows of
        `columns`, `ldc` apart), as an extern kernel calls it on the blocks of its output: the loop gcc
        vectorises, the body the C the tail's own pass would compute. Named by its text, so kernels with the
        same tail share one definition."""
        names = Namespace({*RESERVED_WORDS, "c", "ldc", "rows", "columns", "r", "q"})  # the loop's own
        writer = _FunctionWriter(self.gen, self.func, names)
        value = writer.ns.name_of(e.var, e.var.name)
        body = writer.expr(e.body)
        ctype = dt.c_type(e.var.dtype)
        name = f"ts_map_{hashlib.sha256(f'{ctype} {value} {body}'.encode()).hexdigest()[:12]}"
        self.gen.add_helper(name, f"""/* an elementwise tail, on a block of an extern kernel's output */
static void {name}({ctype}* c, int64_t ldc, int64_t rows, int64_t columns) {{
  for (int64_t r = 0; r < rows; ++r, c += ldc)
    for (int64_t q = 0; q < columns; ++q) {{
      const {ctype} {value} = c[q];
      c[q] = {body};
    }}
}}""")
        return name

    @_EXPRS.register(E.Call)
    def _call(self, e: E.Call) -> str:
        if e.func is E.Intrinsic.DOT_INT8:
            return self._dot_int8(e)
        if e.func is E.Intrinsic.DOT2_INT8:
            return self._dot2_int8(e)
        if e.func is E.Intrinsic.DOT2X2_INT8:
            return self._dot2x2_int8(e)
        if e.func is E.Intrinsic.DOT4_INT8:
            return self._dot4_int8(e)
        if e.func is E.Intrinsic.DOT_SLIDE2_INT8:
            return self._dot_slide2_int8(e)
        args = [self.expr(a) for a in e.args]
        if isinstance(e.func, str):
            gemm = GemmKernel.from_symbol(e.func)
            if gemm is not None:
                self.gen.declare_gemm(gemm, e.func)
            if e.func in ROW_KERNELS:
                self.gen.declare_library(row_function(e.func))
            pool = Pool2dKernel.from_symbol(e.func)
            if pool is not None:
                self.gen.declare_source(pool.symbol, pool2d_source(pool))
            return self.gen.emit_extern_call(e.func, args, e)
        d = e.args[0].dtype if e.args else e.dtype
        if d == "float32" and e.func.value in FAST_MATH:
            return f"{self._fast_math_helper(e.func.value)}({args[0]})"
        if e.func in FLOAT_INTRINSICS:
            return f"{_float_fn(FLOAT_INTRINSICS[e.func], d)}({', '.join(args)})"
        if e.func in CLASSIFY_INTRINSICS:
            return f"({CLASSIFY_INTRINSICS[e.func]}({args[0]}) != 0)"
        if e.func is E.Intrinsic.ABS:
            return f"{self.gen.declare_helper('iabs', d)}({args[0]})"
        raise CompileError(f"C codegen: unsupported intrinsic {e.func}")

    def _fast_math_helper(self, kind: str) -> str:
        """A polynomial float32 helper (c_fast_math), declared after the helpers it calls."""
        for dependency in FAST_MATH_DEPENDS[kind]:
            self.gen.declare_helper(dependency, "float32")
        return self.gen.declare_helper(kind, "float32")

    def _dot_int8(self, e: E.Call) -> str:
        """`ts_dot_int8(&a[i], &b[j], n, acc)`: the helper picks DSP or MVE instructions where the core has them."""
        self.gen.declare_helper("int8_simd", "int8")  # declared before any helper its arguments use
        helper = self.gen.declare_helper("dot", "int8")
        a, b, n, acc = e.args
        runs = [self._element_address(p) for p in (a, b)]
        acc_text = self.expr(acc)
        return f"{helper}({runs[0]}, {runs[1]}, {self.expr(n)}, {acc_text})"

    def _dot2_int8(self, e: E.Call) -> str:
        """`ts_dot2_int8(&a[i], &b0[j], &b1[k], n, &acc0, &acc1)`: two dot products updated in place."""
        self.gen.declare_helper("int8_simd", "int8")
        helper = self.gen.declare_helper("dot2", "int8")
        *ptrs, n, acc0, acc1 = e.args
        runs = [self._element_address(p) for p in ptrs]
        return f"{helper}({', '.join(runs)}, {self.expr(n)}, {self._scalar_addresses((acc0, acc1))})"

    def _dot2x2_int8(self, e: E.Call) -> str:
        """`ts_dot2x2_int8(&a[i], da, &b[j], db, n, &acc00, &acc01, &acc10, &acc11)`: two runs by two rows."""
        self.gen.declare_helper("int8_simd", "int8")
        helper = self.gen.declare_helper("dot2x2", "int8")
        a, da, b, db, n, *accs = e.args
        operands = [self._element_address(a), self.expr(da), self._element_address(b), self.expr(db), self.expr(n)]
        return f"{helper}({', '.join(operands)}, {self._scalar_addresses(accs)})"

    def _dot4_int8(self, e: E.Call) -> str:
        """`ts_dot4_int8(&a[i], &b[j], db, n, &acc0, &acc1, &acc2, &acc3)`: one run by four rows."""
        self.gen.declare_helper("int8_simd", "int8")
        helper = self.gen.declare_helper("dot4", "int8")
        a, b, db, n, *accs = e.args
        operands = [self._element_address(a), self._element_address(b), self.expr(db), self.expr(n)]
        return f"{helper}({', '.join(operands)}, {self._scalar_addresses(accs)})"

    def _dot_slide2_int8(self, e: E.Call) -> str:
        """`ts_dot_slide2_int8(&a[i], &b[j], n, &acc0, &acc1)`: two adjacent columns of a short run."""
        self.gen.declare_helper("int8_simd", "int8")
        helper = self.gen.declare_helper("dot_slide2", "int8")
        a, b, n, *accs = e.args
        operands = [self._element_address(a), self._element_address(b), self.expr(n)]
        return f"{helper}({', '.join(operands)}, {self._scalar_addresses(accs)})"

    def _scalar_addresses(self, accs: Sequence[E.PrimExpr]) -> str:
        """`&acc0, &acc1, ...`: the in-place accumulators of the dot helpers, which must be local scalars."""
        addresses = []
        for acc in accs:
            if not (isinstance(acc, E.BufferLoad) and id(acc.buffer.root) in self.scalars):
                raise CompileError(f"C codegen: int8 dot helpers accumulate into local scalars, got {acc}")
            addresses.append(f"&{self.expr(acc)}")
        return ", ".join(addresses)

    def _element_address(self, p: E.PrimExpr) -> str:
        if not isinstance(p, E.BufferPtr):
            raise CompileError(f"C codegen: dot_int8 takes buffer pointers, got {type(p).__name__}")
        root = p.buffer.root
        return f"&{self.ns.name_of(root, root.name)}[{self.expr(p.offset)}]"


def _one_plus_argument(e: E.BinaryOp, intrinsic: E.Intrinsic) -> E.PrimExpr | None:
    """y when `e` is the float32 sum 1 + f(y) (either order) of the `intrinsic` f, which c_fast_math computes
    through one helper (1 + exp) for exp and tanh."""
    if e.op is not E.BinOp.ADD or e.dtype != "float32":
        return None
    for one, call in ((e.a, e.b), (e.b, e.a)):
        if (isinstance(one, E.FloatImm) and one.value == 1.0 and isinstance(call, E.Call)
                and call.func is intrinsic and call.args[0].dtype == "float32"):
            return call.args[0]
    return None


def _silu_argument(e: E.BinaryOp) -> E.PrimExpr | None:
    """-x when `e` is the float32 SiLU x / (1 + exp(-x)), with the same x (structurally) on both sides."""
    if e.op is not E.BinOp.DIV or e.dtype != "float32" or not isinstance(e.b, E.BinaryOp):
        return None
    exponent = _one_plus_argument(e.b, E.Intrinsic.EXP)
    if isinstance(exponent, E.UnaryOp) and exponent.op is E.UnOp.NEG and exponent.a == e.a:
        return exponent
    return None


def _int8_saturated(e: E.BinaryOp) -> E.PrimExpr | None:
    """x when `e` is int32 `min(max(x, -128), 127)` (requantisation's clamp: one SSAT where the core has it)."""
    inner = e.a
    if (e.op is E.BinOp.MIN and e.dtype == "int32" and E.is_const(e.b, 127)
            and isinstance(inner, E.BinaryOp) and inner.op is E.BinOp.MAX and E.is_const(inner.b, -128)):
        return inner.a
    return None


def _balanced(text: str) -> bool:
    """True when `text` has no parenthesis closing before it opened (so outer ones can go)."""
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _float_fn(name: str, dtype: str) -> str:
    return name + "f" if dtype == "float32" else name


def _has_scratch(s: S.Stmt) -> bool:
    """Does `s` allocate run-time (global-scope) scratch?"""
    return any(isinstance(x, S.Allocate) and x.buffer.scope is Scope.GLOBAL for x in S.walk_stmts(s))
