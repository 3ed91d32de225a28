"""What `tessera.build(..., executor="aot")` returns, and how it leaves.

An `AotLibrary` holds every file of the deployable model: generated kernels,
the executor, the entry points and header, the weights blob, and the CRT.
`export_library("model.tar")` writes them as a Model Library Format tarball
with `metadata.json`; `run_host(...)` and `run_board(...)` compile a test
program around the model and run it.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ... import __version__
from ...crt import INCLUDE_DIR, source as crt_source
from ...errors import CompileError, RuntimeExecutionError
from ...target.target import Target
from ...target.toolchain import SourceFile, Toolchain
from .harness import main_source, parse_outputs
from .interface import header, header_name, params_file, params_source, source
from .plan import AotProgram

MLF_VERSION = 1
CRT_HEADERS = ("c_backend_api.h", "c_runtime_api.h")
CRT_SOURCES = ("workspace_stack.c",)


@dataclass
class AotLibrary:
    program: AotProgram
    target: Target
    toolchain: Toolchain
    kernel_sources: list[SourceFile]  # generated kernels and the executor
    relay_text: str = ""
    python_seconds: float = 0.0
    extra: dict = field(default_factory=dict)

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
        tensors = lambda ts: [  # noqa: E731
            {"name": t.name, "dtype": t.type.dtype, "shape": list(t.type.shape), "size_bytes": t.nbytes} for t in ts
        ]
        return {
            "version": MLF_VERSION,
            "tessera_version": __version__,
            "model_name": p.name,
            "executor": "aot",
            "interfaces": ["c", "packed"],
            "target": str(self.target),
            "targets": {"host": str(self.target)},
            "toolchain": {"cc": self.toolchain.cc, "cflags": list(self.toolchain.cflags)},
            "inputs": tensors(p.inputs),
            "outputs": tensors(p.outputs),
            "pools": [
                {"name": "pool", "size_bytes": p.pool_size, "contents": "intermediate tensors",
                 "planner": p.memory.algorithm, "lower_bound_bytes": p.memory.lower_bound},
                {"name": "workspace", "size_bytes": p.workspace_size, "contents": "kernel scratch"},
            ],
            "lower_bound_bytes": p.memory.lower_bound,
            "params_bytes": p.params_size,
            "kernels": [{"name": k, "workspace_bytes": p.workspace.get(k, 0)} for k in sorted(p.kernels)],
            "steps": len(p.steps),
        }

    def files(self) -> dict[str, bytes]:
        """The Model Library Format layout, path -> content."""
        out: dict[str, bytes] = {"metadata.json": json.dumps(self.metadata(), indent=2, sort_keys=True).encode()}
        for s in self.sources():
            out[f"codegen/host/src/{s.name}"] = s.text.encode()
        out[f"codegen/host/src/{params_file(self.program)}"] = self.program.params_blob()
        out[f"codegen/host/include/{header_name(self.program)}"] = self.header().encode()
        for name in CRT_HEADERS:
            out[f"runtime/include/tessera/{name}"] = (INCLUDE_DIR / "tessera" / name).read_bytes()
        for name in CRT_SOURCES:
            out[f"runtime/src/{name}"] = crt_source(name).read_bytes()
        out["src/relay.txt"] = self.relay_text.encode()
        out["README.txt"] = _readme(self.program).encode()
        return out

    def export_library(self, path: str | Path) -> Path:
        """Write a Model Library Format tarball (.tar) or directory."""
        path = Path(path)
        files = self.files()
        if path.suffix == ".tar":
            path.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path, "w") as tar:
                for name, data in sorted(files.items()):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
            return path
        for name, data in files.items():
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return path

    # --------------------------------------------------------------- runs
    def write_project(self, folder: Path, inputs: Sequence[np.ndarray], pool_attribute: str = "") -> list[Path]:
        """Model files plus a test main into `folder`; returns the C files to compile."""
        self.export_library(folder)
        main = folder / "main.c"
        main.write_text(main_source(self.program, inputs, pool_attribute))
        return [*sorted((folder / "codegen/host/src").glob("*.c")), *sorted((folder / "runtime/src").glob("*.c")), main]

    def include_flags(self, folder: Path) -> list[str]:
        return [f"-I{folder / 'codegen/host/include'}", f"-I{folder / 'runtime/include'}",
                f"-Wa,-I{folder / 'codegen/host/src'}"]

    def run_host(self, inputs: Sequence[np.ndarray], toolchain: Toolchain | None = None) -> list[np.ndarray]:
        """Compile the model and a test main with the host gcc, run it, return the outputs."""
        from ...target.builtin import c_toolchain

        tc = toolchain or c_toolchain(Target("c"))
        self._check_inputs(inputs)
        with tempfile.TemporaryDirectory(prefix="tessera-aot-") as tmp:
            folder = Path(tmp)
            files = self.write_project(folder, inputs)
            exe = folder / "model"
            cmd = [tc.cc, *tc.cflags, *tc.warning_flags, *tc._werror(), *self.include_flags(folder),
                   *map(str, files), "-o", str(exe), "-lm"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"host build of AOT model {self.name} failed:\n{proc.stderr[-4000:]}")
            run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                raise RuntimeExecutionError(f"AOT model {self.name} exited with {run.returncode}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
            return parse_outputs(self.program, run.stdout)

    def run_board(self, board: str, inputs: Sequence[np.ndarray], count_instructions: bool = False,
                  timeout: float = 600):
        """Build for an emulated Cortex-M board, run under QEMU; returns (outputs, BoardRun)."""
        from ...micro.boards import get_board
        from ...micro.build import build_elf, size
        from ...micro.qemu import run as qemu_run

        spec = get_board(board)
        self._check_inputs(inputs)
        with tempfile.TemporaryDirectory(prefix="tessera-board-") as tmp:
            folder = Path(tmp)
            files = self.write_project(folder, inputs, '__attribute__((section(".arena")))')
            start = time.perf_counter()
            arena = f'-DTSGEN_{self.name.upper()}_POOL_ATTRIBUTE=__attribute__((section(".arena")))'
            elf = build_elf(spec, files, [], folder / "build",
                            extra_cflags=[*self.include_flags(folder), arena])
            sizes = size(elf)
            result = qemu_run(spec, elf, timeout=timeout, count_instructions=count_instructions)
            if result.exit_code != 0:
                raise RuntimeExecutionError(
                    f"AOT model {self.name} on {board} exited with {result.exit_code}:\n"
                    f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
            outputs = parse_outputs(self.program, result.stdout)
            return outputs, BoardRun(board, sizes, result, time.perf_counter() - start)

    def _check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        if len(inputs) != len(self.program.inputs):
            raise RuntimeExecutionError(f"model {self.name} takes {len(self.program.inputs)} inputs, got {len(inputs)}")
        for t, a in zip(self.program.inputs, inputs):
            if tuple(np.shape(a)) != t.type.shape:
                raise RuntimeExecutionError(f"input {t.name!r}: got shape {np.shape(a)}, expected {t.type.shape}")


@dataclass
class BoardRun:
    board: str
    sizes: object  # tessera.micro.build.SectionSizes
    qemu: object  # tessera.micro.qemu.QemuResult
    seconds: float


def _readme(program: AotProgram) -> str:
    m = program.name
    return f"""Model Library Format, generated by tessera {__version__}: model '{m}'.

codegen/host/include/tsgen_{m}.h   the C interface (tsgen_{m}_run, pool sizes, shapes)
codegen/host/src/                 kernels, executor, entry points, weights (.incbin of {params_file(program)})
runtime/                          the tessera C runtime (headers, workspace allocator)
metadata.json                     inputs, outputs, pools and their sizes, per-kernel workspace

Build (any C compiler; the assembler must find the weights file):
  cc -Icodegen/host/include -Iruntime/include -Wa,-Icodegen/host/src \\
     codegen/host/src/*.c runtime/src/*.c your_main.c -lm
"""
