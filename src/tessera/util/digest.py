"""Content checksums: cache entries that prove they are whole, and SHA256SUMS manifests.

A cache entry `x` is trusted only next to its sidecar `x.sha256`, one line
in `sha256sum` format naming the SHA-256 of the entry's content. The entry
is written first and the sidecar second, each atomically: a crash between
the two, a truncated or emptied file, or a flipped bit all leave an entry
whose check fails, and the caller rebuilds it instead of using it.

A manifest (`SHA256SUMS` in a Model Library Format export) lists every
file of a folder or archive the same way; `sha256sum -c SHA256SUMS` checks
an unpacked export by hand.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import ArtifactError
from .atomic import atomic_write_bytes, atomic_write_text, atomic_writer

_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")
_CHUNK = 1 << 20


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------ manifests
def manifest_text(digests: Mapping[str, str]) -> str:
    """`sha256sum` lines for {relative path: hex digest}, sorted by path."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def parse_manifest(text: str, source: str) -> dict[str, str]:
    """{relative path: hex digest} from `sha256sum` lines; `source` names the file in errors."""
    digests: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.fullmatch(line)
        if match is None:
            raise ArtifactError(f"{source}, line {number}: got {line[:80]!r}, expected '<64 hex digits>  <path>'")
        digest, name = match.groups()
        if name in digests:
            raise ArtifactError(f"{source}, line {number}: {name!r} is listed twice")
        digests[name] = digest
    return digests


# --------------------------------------------------------------- cache entries
def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def intact(path: str | os.PathLike[str]) -> bool:
    """Is `path` a whole cache entry: non-empty, with a sidecar naming its content's digest?"""
    entry = Path(path)
    try:
        if not entry.is_file() or entry.stat().st_size == 0:
            return False
        match = _LINE.fullmatch(sidecar(entry).read_text(encoding="ascii").strip())
        return match is not None and match.group(2) == entry.name and match.group(1) == sha256_file(entry)
    except (OSError, UnicodeDecodeError):
        return False


def _seal(entry: Path, digest: str) -> None:
    atomic_write_text(sidecar(entry), manifest_text({entry.name: digest}))


def store_cache_entry(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write a cache entry and its sidecar (each atomically); returns the path."""
    entry = atomic_write_bytes(path, data)
    _seal(entry, sha256_bytes(data))
    return entry


@contextmanager
def cache_entry_writer(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Like `atomic_writer`, for a cache entry an external tool writes; seals it afterwards."""
    entry = Path(path)
    with atomic_writer(entry) as staged:
        yield staged
        digest = sha256_file(staged) if staged.is_file() else ""
    _seal(entry, digest)
