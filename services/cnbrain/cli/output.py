"""How the command line prints what a brain answers: a table, a wider table, or its JSON.

`-o json` prints the API's JSON as the brain sent it; the default is a table of the main
columns under a header, `-o wide` adds more (as kubectl's `-o wide`). A table is never cut to
the terminal's width, never wrapped, and its lines carry no trailing blanks. Colours (a bold
header, states and shares by how well they stand) only when standard output is a terminal,
and never with `NO_COLOR` set (rich decides both; `FORCE_COLOR` forces them).
"""

import argparse
import io
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, Final, Generic, Literal, TypeVar

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

T = TypeVar("T")

JSON: Final = "json"
WIDE: Final = "wide"
OUTPUTS: Final = (JSON, WIDE)
EMPTY: Final = "-"
"""What a cell shows for a value the brain did not give (null)."""

STATE_STYLES: Final = {
    "placed": "green",
    "submitted": "green",
    "running": "green",
    "completed": "green",
    "pending": "yellow",
    "queued": "yellow",
    "suspended": "yellow",
    "failed": "red",
    "rejected": "red",
    "cancelled": "dim",
}
"""The colour of a request's state (or of an event of that name)."""


@dataclass(frozen=True, slots=True)
class Column(Generic[T]):
    """One column: its header, its text for an item, whether only `-o wide` shows it, its
    alignment, optionally the style of its cell for an item, and its least width."""

    header: str
    text: Callable[[T], str]
    wide: bool = False
    justify: Literal["left", "right"] = "left"
    style: Callable[[T], str | None] | None = None
    min_width: int | None = None


def add_output_option(parser: argparse.ArgumentParser, *, legacy_json: bool = False) -> None:
    """`-o/--output json|wide` on `parser` (default: the table); with `legacy_json`, also
    the older `--json`, the same as `-o json`."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        help="json: the API's JSON; wide: a table with more columns (default: a table)",
    )
    if legacy_json:
        parser.add_argument(
            "--json", dest="output", action="store_const", const=JSON, help=argparse.SUPPRESS
        )


def print_json(value: Any, out: IO[str] | None = None) -> int:
    """Print `value` as indented JSON; exit status 0."""
    print(json.dumps(value, ensure_ascii=False, indent=2), file=out or sys.stdout)
    return 0


def show(
    answer: Any,
    items: Iterable[T],
    columns: Sequence[Column[T]],
    args: argparse.Namespace,
    *,
    out: IO[str] | None = None,
) -> int:
    """Print `answer` (the API's JSON) when `args.output` is json, else `items` as a table of
    `columns` (those marked `wide` only with `-o wide`); exit status 0."""
    output = getattr(args, "output", None)
    if output == JSON:
        return print_json(answer, out)
    print_table(items, [c for c in columns if output == WIDE or not c.wide], out=out)
    return 0


def print_table(
    items: Iterable[T],
    columns: Sequence[Column[T]],
    out: IO[str] | None = None,
    *,
    header: bool = True,
) -> None:
    """`items` under a header of `columns` (without it: `header` False), as the module
    docstring says. A cell's text is printed as it is, never read as markup."""
    stream = out or sys.stdout
    table = Table(
        box=None,
        pad_edge=False,
        show_edge=False,
        show_header=header,
        header_style="bold",
        padding=(0, 1, 0, 2),
    )
    for column in columns:
        table.add_column(
            column.header, justify=column.justify, no_wrap=True, min_width=column.min_width
        )
    for item in items:
        table.add_row(*(_cell(column, item) for column in columns))
    probe = Console(file=io.StringIO(), width=1_000_000)
    width = Measurement.get(probe, probe.options, table).maximum
    console = Console(file=stream, width=max(width, 1), highlight=False)
    with console.capture() as captured:
        console.print(table)
    stream.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _cell(column: Column[T], item: T) -> Text:
    style = column.style(item) if column.style is not None else None
    return Text(column.text(item), style=style or "")


def state_style(state: str | None) -> str | None:
    return STATE_STYLES.get(state or "")


def share_style(share: float | None) -> str | None:
    """Red from 90 % in use, yellow from 70 %."""
    if share is None:
        return None
    return "red" if share >= 0.9 else "yellow" if share >= 0.7 else None


def text(value: Any) -> str:
    """A cell's text for a scalar value; `EMPTY` for null or empty text."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def number(value: float | None, digits: int = 1) -> str:
    return EMPTY if value is None else f"{value:,.{digits}f}"


def percent(share: float | None) -> str:
    return EMPTY if share is None else f"{share:.0%}"


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601) as an aware datetime; None for null."""
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def duration(seconds: float | None) -> str:
    """A span as kubectl writes an age: `45s`, `12m`, `3h20m`, `5d4h`; `EMPTY` for None.
    A negative span is written as zero."""
    if seconds is None:
        return EMPTY
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 and s % 60 else f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(s // 3600, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def age(value: str | None, *, now: datetime | None = None) -> str:
    """How long ago the API timestamp `value` was."""
    moment = parse_time(value)
    if moment is None:
        return EMPTY
    return duration(((now or datetime.now(UTC)) - moment).total_seconds())


def until(value: str | None, *, now: datetime | None = None) -> str:
    """How long until the API timestamp `value` (`now` once it has passed)."""
    moment = parse_time(value)
    if moment is None:
        return EMPTY
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    return "now" if seconds <= 0 else duration(seconds)
