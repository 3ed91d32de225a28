"""A known-answer program that checks a board works end to end.

Before trusting numbers from an emulated board, one wants to know that the
start-up code, linker script, FPU set-up, semihosting and libc all work on
it. `hello(board)` builds a tiny program that touches each of them (.data
initial values, zeroed .bss, a constructor, malloc, float math and printf
with %f, exit status) and checks its output against known answers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import TesseraError
from ..target.toolchain import SourceFile
from .boards import Board, get_board
from .build import build_elf
from .qemu import QemuResult, run

HELLO_EXIT_CODE = 42

HELLO_C = r"""#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int initialised = 42;  /* .data: copied from flash */
static int zeroed[16];        /* .bss: zeroed by Reset_Handler */
static int constructed;       /* set by a constructor via __libc_init_array */

__attribute__((constructor)) static void mark_constructed(void) { constructed = 1; }

static uint32_t crc32(const char *s)
{
    uint32_t c = 0xFFFFFFFFu;
    while (*s) {
        c ^= (uint8_t)*s++;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

int main(void)
{
    int sum = 0;
    for (int i = 0; i < 16; i++)
        sum += zeroed[i];
    volatile float two = 2.0f;
    float *heap = malloc(64 * sizeof(float));
    if (heap == NULL)
        return 2;
    heap[63] = sqrtf(two);
    printf("hello from %s\n", "@BOARD@");
    printf("data=%d bss=%d ctor=%d\n", initialised, sum, constructed);
    printf("sqrt(2)=%.6f\n", (double)heap[63]);
    printf("crc32=%08lx\n", (unsigned long)crc32("123456789"));
    free(heap);
    return @EXIT@;
}
"""


def hello_source(board: str | Board) -> SourceFile:
    b = get_board(board)
    return SourceFile("hello.c", HELLO_C.replace("@BOARD@", b.name).replace("@EXIT@", str(HELLO_EXIT_CODE)))


def hello_expected(board: str | Board) -> str:
    """The exact stdout of the hello program."""
    return f"hello from {get_board(board).name}\ndata=42 bss=0 ctor=1\nsqrt(2)=1.414214\ncrc32=cbf43926\n"


def hello(board: str | Board, output_dir: str | os.PathLike[str] | None = None, timeout: float = 60.0) -> QemuResult:
    """Build and run the hello program on `board`; TesseraError unless all is as expected."""
    b = get_board(board)
    with tempfile.TemporaryDirectory(prefix="tessera-hello-") as tmp:
        elf = build_elf(b, [hello_source(b)], (), Path(output_dir or tmp), name=f"hello-{b.name}")
        result = run(b, elf, timeout=timeout)
    expected = hello_expected(b)
    if result.stdout.replace("\r\n", "\n") != expected or result.exit_code != HELLO_EXIT_CODE:
        raise TesseraError(
            f"self-test failed on {b.name}: exit {result.exit_code} (expected {HELLO_EXIT_CODE})\n"
            f"stdout:\n{result.stdout}\nexpected:\n{expected}stderr:\n{result.stderr}"
        )
    return result
