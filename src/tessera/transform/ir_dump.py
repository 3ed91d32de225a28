"""An instrument that writes the IR before and/or after chosen passes, one file per pass.

`tessera compile --print-ir-after FuseOps` uses it. Files are named
`NNN-after-FuseOps.txt`: NNN counts the files of the compilation in the
order they were written, so a folder listing reads as the pipeline, and
a nested pass (InferType inside `optimize`) comes between its Sequential's
before and after files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..relay.module import IRModule
from .pass_infra import Pass, PassInstrument

ALL_PASSES = None  # `before=ALL_PASSES`: every pass

DUMP_SUFFIX = ".txt"
_DUMP_FILE = re.compile(r"\d{3,}-(before|after)-.+" + re.escape(DUMP_SUFFIX))


def file_safe(name: str) -> str:
    """A pass name as a file name: characters other than letters, digits, `_`, `.` and `-` become `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "pass"


def is_dump_file(path: Path) -> bool:
    """Does the file name look like one this instrument writes?"""
    return _DUMP_FILE.fullmatch(path.name) is not None


class IRDumpInstrument(PassInstrument):
    """Writes the module to `folder` before the passes named in `before` and after those in `after`.

    `None` (ALL_PASSES) selects every pass; an empty collection none. The
    folder is created, and dump files of an earlier compilation in it are
    removed (other files are left alone), so the folder shows one run.
    """

    def __init__(self, folder: str | Path, *, before: Iterable[str] | None = (),
                 after: Iterable[str] | None = ()) -> None:
        self.folder = Path(folder)
        self.before = None if before is None else frozenset(before)
        self.after = None if after is None else frozenset(after)
        self.written: list[Path] = []

    def enter_pass_ctx(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.iterdir():
            if old.is_file() and is_dump_file(old):
                old.unlink()
        self.written = []

    def run_before_pass(self, mod: IRModule, pass_: Pass) -> None:
        if self.before is None or pass_.name in self.before:
            self._write("before", pass_, mod)

    def run_after_pass(self, mod: IRModule, pass_: Pass) -> None:
        if self.after is None or pass_.name in self.after:
            self._write("after", pass_, mod)

    def _write(self, when: str, pass_: Pass, mod: IRModule) -> None:
        path = self.folder / f"{len(self.written) + 1:03d}-{when}-{file_safe(pass_.name)}{DUMP_SUFFIX}"
        path.write_text(f"// {when} {pass_.name}\n{mod}\n")
        self.written.append(path)
