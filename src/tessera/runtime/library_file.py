"""The file an exported library lives in: an ELF shared object sealed with a checksum trailer.

    [ the linked shared object ][ SHA-256 of it: 32 bytes ][ its length: u64 LE ][ b"TSLIBSUM" ]

The dynamic loader maps only what the ELF program headers point at, so the
48 bytes appended after the linked object leave it loadable by dlopen (and
by `tessera.load_module`). Tools that rewrite the object (`strip`,
`objcopy`) drop the trailer: such a file is refused, re-export it instead.

`check_library_bytes` runs before anything maps the file. A truncated
shared object would otherwise kill the process with SIGBUS when the loader
touches a page past the end of the file; here it is an `ArtifactError`.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from functools import cache
from pathlib import Path

from ..errors import ArtifactError

MAGIC = b"TSLIBSUM"
TRAILER = struct.Struct("<32sQ8s")  # digest, payload length, magic
ELF_MAGIC = b"\x7fELF"
ET_DYN, PT_LOAD = 3, 1
# e_ident fields, then (per class) the header after e_ident and one program header
_CLASS_NAMES = {1: "32-bit", 2: "64-bit"}
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}  # e_type .. e_shstrndx
_PHDR = {1: ("IIIIIIII", 0, 1, 4), 2: ("IIQQQQQQ", 0, 2, 5)}  # format, index of p_type, p_offset, p_filesz


def seal_library(path: Path) -> None:
    """Append the checksum trailer to a freshly linked shared object (in place: it is not published yet)."""
    payload = path.read_bytes()
    with open(path, "ab") as f:
        f.write(TRAILER.pack(hashlib.sha256(payload).digest(), len(payload), MAGIC))


def check_library_bytes(data: bytes, path: Path) -> memoryview:
    """The shared object inside `data` (the whole file at `path`) after checking every layer of it."""
    if not data:
        raise ArtifactError(f"{path} is empty (0 bytes): not a library; export it again")
    if not data.startswith(ELF_MAGIC):
        kind = "a tar archive (run it with --executor aot)" if data[257:262] == b"ustar" else f"{data[:8]!r}..."
        raise ArtifactError(f"{path} is not a shared library: it starts with {kind}, expected the ELF magic "
                            f"{ELF_MAGIC!r}")
    if len(data) < TRAILER.size + 64:
        raise ArtifactError(f"{path} is only {len(data)} bytes: truncated, not a whole library")
    digest, length, magic = TRAILER.unpack_from(data, len(data) - TRAILER.size)
    if magic != MAGIC:
        raise ArtifactError(f"{path} has no tessera checksum trailer: the file is truncated, was modified "
                            "(e.g. by strip), or was not written by tessera's export_library; export it again")
    if length != len(data) - TRAILER.size:
        raise ArtifactError(f"{path}: its trailer says the library has {length} bytes, the file holds "
                            f"{len(data) - TRAILER.size}: the file was cut or extended; export it again")
    payload = memoryview(data)[:length]
    if hashlib.sha256(payload).digest() != digest:
        raise ArtifactError(f"{path}: checksum mismatch (SHA-256 of the library is "
                            f"{hashlib.sha256(payload).hexdigest()[:16]}..., its trailer says "
                            f"{digest.hex()[:16]}...): the file is damaged; export it again")
    _check_elf(payload, path)
    return payload


@cache
def _host_ident() -> tuple[int, int, int]:
    """(class, byte order, machine) of the running interpreter's own ELF image."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            with open(exe, "rb") as f:
                head = f.read(20)
        except OSError:
            continue
        if head.startswith(ELF_MAGIC) and len(head) == 20:
            order = "<" if head[5] == 1 else ">"
            return head[4], head[5], struct.unpack_from(order + "H", head, 18)[0]
    return 0, 0, 0  # not an ELF host: dlopen will say what it thinks


def _check_elf(payload: memoryview, path: Path) -> None:
    """The ELF header fits this process, and every table and loaded segment lies inside the file."""
    size = len(payload)
    elf_class, order_id = payload[4], payload[5]
    if elf_class not in _HEADER or order_id not in (1, 2):
        raise ArtifactError(f"{path}: unknown ELF class {elf_class} or byte order {order_id}")
    order = "<" if order_id == 1 else ">"
    header = struct.Struct(order + _HEADER[elf_class])
    if size < 16 + header.size:
        raise ArtifactError(f"{path}: the ELF header is cut short ({size} bytes)")
    (e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize, e_shnum,
     _) = header.unpack_from(payload, 16)
    host_class, host_order, host_machine = _host_ident()
    if host_class and (elf_class, order_id, e_machine) != (host_class, host_order, host_machine):
        raise ArtifactError(
            f"{path} is a {_CLASS_NAMES[elf_class]} library for ELF machine {e_machine}; this process is "
            f"{_CLASS_NAMES.get(host_class, '?')}, machine {host_machine}: build it on (or for) this machine")
    if e_type != ET_DYN:
        raise ArtifactError(f"{path}: ELF type {e_type}, expected {ET_DYN} (a shared object)")
    fmt, i_type, i_offset, i_filesz = _PHDR[elf_class]
    phdr = struct.Struct(order + fmt)
    if e_phnum == 0 or e_phentsize < phdr.size or e_phoff + e_phnum * e_phentsize > size:
        raise ArtifactError(f"{path}: the ELF program headers ({e_phnum} at byte {e_phoff}) lie outside "
                            f"the {size}-byte file")
    if e_shnum and e_shoff + e_shnum * e_shentsize > size:
        raise ArtifactError(f"{path}: the ELF section headers ({e_shnum} at byte {e_shoff}) lie outside "
                            f"the {size}-byte file")
    for k in range(e_phnum):
        fields = phdr.unpack_from(payload, e_phoff + k * e_phentsize)
        if fields[i_type] == PT_LOAD and fields[i_offset] + fields[i_filesz] > size:
            raise ArtifactError(f"{path}: loaded segment {k} ends at byte {fields[i_offset] + fields[i_filesz]}, "
                                f"past the end of the {size}-byte file")
