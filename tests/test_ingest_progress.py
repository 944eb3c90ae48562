"""`mdvdb ingest` shows its progress on a terminal (each stage, files and chunks, a rate and
an ETA) and nothing in a pipe, with --quiet or with --json: the real command on a real
pseudo-terminal (`pty`). The display writes to the terminal the command started with, not to
`sys.stderr`, which doit replaces while a stage runs (the display that wrote there showed
nothing until the run ended)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

BAR = "━"  # rich's bar


def _pages(root: Path, n: int) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"page-{i:04d}.md").write_text(f"# Page {i}\n\nNotes on topic {i % 17}.\n")
    return root


def _plain(raw: bytes) -> str:
    """The terminal's bytes without colours and cursor moves."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode("utf-8", "replace"))


def _on_terminal(*args: str, stdout_pipe: bool = False) -> tuple[str, str]:
    """Run `mdvdb` with a pseudo-terminal as its stdin and stderr (and stdout, unless
    `stdout_pipe`): what the terminal showed, and stdout when piped."""
    main, side = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("FORCE_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", *args],
        stdin=side,
        stdout=subprocess.PIPE if stdout_pipe else side,
        stderr=side,
        cwd=REPO,
        env=env,
    )
    os.close(side)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            break
        if not chunk:
            break
        shown += chunk
    out = proc.stdout.read().decode() if stdout_pipe else ""
    assert proc.wait(timeout=300) == 0, _plain(bytes(shown))
    os.close(main)
    return _plain(bytes(shown)), out


def test_the_display_draws_each_stage_with_counts_rate_and_eta():
    """The display itself on a pseudo-terminal, fed the events an ingest sends."""
    from mdvdb.cli.progress import IngestProgress

    main, side = pty.openpty()
    stream = open(side, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
    try:
        progress = IngestProgress(True, stream)
        progress("discover", 0, 0)
        progress("parse", 0, 0)
        progress("parse", 0, 500)
        time.sleep(0.15)  # each count is drawn (a display redraws at most every 0.1 s)
        progress("chunks", 310, 0)
        time.sleep(0.15)
        progress("parse", 250, 500)
        time.sleep(0.15)
        progress("parse", 500, 500)
        progress("pack", 0, 0)
        progress.close()
        stream.flush()
        shown = _plain(os.read(main, 1 << 20))
    finally:
        stream.close()
        os.close(main)
    assert "250/500 files, 310 chunks" in shown
    assert re.search(r"[\d,]+ files/s", shown) and "ETA 0:0" in shown
    assert "pack" in shown and BAR in shown
    assert "discover" not in shown  # before anything was counted: no display yet


@pytest.mark.slow
def test_progress_appears_on_a_terminal(tmp_path: Path):
    root = _pages(tmp_path / "notes", 300)
    shown, _ = _on_terminal("ingest", "--root", str(root))
    assert "300/300 files" in shown and BAR in shown, shown
    assert re.search(r"[\d,]+ chunks", shown) and "pack" in shown
    assert "300 files: 300 added" in shown  # the report follows the display


@pytest.mark.slow
def test_no_progress_in_a_pipe_with_quiet_or_with_json(tmp_path: Path):
    piped = subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(_pages(tmp_path / "a", 300))],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    assert "300 files: 300 added" in piped.stdout and BAR not in piped.stdout
    quiet, _ = _on_terminal("ingest", "--quiet", "--root", str(_pages(tmp_path / "b", 300)))
    assert BAR not in quiet and "files/s" not in quiet and "300 files:" in quiet
    shown, out = _on_terminal(
        "ingest", "--json", "--root", str(_pages(tmp_path / "c", 300)), stdout_pipe=True
    )
    assert shown == "" and '"added": 300' in out
