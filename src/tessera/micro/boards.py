"""Emulated Cortex-M boards: which QEMU machine, which core, which memory.

Generated C for a microcontroller is only testable if something runs it.
QEMU's Arm MPS2/MPS3 FPGA images give one board per core we target; this
registry says, per board, which tessera target compiles for its core and
where code, RAM and big buffers go, so the start-up code and linker script
(`startup.py`) can be generated instead of hand-written per board.

The addresses and sizes are QEMU 7.2's memory maps (`info mtree`), checked
by the tests at their limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TesseraError, did_you_mean
from ..target.target import Target
from ..target.toolchain import Toolchain

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Region:
    """A memory region: `memory` names the physical RAM in QEMU's map."""

    memory: str
    origin: int
    length: int

    @property
    def end(self) -> int:
        return self.origin + self.length

    def __str__(self) -> str:
        return f"{self.memory}, {_human(self.length)} @0x{self.origin:08x}"


@dataclass(frozen=True)
class Board:
    """One QEMU board and how tessera lays out a program on it.

    flash: code and read-only data (`.text`, `.rodata`, the initial values
        of `.data`) and the vector table at its origin (0x0, where the core
        boots). It is RAM in QEMU, but nothing writes to it.
    ram: `.data`, `.bss`, heap and stack (the stack starts at its end).
    arena: a large RAM for NOLOAD `.arena` sections (big static buffers).
    weights: where model weights (`.rodata.tsgen_*_params`) go when the code
        region is too small for them; None means the flash region.
    """

    name: str
    machine: str  # qemu-system-arm -M
    cpu: str  # gcc -mcpu
    flash: Region
    ram: Region
    arena: Region
    description: str = ""
    weights: Region | None = None

    @property
    def weights_region(self) -> Region:
        return self.weights or self.flash

    @property
    def target_string(self) -> str:
        """The tessera target for this board's core, e.g. 'c -mcpu=cortex-m4'."""
        return f"c -mcpu={self.cpu}"

    @property
    def target(self) -> Target:
        return Target(self.target_string)

    def toolchain(self) -> Toolchain:
        """arm-none-eabi-gcc with this core's Thumb/FPU/float-ABI flags."""
        from ..target.builtin import c_toolchain

        return c_toolchain(self.target)

    @property
    def has_fpu(self) -> bool:
        from ..target.builtin import CORTEX_M

        return CORTEX_M[self.cpu].fpu is not None


def _human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


_MPS2_FLASH = Region("SSRAM1", 0x0000_0000, 4 * MiB)
_MPS2_RAM = Region("SSRAM2/3", 0x2000_0000, 4 * MiB)

BOARDS: dict[str, Board] = {
    b.name: b
    for b in (
        Board("mps2-an385", "mps2-an385", "cortex-m3", _MPS2_FLASH, _MPS2_RAM,
              Region("PSRAM", 0x2100_0000, 16 * MiB), "MPS2 AN385, Cortex-M3, no FPU (soft float)"),
        Board("mps2-an386", "mps2-an386", "cortex-m4", _MPS2_FLASH, _MPS2_RAM,
              Region("PSRAM", 0x2100_0000, 16 * MiB), "MPS2 AN386, Cortex-M4 with single-precision FPU"),
        # On AN500 0x21000000 is unimplemented I/O: its PSRAM is at 0x60000000.
        Board("mps2-an500", "mps2-an500", "cortex-m7", _MPS2_FLASH, _MPS2_RAM,
              Region("PSRAM", 0x6000_0000, 16 * MiB), "MPS2 AN500, Cortex-M7 with double-precision FPU"),
        # The 512 KiB ITCM holds code; weights go to the 2 MiB code SRAM, which QEMU
        # loads like the ITCM (on a real board that would be a flash or QSPI image).
        Board("mps3-an547", "mps3-an547", "cortex-m55", Region("ITCM", 0x0000_0000, 512 * KiB),
              Region("DTCM", 0x2000_0000, 512 * KiB), Region("DDR", 0x6000_0000, 2 * GiB),
              "MPS3 AN547, Cortex-M55 with FPU and Helium (MVE)", Region("SRAM", 0x0100_0000, 2 * MiB)),
    )
}


def get_board(board: str | Board) -> Board:
    """The board named `board` (a Board passes through).

    Raises TesseraError listing the valid names for an unknown one.
    """
    if isinstance(board, Board):
        return board
    found = BOARDS.get(board)
    if found is None:
        raise TesseraError(
            f"unknown board {board!r}{did_you_mean(board, BOARDS)}; valid boards: {', '.join(BOARDS)}"
        )
    return found
