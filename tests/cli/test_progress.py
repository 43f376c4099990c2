"""Progress bars: drawn on standard error only when it is a terminal, advanced step by step
to the end; with standard error a pipe (a script, a test) nothing of them is written, and
what goes to standard output is the same either way."""

import io
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from rich.console import Console

from cnbrain.cli.progress import progress, while_loading

ROOT = Path(__file__).resolve().parents[2]
SMALL_MAP = "synthetic:provinces=4,sites_per_province=3,seed=1"


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _environment() -> dict[str, str]:
    """This environment without what makes rich colour or draw on any stream."""
    dropped = {"FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def test_a_bar_on_a_terminal_is_driven_to_its_end() -> None:
    screen = Terminal()
    console = Console(file=screen, width=100)
    assert console.is_terminal
    with progress("simulating", 3, console=console) as advance:
        for _ in range(3):
            advance(1)
    drawn = screen.getvalue()
    assert "simulating" in drawn and "0/3" in drawn and "3/3" in drawn, drawn
    assert "4/3" not in drawn


def test_a_pulsing_bar_gives_the_works_result() -> None:
    screen = Terminal()
    assert while_loading("loading map x", lambda: 42, console=Console(file=screen)) == 42
    assert "loading map x" in screen.getvalue()


def test_nothing_is_drawn_where_there_is_no_terminal() -> None:
    pipe = io.StringIO()
    console = Console(file=pipe)
    assert not console.is_terminal
    with progress("simulating", 3, console=console) as advance:
        advance(3)
    assert while_loading("loading", lambda: "done", console=console) == "done"
    assert pipe.getvalue() == ""


def test_simulate_and_bench_in_pipes_print_no_progress(tmp_path: Path) -> None:
    commands = [
        [
            *("simulate", "--map", SMALL_MAP, "--trace", "synthetic:jobs=40,hours=2,seed=1"),
            *("--policies", "greedy,first-fit", "--load", "0.5", "--out", str(tmp_path / "sim")),
        ],
        ["bench", "placement", "--map", SMALL_MAP, "--requests", "20", "--policy", "greedy"],
        ["map", "show", "--map", SMALL_MAP],
    ]
    for words in commands:
        done = subprocess.run(
            [sys.executable, "-m", "cnbrain.cli.main", *words],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=_environment(),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", words
        assert "\x1b[" not in done.stdout and "\r" not in done.stdout
    assert (tmp_path / "sim" / "report.md").exists()


def test_on_a_terminal_the_bar_goes_to_standard_error_only(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    words = ["bench", "placement", "--map", SMALL_MAP, "--requests", "20"]
    child = subprocess.Popen(
        [sys.executable, "-m", "cnbrain.cli.main", *words, "--policy", "greedy,first-fit"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**_environment(), "TERM": "xterm"},
        cwd=tmp_path,
    )
    os.close(follower)
    drawn = bytearray()

    def read_screen() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read_screen)
    reader.start()
    out, _ = child.communicate(timeout=300)
    reader.join(timeout=60)
    os.close(leader)
    assert child.returncode == 0
    screen = drawn.decode(errors="replace")
    assert "benchmarking policies" in screen and "2/2" in screen, screen
    printed = out.decode()
    assert printed.startswith(f"map {SMALL_MAP}: ") and "\x1b[" not in printed
