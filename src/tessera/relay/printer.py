"""Text form of Relay programs: `print(mod)` shows each binding with its type.

    def @main(%x: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {
      %0 = nn.relu(%x) /* ty=Tensor[(1, 3), float32] */;
      %0
    }
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .expr import Call, Constant, Expr, Function, GlobalVar, Let, Tuple, TupleGetItem, Var
from .op import attrs_as_dict
from .ty import FuncType, Type
from .visitor import post_order

if TYPE_CHECKING:  # the module imports the printer
    from .module import IRModule


def _attr_value(v: object) -> str:
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_attr_value(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _attrs_text(attrs: object) -> str:
    return ", ".join(f"{k}={_attr_value(v)}" for k, v in attrs_as_dict(attrs).items())


def _const_text(c: Constant) -> str:
    data = c.data
    if data.size == 1:
        value = data.reshape(()).item()
        suffix = "f" if data.dtype == np.float32 else ""
        text = f"{value}{suffix}" if data.dtype.kind == "f" else f"{value}"
        return text if data.ndim == 0 else f"meta.const({text}, shape={list(data.shape)})"
    return f"meta.const(<{data.dtype.name} {'x'.join(map(str, data.shape))}>)"


Note = Callable[[Expr], "str | None"]


class _Printer:
    def __init__(self, note: Note | None = None) -> None:
        self.var_names: dict[int, str] = {}
        self.used_var_names: set[str] = set()
        self.note = note  # an optional comment for the line that defines a node

    def noted(self, node: Expr, line: str) -> str:
        text = self.note(node) if self.note is not None else None
        return line if text is None else f"{line}  // {text}"

    def var_name(self, v: Var) -> str:
        if id(v) not in self.var_names:
            base = v.name_hint or "v"
            name, k = base, 1
            while name in self.used_var_names:
                name = f"{base}_{k}"
                k += 1
            self.used_var_names.add(name)
            self.var_names[id(v)] = name
        return "%" + self.var_names[id(v)]

    def param_list(self, f: Function) -> str:
        parts = []
        for p in f.params:
            ty = p.type_annotation or p.checked_type_
            parts.append(f"{self.var_name(p)}: {ty}" if ty else self.var_name(p))
        return ", ".join(parts)

    def function(self, f: Function, head: str, indent: str) -> list[str]:
        ret_type = f.ret_type
        if ret_type is None and isinstance(f.checked_type_, FuncType):
            ret_type = f.checked_type_.ret_type
        ret = f" -> {ret_type}" if ret_type is not None else ""
        attrs = self.func_attrs(f)
        lines = [self.noted(f, f"{head}({self.param_list(f)}){ret}{attrs} {{")]
        body_lines, result = self.body(f.body, indent + "  ")
        lines += body_lines
        lines.append(f"{indent}  {result}")
        lines.append(f"{indent}}}")
        return lines

    @staticmethod
    def func_attrs(f: Function) -> str:
        a = f.attrs
        parts = []
        if a.primitive:
            parts.append("Primitive=1")
        if a.compiler:
            parts.append(f'Compiler="{a.compiler}"')
        if a.composite:
            parts.append(f'Composite="{a.composite}"')
        if a.global_symbol:
            parts.append(f'global_symbol="{a.global_symbol}"')
        parts += [f'{key}="{value}"' for key, value in sorted(a.extra.items())]
        return f" /* {', '.join(parts)} */" if parts else ""

    def body(self, root: Expr, indent: str) -> tuple[list[str], str]:
        names: dict[int, str] = {}
        lines: list[str] = []
        counter = 0
        for node in post_order(root, into_functions=False):
            if isinstance(node, Var):
                names[id(node)] = self.var_name(node)
                continue
            if isinstance(node, GlobalVar):
                names[id(node)] = "@" + node.name_hint
                continue
            if isinstance(node, Constant) and node.data.size == 1 and node.data.ndim == 0:
                names[id(node)] = _const_text(node)
                continue
            name = f"%{counter}"
            counter += 1
            if isinstance(node, Function):
                fn_lines = self.function(node, "fn ", indent)
                lines += [f"{indent}{name} = " + fn_lines[0].lstrip(), *fn_lines[1:]]
                lines[-1] += ";"
            else:
                ty = node.checked_type_
                ty_text = f" /* ty={ty} */" if ty is not None else ""
                line = f"{indent}{name} = {self.node_text(node, names)}{ty_text};"
                lines.append(self.noted(node, line) if node is not root else line)
            names[id(node)] = name
        if lines and lines[-1].startswith(f"{indent}{names[id(root)]} = ") and not isinstance(root, Function):
            last = lines.pop()
            return lines, self.noted(root, last[len(indent) + len(names[id(root)]) + 3 : -1])
        return lines, names[id(root)]

    def node_text(self, node: Expr, names: dict[int, str]) -> str:
        """One line for a node other than a Function (those take several, from `function`)."""
        if isinstance(node, Constant):
            return _const_text(node)
        if isinstance(node, Call):
            args = [names[id(a)] for a in node.args]
            if isinstance(node.op, (Function, GlobalVar)):
                head = names[id(node.op)]
            else:
                head = node.op.name
                attrs = _attrs_text(node.attrs)
                if attrs:
                    args.append(attrs)
            return f"{head}({', '.join(args)})"
        if isinstance(node, Tuple):
            inner = ", ".join(names[id(f)] for f in node.fields)
            return f"({inner},)" if len(node.fields) == 1 else f"({inner})"
        if isinstance(node, TupleGetItem):
            return f"{names[id(node.tuple_value)]}.{node.index}"
        if isinstance(node, Let):
            return f"let {names[id(node.var)]} = {names[id(node.value)]}; {names[id(node.body)]}"
        return repr(node)


def expr_str(e: Expr, note: Note | None = None) -> str:
    """The text of `e`; `note(node)` may return a comment for the line that defines `node`."""
    p = _Printer(note)
    if isinstance(e, Function):
        return "\n".join(p.function(e, "fn ", ""))
    lines, result = p.body(e, "")
    return "\n".join(lines + [result])


def module_str(mod: IRModule) -> str:
    from ..tir.printer import primfunc_str
    from ..tir.stmt import PrimFunc

    chunks = []
    for gv, func in sorted(mod.items(), key=lambda kv: (kv[0].name_hint != "main", kv[0].name_hint)):
        if isinstance(func, PrimFunc):
            chunks.append(primfunc_str(func))
        else:
            chunks.append("\n".join(_Printer().function(func, f"def @{gv.name_hint}", "")))
    return "\n\n".join(chunks)


def type_str(t: Type) -> str:
    return str(t)
