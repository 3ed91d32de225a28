"""Run an ELF on its emulated board and collect output, status and counts.

The guest talks to the host through Arm semihosting: printf goes to host
stdout, stderr and fault messages to host stderr, and `exit(n)` becomes
QEMU's exit status `n & 0xFF` (`abort`/failed `assert` give 1, a fault
caught by the start-up code gives 127). A guest that never exits (endless
loop, fault without handler) would hang QEMU forever, so every run has a
timeout that turns into `QemuTimeoutError`.

Instruction counts come from the plugin in `plugin.py` under
`-icount shift=0,sleep=off`, which makes them identical run to run.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import TesseraError
from ..util.progress import QEMU_RUNS, Step, batch, report
from .boards import Board, get_board
from .build import ElfImage
from .plugin import plugin_path
from .startup import FAULT_EXIT_CODE
from .tools import require_tool

QEMU = "qemu-system-arm"
SEMIHOSTING = ("-semihosting-config", "enable=on,target=native")
ICOUNT = ("-icount", "shift=0,sleep=off")

_INSNS = re.compile(r"^insns: (\d+)\n?", re.MULTILINE)


class QemuTimeoutError(TesseraError):
    """The guest did not exit within the timeout."""


@dataclass(frozen=True)
class QemuResult:
    """What one run produced.

    stdout: the guest's stdout (semihosting); stderr: the guest's stderr and
    QEMU's own messages (the plugin's count line removed); exit_code: QEMU's
    exit status; instructions: executed guest instructions when counted
    (None if not, or if QEMU aborted before printing the count);
    seconds: wall time of the QEMU process.
    """

    stdout: str
    stderr: str
    exit_code: int
    instructions: int | None
    seconds: float

    @property
    def faulted(self) -> bool:
        """Did the guest crash?

        Either a fault reported by the start-up code (exit 127), or a fault
        the handler could not take, typically a stack overflow: QEMU then
        aborts with "qemu: fatal: Lockup" (exit status -6, SIGABRT).
        """
        if self.exit_code == FAULT_EXIT_CODE and "tessera: HardFault" in self.stderr:
            return True
        return self.exit_code < 0 and "Lockup" in self.stderr


def _no_core_dump() -> None:
    """QEMU aborts (SIGABRT) on a guest lockup: no core files in the cwd."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def run(
    board: str | Board,
    elf: ElfImage | str | os.PathLike[str],
    timeout: float = 120.0,
    count_instructions: bool = False,
    args: Sequence[str] = (),
    *,
    pc_range: tuple[int, int] | None = None,
) -> QemuResult:
    """Boot `elf` on `board` under QEMU and wait for it to exit.

    count_instructions: count executed guest instructions (deterministic:
        runs with `-icount shift=0,sleep=off`). `pc_range=(lo, hi)` counts
        only instructions with lo <= pc < hi and implies counting; get a
        function's range with `build.symbol_range`.
    args: extra QEMU command-line arguments.
    Raises QemuTimeoutError after `timeout` seconds, TesseraError when QEMU
    itself fails (bad machine, kernel or plugin).
    """
    b = get_board(board)
    if isinstance(elf, ElfImage):
        if elf.board != b:
            raise TesseraError(f"{elf.path.name} was built for {elf.board.name}, not {b.name}")
        path = elf.path
    else:
        path = Path(elf)
    if not path.is_file():
        raise TesseraError(f"ELF file {str(path)!r} does not exist")
    with path.open("rb") as f:
        if f.read(4) != b"\x7fELF":
            raise TesseraError(f"{str(path)!r} is not an ELF file (QEMU would boot it as a raw image)")
    if pc_range is not None and not 0 <= pc_range[0] < pc_range[1]:
        raise TesseraError(f"pc_range must be (lo, hi) with 0 <= lo < hi, got {pc_range}")
    counting = count_instructions or pc_range is not None
    cmd = [require_tool(QEMU), "-M", b.machine, "-nographic", *SEMIHOSTING, "-kernel", str(path)]
    if counting:
        plugin = str(plugin_path())
        if pc_range is not None:
            lo, hi = pc_range
            plugin += f",lo={lo:#x},hi={hi:#x}"
        cmd += [*ICOUNT, "-plugin", plugin, "-d", "plugin"]
    cmd += list(args)
    start = time.monotonic()
    try:
        with batch(QEMU_RUNS, 1):  # one run: listeners add it to the runs they count (a tuner starts many)
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                                  check=False, preexec_fn=_no_core_dump)
            report(Step(QEMU_RUNS, f"{path.name} on {b.name}", time.monotonic() - start))
    except subprocess.TimeoutExpired as e:
        out = _text(e.stdout)[-2000:]
        raise QemuTimeoutError(
            f"{path.name} on {b.name} did not exit within {timeout:g} s (endless loop, hang, or a "
            f"timeout too short for the work); it was killed.\nstdout so far:\n{out}\n"
            f"stderr so far:\n{_text(e.stderr)[-2000:]}"
        ) from None
    seconds = time.monotonic() - start
    stdout, stderr = _text(proc.stdout), _text(proc.stderr)
    if proc.returncode != 0 and any(line.startswith(f"{QEMU}:") for line in stderr.splitlines()):
        raise TesseraError(f"{QEMU} failed (exit {proc.returncode}) running {path.name} on {b.name}:\n"
                           f"{stderr.strip()}\ncommand: {' '.join(cmd)}")
    instructions = None
    if counting:
        found = _INSNS.findall(stderr)
        if found:
            instructions = int(found[-1])
            stderr = _INSNS.sub("", stderr)
        elif proc.returncode >= 0:  # QEMU aborted (e.g. guest lockup): no count, see `faulted`
            raise TesseraError(f"the instruction-count plugin printed no count; stderr:\n{stderr.strip()}")
    return QemuResult(stdout, stderr, proc.returncode, instructions, seconds)
