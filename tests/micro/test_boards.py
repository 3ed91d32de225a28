"""The board layer: build bare-metal C for each emulated Cortex-M board, run it
under QEMU, and check output, exit status, instruction counts, memory errors
and timeouts. Needs gcc-arm-none-eabi, libnewlib-arm-none-eabi,
qemu-system-arm and gcc; a missing one fails with the package to install.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tessera.errors import CompileError, TesseraError
from tessera.micro import (
    BOARDS,
    ElfImage,
    MissingToolError,
    QemuTimeoutError,
    build_elf,
    get_board,
    hello,
    run,
    size,
    symbol_range,
)
from tessera.micro.boards import MiB
from tessera.micro.startup import FAULT_EXIT_CODE, STACK_MIN, linker_script, startup_c
from tessera.micro.tools import PACKAGES, require_newlib, require_tool
from tessera.target.builtin import c_toolchain
from tessera.target.target import Target
from tessera.target.toolchain import SourceFile

ALL_BOARDS = ["mps2-an385", "mps2-an386", "mps2-an500", "mps3-an547"]
N = 32
MATMUL_EXIT = 7

# Small-integer inputs: every product and partial sum is exact in float, so
# the output is the same with or without FMA contraction or MVE reordering.
MATMUL_C = r"""#include <stdio.h>

#define N 32
float a[N * N], b[N * N], c[N * N];

__attribute__((noinline)) void matmul(const float *x, const float *y, float *z)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < N; k++)
                s += x[i * N + k] * y[k * N + j];
            z[i * N + j] = s;
        }
}

int main(void)
{
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++) {
            a[i * N + k] = (float)((i * 3 + k) % 7 - 3);
            b[i * N + k] = (float)((i * 5 + k) % 11 - 5);
        }
    matmul(a, b, c);
    double weighted = 0.0;
    long total = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            weighted += (double)c[i * N + j] * ((i + j) % 5 - 2);
            total += (long)c[i * N + j];
        }
    printf("matmul %dx%d total=%ld weighted=%.1f c[5]=%.2f\n", N, N, total, weighted, (double)c[5]);
    return 7;
}
"""


def expected_matmul_stdout() -> str:
    idx = np.arange(N)
    a = ((idx[:, None] * 3 + idx[None, :]) % 7 - 3).astype(np.int64)
    b = ((idx[:, None] * 5 + idx[None, :]) % 11 - 5).astype(np.int64)
    c = a @ b
    weights = (idx[:, None] + idx[None, :]) % 5 - 2
    return (f"matmul {N}x{N} total={int(c.sum())} weighted={float((c * weights).sum()):.1f} "
            f"c[5]={float(c.flat[5]):.2f}\n")


def source(name: str, text: str) -> SourceFile:
    return SourceFile(name, text)


@pytest.fixture(scope="module")
def matmul_elves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ElfImage]:
    out = tmp_path_factory.mktemp("matmul")
    return {b: build_elf(b, [source("matmul.c", MATMUL_C)], (), out / b, name="matmul") for b in ALL_BOARDS}


# ---------------------------------------------------------------- the tools
@pytest.mark.parametrize("tool", ["arm-none-eabi-gcc", "arm-none-eabi-size", "arm-none-eabi-nm",
                                  "qemu-system-arm", "gcc"])
def test_tools_installed(tool: str) -> None:
    try:
        require_tool(tool)
    except MissingToolError as e:
        pytest.fail(str(e))


def test_newlib_installed() -> None:
    try:
        require_newlib()
    except MissingToolError as e:
        pytest.fail(str(e))


def test_missing_tool_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    for tool, package in PACKAGES.items():
        if tool.endswith(".specs"):
            continue
        with pytest.raises(MissingToolError, match=f"install the Debian package '{package}'"):
            require_tool(tool)


# ------------------------------------------------------------- the registry
def test_registry() -> None:
    assert list(BOARDS) == ALL_BOARDS
    cores = {name: b.cpu for name, b in BOARDS.items()}
    assert cores == {"mps2-an385": "cortex-m3", "mps2-an386": "cortex-m4", "mps2-an500": "cortex-m7",
                     "mps3-an547": "cortex-m55"}
    for b in BOARDS.values():
        assert b.machine == b.name
        assert b.target_string == f"c -mcpu={b.cpu}"
        assert b.toolchain() == c_toolchain(Target(b.target_string))
        assert b.flash.origin == 0  # the vector table, where the core boots
        assert b.arena.length >= 16 * MiB
    assert get_board("mps2-an500").arena.origin == 0x6000_0000
    assert not get_board("mps2-an385").has_fpu and get_board("mps2-an386").has_fpu
    assert "-mfloat-abi=soft" in get_board("mps2-an385").toolchain().cflags
    assert "-mfpu=fpv5-d16" in get_board("mps2-an500").toolchain().cflags


def test_unknown_board(tmp_path: Path) -> None:
    with pytest.raises(TesseraError, match=r"unknown board 'mps2-an368' \(did you mean 'mps2-an386'\?\)") as info:
        get_board("mps2-an368")
    for name in ALL_BOARDS:
        assert name in str(info.value)
    with pytest.raises(TesseraError, match="unknown board 'stm32'.*valid boards: mps2-an385"):
        build_elf("stm32", [source("x.c", "int main(void) { return 0; }\n")], (), tmp_path)
    with pytest.raises(TesseraError, match="unknown board"):
        run("an547", tmp_path / "x.elf")


# ---------------------------------------------------------- start-up and ld
@pytest.mark.parametrize("board", ALL_BOARDS)
def test_startup_is_warning_free(board: str, tmp_path: Path) -> None:
    tc = get_board(board).toolchain()
    c = tmp_path / "startup.c"
    c.write_text(startup_c(board))
    proc = subprocess.run([tc.cc, *tc.cflags, "-Wall", "-Wextra", "-Werror", "-c", str(c), "-o",
                           str(tmp_path / "startup.o")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    script = linker_script(board)
    b = get_board(board)
    assert f"ORIGIN = 0x{b.arena.origin:08x}" in script and f"__stack_min__ = 0x{STACK_MIN:x}" in script
    assert "ASSERT(_estack - end >= __stack_min__" in script


@pytest.mark.parametrize("board", ALL_BOARDS)
def test_hello(board: str, tmp_path: Path) -> None:
    result = hello(board, tmp_path)
    assert result.stderr == ""
    assert result.seconds < 30


# ------------------------------------------------------------- build + run
@pytest.mark.parametrize("board", ALL_BOARDS)
def test_matmul_runs(board: str, matmul_elves: dict[str, ElfImage]) -> None:
    elf = matmul_elves[board]
    result = run(board, elf, timeout=60)
    assert result.stdout == expected_matmul_stdout(), result.stderr
    assert result.exit_code == MATMUL_EXIT
    assert result.instructions is None and not result.faulted
    sizes = size(elf)
    assert sizes.bss >= 3 * N * N * 4  # the three matrices
    assert sizes.flash == sizes.text + sizes.rodata + sizes.data
    assert sizes.ram == sizes.data + sizes.bss + sizes.arena
    assert sizes.arena == 0 and sizes.stack == STACK_MIN
    assert 0 < sizes.flash < get_board(board).flash.length


@pytest.mark.parametrize("board", ALL_BOARDS)
def test_instruction_counts_are_deterministic(board: str, matmul_elves: dict[str, ElfImage]) -> None:
    elf = matmul_elves[board]
    first = run(board, elf, count_instructions=True)
    second = run(board, elf, count_instructions=True)
    assert first.stdout == expected_matmul_stdout() and first.exit_code == MATMUL_EXIT
    assert "insns" not in first.stderr
    assert first.instructions is not None and first.instructions > 0
    assert first.instructions == second.instructions
    lo, hi = symbol_range(elf, "matmul")
    kernel = run(board, elf, pc_range=(lo, hi))
    assert kernel.instructions == run(board, elf, pc_range=(lo, hi)).instructions
    # at least one instruction per 4 MACs (MVE does 4 at a time), and part of the whole
    assert N**3 // 4 < kernel.instructions < first.instructions


def test_paths_with_local_headers(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "answer.h").write_text("#define ANSWER 41\n")
    (tmp_path / "src" / "main.c").write_text('#include "answer.h"\nint main(void) { return ANSWER + 1; }\n')
    elf = build_elf("mps2-an386", [tmp_path / "src" / "main.c"], (), tmp_path / "out", extra_cflags=["-O1"])
    assert elf.path.is_file() and elf.map_file.is_file()
    assert run("mps2-an386", elf).exit_code == 42


@pytest.mark.parametrize(("body", "status"), [("return 255;", 255), ("exit(300);", 300 & 0xFF),
                                              ("abort();", 1)])
def test_exit_status(body: str, status: int, tmp_path: Path) -> None:
    program = source("exit.c", f"#include <stdlib.h>\nint main(void) {{ {body} }}\n")
    elf = build_elf("mps2-an385", [program], (), tmp_path)
    assert run("mps2-an385", elf).exit_code == status


@pytest.mark.parametrize("board", ALL_BOARDS)
def test_fault_exits_127(board: str, tmp_path: Path) -> None:
    program = source("trap.c", "int main(void) { __builtin_trap(); }\n")
    result = run(board, build_elf(board, [program], (), tmp_path), timeout=30)
    assert result.exit_code == FAULT_EXIT_CODE and result.faulted
    assert result.stderr.startswith("tessera: HardFault (exception 3) pc=0x")


def test_hung_guest_times_out(tmp_path: Path) -> None:
    program = source("loop.c", 'int main(void) { for (;;) __asm__ volatile(""); }\n')
    elf = build_elf("mps2-an386", [program], (), tmp_path)
    start = time.monotonic()
    with pytest.raises(QemuTimeoutError, match=r"did not exit within 1\.5 s"):
        run("mps2-an386", elf, timeout=1.5)
    assert time.monotonic() - start < 5


# ------------------------------------------------------------------ memory
BIG_BSS = "char big[%d];\nint main(int argc, char **argv) { (void)argv; big[argc] = 1; return big[argc * 3]; }\n"


@pytest.mark.parametrize(("board", "memory"), [("mps2-an386", "SSRAM2/3"), ("mps3-an547", "DTCM")])
def test_bss_too_large_names_the_region(board: str, memory: str, tmp_path: Path) -> None:
    b = get_board(board)
    with pytest.raises(CompileError) as info:
        build_elf(board, [source("big.c", BIG_BSS % (b.ram.length + 1))], (), tmp_path)
    message = str(info.value)
    found = re.search(r"region RAM \((.*)\) overflowed by (\d+) bytes: the program needs (\d+) bytes "
                      r"\(.*\), the board has (\d+)", message)
    assert found, message
    region, over, needed, has = found.group(1), *map(int, found.group(2, 3, 4))
    assert memory in region and board in message
    assert has == b.ram.length and needed == has + over
    assert needed > b.ram.length + STACK_MIN
    assert "__attribute__((section(\".arena\")))" in message


def test_flash_too_large_names_the_region(tmp_path: Path) -> None:
    program = source("rom.c", "const char table[600 * 1024] = {1};\n"
                              "int main(int argc, char **argv) { (void)argv; return table[argc * 1000]; }\n")
    with pytest.raises(CompileError, match=r"region FLASH \(ITCM, 512 KiB @0x00000000\) overflowed by \d+ "
                                           r"bytes: the program needs \d+ bytes .*the board has 524288"):
        build_elf("mps3-an547", [program], (), tmp_path)


ARENA_C = r"""#include <stdio.h>
__attribute__((section(".arena"))) char arena[%d];
int main(void)
{
    volatile char *p = arena;
    p[0] = 3;
    p[sizeof arena - 1] = 4;
    printf("arena at %%p: %%d %%d\n", (void *)arena, p[0], p[sizeof arena - 1]);
    return 0;
}
"""


@pytest.mark.parametrize(("board", "nbytes"), [("mps2-an385", 16 * MiB), ("mps2-an500", 16 * MiB),
                                               ("mps3-an547", 64 * MiB)])
def test_arena_in_large_ram(board: str, nbytes: int, tmp_path: Path) -> None:
    b = get_board(board)
    elf = build_elf(board, [source("arena.c", ARENA_C % nbytes)], (), tmp_path)
    assert size(elf).arena == nbytes and size(elf).ram >= nbytes
    result = run(board, elf, timeout=60)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"arena at 0x{b.arena.origin:x}: 3 4\n"


def test_arena_overflow(tmp_path: Path) -> None:
    with pytest.raises(CompileError, match=r"region ARENA \(PSRAM, 16 MiB @0x60000000\) overflowed by 1 bytes"):
        build_elf("mps2-an500", [source("arena.c", ARENA_C % (16 * MiB + 1))], (), tmp_path)


def test_elf_built_for_another_board(matmul_elves: dict[str, ElfImage]) -> None:
    with pytest.raises(TesseraError, match="built for mps2-an386, not mps2-an500"):
        run("mps2-an500", matmul_elves["mps2-an386"])


def test_stack_overflow_is_a_lockup(tmp_path: Path) -> None:
    # The fault handler cannot push a frame on an exhausted stack: QEMU aborts.
    program = source("recurse.c", "int f(volatile int *p, int n)\n{\n    volatile int buf[64];\n"
                                  "    buf[0] = n;\n    return n == -1 ? 0 : f(buf, n + 1) + buf[0] + p[0];\n}\n"
                                  "int main(int argc, char **argv) { (void)argv; volatile int x = argc; "
                                  "return f(&x, 0); }\n")
    elf = build_elf("mps3-an547", [program], (), tmp_path, extra_cflags=["-O1"])
    result = run("mps3-an547", elf, timeout=30, count_instructions=True)
    assert result.faulted and result.exit_code < 0 and "Lockup" in result.stderr
    assert result.instructions is None


def test_not_an_elf(tmp_path: Path) -> None:
    (tmp_path / "prog.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(TesseraError, match="not an ELF file"):
        run("mps2-an386", tmp_path / "prog.c")
