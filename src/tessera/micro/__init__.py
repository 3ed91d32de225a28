"""Running generated C on emulated Cortex-M boards (QEMU MPS2/MPS3).

    from tessera.micro import build_elf, run, size
    elf = build_elf("mps2-an386", sources, include_dirs=(), output_dir="out")
    result = run("mps2-an386", elf, count_instructions=True)
    result.stdout, result.exit_code, result.instructions, size(elf).ram

boards: the board registry; startup: generated start-up C and linker
script; build: compile/link/size; qemu: run under QEMU with an optional
instruction count (plugin: the TCG plugin); selftest: a known-answer check.
"""

from .boards import BOARDS, Board, Region, get_board
from .build import ElfImage, SectionSizes, build_elf, size, symbol_range
from .qemu import QemuResult, QemuTimeoutError, run
from .selftest import hello
from .tools import MissingToolError

__all__ = [
    "BOARDS", "Board", "ElfImage", "MissingToolError", "QemuResult", "QemuTimeoutError", "Region",
    "SectionSizes", "build_elf", "get_board", "hello", "run", "size", "symbol_range",
]
