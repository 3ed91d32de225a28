"""Human-readable descriptions of target kinds, for `tessera targets`."""

from __future__ import annotations

from .hooks import FIELDS
from .kind import KINDS, TargetKind
from .tags import TAGS


def _default_text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def describe_kind(kind: TargetKind) -> str:
    role = "accelerator (use inside a host's 'accelerators')" if kind.accelerator else "host"
    lines = [f"{kind.name}: {kind.doc or '(no description)'}",
             f"  device: {kind.device}    role: {role}    default keys: {', '.join(kind.default_keys)}"]
    lines.append("  attributes:")
    width = max(len(o.name) for o in kind.options.values())
    for opt in kind.options.values():
        choices = f" (one of {', '.join(opt.choices)})" if opt.choices else ""
        lines.append(f"    -{opt.name:<{width}}  {opt.type.value:<14} default {_default_text(opt.default):<8} "
                     f"{opt.doc}{choices}")
    provided = set(kind.provided_fields())
    hooks = [f.hook for f in FIELDS if f.hook is not None and f.name in provided]
    lines.append(f"  hooks: {', '.join(hooks) if hooks else '(none: the standard pipeline)'}")
    data = [f.name for f in FIELDS if not f.hook and f.name in provided]
    lines.append(f"  fields: {', '.join(data) if data else '(all defaults)'}")
    lines.append(f"  from: {kind.origin}")
    return "\n".join(lines)


def describe_all() -> str:
    chunks = [describe_kind(k) for k in KINDS]
    if TAGS.names():
        aliases = [f"  {name}: {TAGS.get(name)}" + (f"  ({TAGS.doc(name)})" if TAGS.doc(name) else "")
                   for name in TAGS.names()]
        chunks.append("aliases:\n" + "\n".join(aliases))
    return "\n\n".join(chunks)
