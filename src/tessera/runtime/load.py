"""Load a library written by `export_library`, checking every layer before trusting the next.

Layers of the file (see `export.py` for how they are written):
1. a checksum trailer over the whole linked object (`library_file`),
   checked before the dynamic loader sees the file;
2. `tessera_payload_sha256()`, the digest of the three embedded blobs,
   checked on the bytes the accessors return;
3. the graph JSON and the parameter blobs, each parsed defensively.
Every failure is an `ArtifactError` naming the file. The checked bytes are
loaded from a private copy, so replacing or truncating the file later
cannot crash (SIGBUS) or alter a process that has it loaded.

Loading imports nothing of the compiler: a deployed model needs only the
runtime package (and the package of any external module it holds).
"""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np

from ..errors import ArtifactError, TesseraError
from .external import ExternalModule, load_external
from .graph_json import GraphJson, check_params, parse_graph_json
from .graph_library import GraphExecutorLibrary
from .library_file import check_library_bytes
from .output_stage import OutputStage
from .params_blob import load_params
from .payload import BLOBS, EXTERNAL_KEY, EXTERNAL_KEY_FORMS, payload_digest
from .shared_library import SharedLibrary


def load_module(path: str | Path) -> GraphExecutorLibrary:
    """Load a library written by `export_library`, checking every layer of the file first."""
    path = Path(path)
    payload = check_library_bytes(_read_file(path), path)
    so = _load_private_copy(payload, path)
    blobs = {name: _read_blob(so, name, path) for name in BLOBS}
    _check_payload(so, blobs, path)
    graph = parse_graph_json(blobs["graph_json"], f"{path} (graph JSON)")
    params = load_params(blobs["params"], f"{path} (parameters)")
    check_params(graph, params, f"{path} (graph JSON)")
    packed = load_params(blobs["external"], f"{path} (external modules)")
    stage_bytes = packed.pop("stage", None)
    modules, constants = _unpack_external(packed, path)
    _check_functions(graph, so, modules, path)
    stage = None
    if stage_bytes is not None:
        stage = OutputStage.from_bytes(stage_bytes.tobytes(), f"{path} (output stage)")
        stage.check(len(graph["outputs"]), f"{path} (output stage)")
        if not any(stage.function in m.function_names() for m in modules):
            raise ArtifactError(f"{path}: the output stage runs {stage.function!r}, which no external module defines")
    names = [graph["nodes"][n]["name"] for n in graph["inputs"]]
    return GraphExecutorLibrary(blobs["graph_json"].decode(), params, None, so,
                                input_names=names, external_modules=modules, external_constants=constants,
                                output_stage=stage)


def _unpack_external(packed: dict[str, np.ndarray], path: Path
                     ) -> tuple[list[ExternalModule], dict[str, dict[str, np.ndarray]]]:
    saved: list[tuple[int, str, bytes]] = []
    constants: dict[str, dict[str, np.ndarray]] = {}
    providers: dict[str, str] = {}
    for key, value in packed.items():
        match = EXTERNAL_KEY.fullmatch(key)
        if match is None:
            raise ArtifactError(f"{path} (external modules): unexpected entry {key[:60]!r}, expected "
                                f"{EXTERNAL_KEY_FORMS}")
        index, type_key, symbol, name, provided, _ = match.groups()  # (the stage was taken out before)
        if index is not None:
            saved.append((int(index), type_key, value.tobytes()))
        elif provided is not None:
            providers[provided] = value.tobytes().decode("utf-8", "replace")
        else:
            constants.setdefault(symbol, {})[name] = value
    modules = []
    for _, type_key, data in sorted(saved):
        try:
            modules.append(load_external(type_key, data, providers.get(type_key)))
        except TesseraError:
            raise
        except Exception as exc:  # a module's own loader: any failure means its saved bytes are damaged
            raise ArtifactError(f"{path}: the saved {type_key!r} module cannot be read back "
                                f"({type(exc).__name__}: {exc})") from None
    for module in modules:
        for symbol in module.function_names():
            if symbol in constants:
                module.bind_constants(constants[symbol])
    return modules, constants


def _read_blob(so: SharedLibrary, name: str, path: Path) -> bytes:
    if not (so.has_symbol(f"tessera_{name}_data") and so.has_symbol(f"tessera_{name}_size")):
        raise ArtifactError(f"{path} is not a library exported by tessera (it has no {name})")
    data, size = so.kernel(f"tessera_{name}_data"), so.kernel(f"tessera_{name}_size")
    data.restype = ctypes.c_void_p
    size.restype = ctypes.c_uint64
    return ctypes.string_at(data(), size())


def _check_payload(so: SharedLibrary, blobs: dict[str, bytes], path: Path) -> None:
    if not so.has_symbol("tessera_payload_sha256"):
        raise ArtifactError(f"{path} has no payload checksum: exported by an older tessera; export it again")
    stored = so.kernel("tessera_payload_sha256")
    stored.restype = ctypes.c_char_p
    expected = (stored() or b"").decode("ascii", "replace")
    if payload_digest(blobs) != expected:
        raise ArtifactError(f"{path}: the embedded graph and parameters do not match their checksum "
                            f"({payload_digest(blobs)[:16]}... vs {expected[:16]}...): the library is damaged")


def _read_file(path: Path) -> bytes:
    if path.is_dir():
        raise ArtifactError(f"{path} is a folder, expected a library file (.so) written by export_library")
    if not path.is_file():
        raise ArtifactError(f"no such library: {path}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_private_copy(payload: memoryview, path: Path) -> SharedLibrary:
    """dlopen exactly the checked bytes: a private copy, removed once mapped.

    The dynamic loader would also return an older library already loaded
    under the same path; a fresh name avoids that too.
    """
    with tempfile.TemporaryDirectory(prefix="tessera-load-") as tmp:
        copy = Path(tmp) / "library.so"
        copy.write_bytes(payload)
        try:
            so = SharedLibrary(copy)
        except OSError as exc:
            raise ArtifactError(f"{path}: the dynamic loader refused it: {exc}") from None
    so.path = path  # messages name the user's file
    return so


def _check_functions(graph: GraphJson, so: SharedLibrary, modules: list[ExternalModule], path: Path) -> None:
    external = {name for m in modules for name in m.function_names()}
    wanted = [n["func"] for n in graph["nodes"] if n["op"] == "kernel"] + [s["func"] for s in graph.get("segments", [])]
    missing = sorted({f for f in wanted if f not in external and not so.has_symbol(f)})
    if missing:
        raise ArtifactError(f"{path}: the graph calls {', '.join(missing[:5])}, which the library does not define")
