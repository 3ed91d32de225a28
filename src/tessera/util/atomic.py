"""Replace files all at once: a reader sees the old file or the new one, never a part of one.

Every file tessera writes for a user (libraries, archives, reports, logs)
and every cache entry goes through here. The new content is written into a
private staging folder next to the target (same file system, so the final
rename is atomic), flushed with fsync, and renamed over the target; the
parent folder is fsync'ed too, so the rename survives a power cut. An
error or Ctrl-C on the way deletes the staging folder and leaves the old
file untouched. Only a hard kill can leave a `.tessera-tmp-*` folder behind.

Staging in a folder (not a bare temporary file) keeps the target's own
name, so tools that look at the suffix (gcc, ld, tar) behave the same, and
new files get the usual permissions (umask) instead of mkstemp's 0600.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ArtifactError

TEMP_PREFIX = ".tessera-tmp-"


def _fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to disk."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(folder) / name)
        _fsync_path(Path(folder))


def _staging_folder(target: Path) -> Path:
    """A fresh private folder beside `target` (creating the parents the target needs)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{target.name[:64]}-", dir=target.parent))
    except OSError as exc:
        raise ArtifactError(f"cannot write {target}: {exc.strerror or exc}") from None


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path for the new content of `path`, renamed over `path` when the block ends.

    For files that an external tool writes: pass the yielded path as its
    output. The file must exist when the block ends normally.
    """
    target = Path(path)
    if target.is_dir():
        raise ArtifactError(f"cannot write {target}: it is a folder; give a file name")
    staging = _staging_folder(target)
    try:
        staged = staging / target.name
        yield staged
        if not staged.is_file():
            raise ArtifactError(f"writing {target} produced no file")
        try:
            _fsync_path(staged)
            os.replace(staged, target)
            _fsync_path(target.parent)
        except OSError as exc:
            raise ArtifactError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace `path` with `data` atomically; returns the path."""
    with atomic_writer(path) as staged:
        with open(staged, "xb") as f:
            f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace `path` with `text` (UTF-8) atomically; returns the path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_directory(path: str | os.PathLike[str], exist_ok: bool = False) -> Iterator[Path]:
    """A staging folder that becomes `path` when the block ends.

    A folder cannot be renamed over a non-empty one, so `path` must not
    exist yet; when another writer creates it first, `exist_ok` keeps
    theirs (for content-addressed caches, where both are the same) and
    otherwise the write fails.
    """
    target = Path(path)
    if target.exists() and not exist_ok:
        raise ArtifactError(f"cannot write folder {target}: it already exists")
    staging = _staging_folder(target)
    try:
        staged = staging / target.name
        staged.mkdir()
        yield staged
        try:
            _fsync_tree(staged)
            os.rename(staged, target)
            _fsync_path(target.parent)
        except OSError as exc:
            if not (exist_ok and target.is_dir()):
                raise ArtifactError(f"cannot write folder {target}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
