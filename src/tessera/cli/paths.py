"""Checks on the files a command reads and writes, made before any work starts.

A compile can take minutes: an output path that is a folder, or an input that
is not there, should stop the command at once with the flag and the file named,
not as a traceback at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import TesseraError


def readable_file(flag: str, path: str) -> Path:
    """An existing, readable regular file."""
    file = Path(path)
    if not file.exists():
        raise TesseraError(f"{flag} {path}: no such file")
    if file.is_dir():
        raise TesseraError(f"{flag} {path}: is a folder, expected a file")
    if not os.access(file, os.R_OK):
        raise TesseraError(f"{flag} {path}: not readable (permission denied)")
    return file


def writable_file(flag: str, path: str) -> Path:
    """A file to write: not a folder, in a folder that exists or can be made."""
    file = Path(path)
    if file.is_dir():
        raise TesseraError(f"{flag} {path}: is a folder, expected a file name")
    _check_parent(flag, file)
    return file


def writable_folder(flag: str, path: str) -> Path:
    """A folder to write into: not a file, in a folder that exists or can be made."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise TesseraError(f"{flag} {path}: is a file, expected a folder")
    _check_parent(flag, folder)
    return folder


def make_parent(file: Path) -> Path:
    """Create the folders `file` goes in (the checks above allow missing ones)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    return file


def _check_parent(flag: str, path: Path) -> None:
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise TesseraError(f"{flag} {path}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise TesseraError(f"{flag} {path}: cannot write in {parent} (permission denied)")
            return
