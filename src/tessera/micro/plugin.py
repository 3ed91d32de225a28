"""The QEMU TCG plugin that counts guest instructions, built on first use.

Wall time under an emulator says little about a microcontroller; the
number of executed instructions is a deterministic, host-independent proxy
(under `-icount`). Debian's QEMU supports `-plugin` but ships neither the
example plugins nor `qemu-plugin.h`, so the plugin source below declares
the few API-v1 functions it uses by hand. It is compiled with the host gcc
into the tessera cache directory, keyed by the hash of its source, as a
checksummed cache entry (rebuilt when damaged).

Arguments: `lo=ADDR,hi=ADDR` count only instructions with lo <= pc < hi.
Output (needs `-d plugin`): `insns: N` on QEMU's log, i.e. stderr.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

from ..errors import TesseraError
from ..target.toolchain import cache_dir
from ..util.digest import cache_entry_writer, intact
from .tools import require_tool

PLUGIN_SOURCE = r"""/* tessera instruction counter: a QEMU TCG plugin, API version 1. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The subset of qemu-plugin.h (QEMU 7.2) used here. */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = 1;
EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv);

static uint64_t count;
static uint64_t lo = 0, hi = UINT64_MAX;

/* At translation: add one to the counter before each instruction in range. */
static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        if (pc >= lo && pc < hi)
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &count, 1);
    }
}

static void report(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    char line[64];
    snprintf(line, sizeof line, "insns: %" PRIu64 "\n", count);
    qemu_plugin_outs(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "lo=", 3) == 0)
            lo = strtoull(argv[i] + 3, NULL, 0);
        else if (strncmp(argv[i], "hi=", 3) == 0)
            hi = strtoull(argv[i] + 3, NULL, 0);
        else {
            fprintf(stderr, "insncount: unknown argument '%s' (expected lo=ADDR or hi=ADDR)\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, report, NULL);
    return 0;
}
"""


def plugin_path() -> Path:
    """The compiled instruction-counting plugin (built into the cache if needed, or if damaged)."""
    key = hashlib.sha256(PLUGIN_SOURCE.encode()).hexdigest()[:16]
    so = cache_dir() / f"qemu-insncount-{key}.so"
    if intact(so):
        return so
    cc = require_tool("gcc")
    with tempfile.TemporaryDirectory(prefix="tessera-plugin-") as tmp, cache_entry_writer(so) as staged:
        src = Path(tmp) / "insncount.c"
        src.write_text(PLUGIN_SOURCE)
        cmd = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", str(staged), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or proc.stderr.strip():
            raise TesseraError(f"building the QEMU instruction-count plugin failed:\n{proc.stderr.strip()}")
    return so
