"""What `tessera.build(..., executor="aot")` returns, and how it leaves.

An `AotLibrary` holds every file of the deployable model: generated kernels,
the executor, the entry points and header, the weights blob, and the CRT.
`export_library("model.tar")` writes them as a Model Library Format tarball
with `metadata.json`; `run_host(...)` and `run_board(...)` compile a test
program around the model and run it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...util.version import __version__
from ...crt import INCLUDE_DIR, source as crt_source
from ...relay.module import IRModule
from ...target.named import CompilationConfig
from ...target.target import Target
from ...target.toolchain import SourceFile, Toolchain
from .mlf_archive import with_manifest, write_folder, write_tar
from .runner import BoardRun, Signature, TensorSig, run_on_board, run_on_host
from ..concat_views import view_only_kernels
from .c_names import tensor_fields
from .interface import header, header_name, params_file, params_source, source
from ..lift_workspace import workspace_params
from .plan import AotProgram, kernel_statuses

MLF_VERSION = 1
CRT_HEADERS = ("c_backend_api.h", "c_runtime_api.h")
CRT_SOURCES = ("workspace_stack.c",)


@dataclass
class PieceCode:
    """The kernels of one named piece other than the host, built by its own toolchain."""

    name: str
    target: Target
    toolchain: Toolchain
    sources: list[SourceFile]

    @property
    def folder(self) -> str:
        return f"codegen/{self.name}"


@dataclass
class AotLibrary:
    program: AotProgram
    target: Target
    toolchain: Toolchain
    kernel_sources: list[SourceFile]  # generated kernels and the executor
    relay_text: str = ""
    python_seconds: float = 0.0
    source_model: bytes | None = None  # the ONNX model it came from, kept for `tessera run --check`
    partitioned_mod: IRModule | None = None  # the Relay module after partitioning, for reports
    link_flags: list[str] = field(default_factory=lambda: ["-lm"])  # what the final link needs
    pieces: dict[str, PieceCode] = field(default_factory=dict)  # named pieces other than the host
    config: CompilationConfig | None = None  # the named pieces of a named compilation

    @property
    def name(self) -> str:
        return self.program.name

    # ------------------------------------------------------------ contents
    def sources(self) -> list[SourceFile]:
        """Every generated C file (kernels, executor, entry points, weights)."""
        p = self.program
        return [*self.kernel_sources,
                SourceFile(f"tsgen_{p.name}_interface.c", source(p)),
                SourceFile(f"tsgen_{p.name}_params.c", params_source(p), cacheable=False)]

    def header(self) -> str:
        return header(self.program)

    def metadata(self) -> dict:
        p = self.program
        field = tensor_fields(p)
        uncalled = view_only_kernels(p.steps)  # the copies of concatenations computed in place: not built
        tensors = lambda ts: [  # noqa: E731
            {"name": t.name, "c_name": field[t], "dtype": t.type.dtype, "shape": list(t.type.shape),
             "size_bytes": t.nbytes} for t in ts
        ]
        return {
            "version": MLF_VERSION,
            "tessera_version": __version__,
            "model_name": p.name,
            "executor": "aot",
            "interfaces": ["c", "packed"],
            "target": str(self.target),
            "targets": self._targets(),
            "toolchain": {"cc": self.toolchain.cc, "cflags": list(self.toolchain.cflags),
                          "link_flags": list(self.link_flags)},
            "inputs": tensors(p.inputs),
            "outputs": tensors(p.outputs),
            "pools": [
                *({"name": pool.name, "size_bytes": pool.size, "limit_bytes": pool.spec.size_bytes,
                   "targets": list(pool.spec.targets), "contents": "intermediate tensors and kernel scratch",
                   "planner": pool.plan.algorithm, "lower_bound_bytes": pool.plan.lower_bound}
                  for pool in p.pools),
                {"name": "workspace", "size_bytes": p.workspace_size, "contents": "run-time kernel scratch"},
            ],
            "lower_bound_bytes": p.planned.lower_bound,
            "file_order_lower_bound_bytes": p.planned.file_order_bound,
            "operator_order": p.order_strategy,
            "in_place_outputs": p.planned.inplace,
            "concat_views": p.planned.views,  # concatenations whose parts are computed in them (no call)
            "params_bytes": p.params_size,
            "kernels": [{"name": k, "workspace_bytes": p.workspace.get(k, 0),
                         "planned_scratch_bytes": sum(b.nbytes for b in workspace_params(p.kernels[k])),
                         "error_statuses": kernel_statuses(p.kernels[k])}
                        for k in sorted(p.kernels) if k not in uncalled],
            "steps": len(p.steps),  # views included
            "calls": sum(1 for s in p.steps if not s.view),
        }

    def _targets(self) -> dict[str, object]:
        if self.config is None:
            return {"host": str(self.target)}
        host_name = self.config.host_name
        return {name: {"target": str(t), "folder": "codegen/host" if name == host_name else f"codegen/{name}",
                       "host": name == host_name}
                for name, t in self.config.pieces.items()}

    def compile_pieces(self, workdir: Path) -> dict[str, list[Path]]:
        """Compile each piece's kernels with that piece's own toolchain; piece -> object files.

        The host piece's folder also holds the executor, which it runs. (A
        board run links one image for the board's CPU; this is how a
        multi-core build would compile each core's share.)
        """
        host_name = self.config.host_name if self.config is not None else "host"
        shares = [(host_name, self.toolchain, self.kernel_sources)]
        shares += [(p.name, p.toolchain, p.sources) for p in self.pieces.values()]
        objects: dict[str, list[Path]] = {}
        for name, toolchain, sources in shares:
            out = workdir / name
            out.mkdir(parents=True, exist_ok=True)
            objects[name] = [toolchain.compile_object(s, out) for s in sources]
        return objects

    def files(self) -> dict[str, bytes]:
        """The Model Library Format layout, path -> content."""
        out: dict[str, bytes] = {"metadata.json": json.dumps(self.metadata(), indent=2, sort_keys=True).encode()}
        for s in self.sources():
            out[f"codegen/host/src/{s.name}"] = s.text.encode()
        for piece in self.pieces.values():
            for s in piece.sources:
                out[f"{piece.folder}/src/{s.name}"] = s.text.encode()
        out[f"codegen/host/src/{params_file(self.program)}"] = self.program.params_blob()
        out[f"codegen/host/include/{header_name(self.program)}"] = self.header().encode()
        for name in CRT_HEADERS:
            out[f"runtime/include/tessera/{name}"] = (INCLUDE_DIR / "tessera" / name).read_bytes()
        for name in CRT_SOURCES:
            out[f"runtime/src/{name}"] = crt_source(name).read_bytes()
        out["src/relay.txt"] = self.relay_text.encode()
        if self.source_model is not None:
            out["src/model.onnx"] = self.source_model
        out["README.txt"] = _readme(self.program).encode()
        return out

    def export_library(self, path: str | Path) -> Path:
        """Write a Model Library Format tarball (.tar) or folder, atomically, with its SHA256SUMS."""
        path = Path(path)
        files = with_manifest(self.files())
        return write_tar(files, path) if path.suffix == ".tar" else write_folder(files, path)

    # --------------------------------------------------------------- runs
    @property
    def signature(self) -> Signature:
        p = self.program
        return Signature(p.name, tuple(TensorSig(t.name, t.type) for t in p.inputs),
                         tuple(TensorSig(t.name, t.type) for t in p.outputs),
                         tuple((k, tuple(kernel_statuses(f))) for k, f in sorted(p.kernels.items())))

    def run_host(self, inputs: Sequence[np.ndarray], toolchain: Toolchain | None = None) -> list[np.ndarray]:
        """Compile the model and a test main with the host gcc, run it, return the outputs."""
        from ...target.builtin import c_toolchain

        with tempfile.TemporaryDirectory(prefix="tessera-aot-") as tmp:
            folder = self.export_library(Path(tmp))
            return run_on_host(folder, self.signature, inputs, toolchain or c_toolchain(Target("c")))

    def run_board(self, board: str, inputs: Sequence[np.ndarray], count_instructions: bool = False,
                  timeout: float = 600) -> tuple[list[np.ndarray], BoardRun]:
        """Build for an emulated Cortex-M board, run under QEMU; returns (outputs, BoardRun)."""
        with tempfile.TemporaryDirectory(prefix="tessera-board-") as tmp:
            folder = self.export_library(Path(tmp))
            return run_on_board(folder, self.signature, board, inputs, count_instructions, timeout)


def _readme(program: AotProgram) -> str:
    m = program.name
    return f"""Model Library Format, generated by tessera {__version__}: model '{m}'.

codegen/host/include/tsgen_{m}.h   the C interface (tsgen_{m}_run, pool sizes, shapes)
codegen/host/src/                 kernels, executor, entry points, weights (.incbin of {params_file(program)})
runtime/                          the tessera C runtime (headers, workspace allocator)
metadata.json                     inputs, outputs, pools and their sizes, per-kernel workspace
SHA256SUMS                        a checksum of every other file (check: sha256sum -c SHA256SUMS)

Build (any C compiler; the assembler must find the weights file; link with
the libraries metadata.json lists under toolchain.link_flags):
  cc -Icodegen/host/include -Iruntime/include -Wa,-Icodegen/host/src \\
     codegen/host/src/*.c runtime/src/*.c your_main.c -lm
"""
