"""Progress bars for long work (a simulation's runs, a benchmark's policies, loading a map),
drawn on standard error only when it is a terminal, and erased when the work ends.

Anywhere else (a pipe, a file, a test) nothing is drawn and nothing is written: what the
command prints is the same with and without a terminal. While a bar is drawn, what the
command prints on standard output still goes there (above the bar when both are the same
terminal). With `NO_COLOR` the bar has no
colour (rich decides colours; `FORCE_COLOR` makes any stream count as a terminal).
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from cnbrain.netmap.compute_map import ComputeNetworkMap

T = TypeVar("T")

Advance = Callable[[int], None]
"""Marks that many more steps done."""


def _nothing(steps: int) -> None:
    del steps


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_console(stream: IO[str] | None = None) -> Console:
    """The console a bar is drawn on: `stream`, else standard error."""
    return Console(file=stream, stderr=stream is None, highlight=False)


@contextmanager
def progress(
    description: str, total: int | None, *, console: Console | None = None
) -> Iterator[Advance]:
    """Within the block, a bar of `total` steps (None: work of unknown length, a pulsing
    bar) labelled `description`, advanced by the function the block is given; drawn on
    `console` (standard error's by default) when it is a terminal, else nothing at all."""
    shown = console if console is not None else progress_console()
    if not shown.is_terminal:
        yield _nothing
        return
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=shown,
        transient=True,
        # What the command prints meanwhile goes above the bar when it goes to the same
        # terminal, and straight to its file or pipe when it does not.
        redirect_stdout=_is_terminal(sys.stdout),
    )
    with bar:
        task = bar.add_task(description, total=total)

        def advance(steps: int) -> None:
            bar.advance(task, steps)

        yield advance


def while_loading(description: str, work: Callable[[], T], *, console: Console | None = None) -> T:
    """`work()`, under a pulsing bar labelled `description` (`progress`)."""
    with progress(description, None, console=console):
        return work()


def load_map_shown(spec: str, *, console: Console | None = None) -> ComputeNetworkMap:
    """The map `spec` (`cnbrain.netmap.load.load_map`), loaded under a pulsing bar."""
    from cnbrain.netmap.load import load_map

    return while_loading(f"loading map {spec}", lambda: load_map(spec), console=console)
