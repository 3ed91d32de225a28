"""Board builds and QEMU runs report their progress (what `tessera` draws as bars on a terminal, issue 19)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tessera.cli.progress_bar import TerminalProgress
from tessera.micro import build_elf, run
from tessera.target.toolchain import SourceFile
from tessera.util.progress import C_COMPILATION, QEMU_RUNS, ProgressObserver, StepLog, observing

PROGRAM = "int main(void) { return 3; }\n"


class _Events(ProgressObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def batch_started(self, batch: str, total: int) -> None:
        self.events.append(("start", batch, str(total)))

    def batch_finished(self, batch: str) -> None:
        self.events.append(("end", batch))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("board", ["mps2-an386"])
def test_board_build_and_qemu_run_report_steps(board: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    log, events, terminal = StepLog(), _Events(), _Terminal()
    with observing(log), observing(events), observing(TerminalProgress(terminal)):
        elf = build_elf(board, [SourceFile("three.c", PROGRAM)], (), tmp_path / "out", name="three")
        result = run(board, elf)
    assert result.exit_code == 3
    assert events.events == [("start", C_COMPILATION, "2"), ("end", C_COMPILATION),
                             ("start", QEMU_RUNS, "1"), ("end", QEMU_RUNS)]
    assert sorted(s.name for s in log.of(C_COMPILATION)) == ["tessera_startup.c", "three.c"]
    (qemu,) = log.of(QEMU_RUNS)
    assert qemu.name == f"three.elf on {board}" and qemu.seconds > 0 and not qemu.cached
    assert re.search(r"QEMU runs: +100%.*1/1", terminal.getvalue())
