"""How the command line prints tables: a header, aligned columns never cut nor wrapped, no
trailing blanks, a cell's text as it is; colours only on a terminal without NO_COLOR;
`-o wide` adds columns, `-o json` prints the API's JSON."""

import argparse
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from cnbrain.cli.output import (
    Column,
    add_output_option,
    age,
    duration,
    print_table,
    show,
    state_style,
    until,
)

Row = dict[str, str]
COLUMNS: tuple[Column[Row], ...] = (
    Column("ID", lambda r: r["id"]),
    Column("STATE", lambda r: r["state"], style=lambda r: state_style(r["state"])),
    Column("COUNT", lambda r: r["count"], justify="right"),
    Column("REASON", lambda r: r["reason"], wide=True),
)
ROWS = [
    {"id": "req-" + "0" * 60, "state": "placed", "count": "7", "reason": "-"},
    {"id": "r2", "state": "rejected", "count": "12", "reason": "[bold]no[/] 浙江 " + "x" * 300},
]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _args(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_output_option(parser, legacy_json=True)
    return parser.parse_args(list(words))


def test_a_table_in_a_pipe_is_plain_aligned_and_whole() -> None:
    out = io.StringIO()
    assert show({"items": ROWS}, ROWS, COLUMNS, _args("-o", "wide"), out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["ID", "STATE", "COUNT", "REASON"]
    assert "\x1b[" not in out.getvalue()
    assert all(line == line.rstrip() for line in lines)
    assert lines[1].split()[:3] == [ROWS[0]["id"], "placed", "7"]
    assert lines[2].endswith(ROWS[1]["reason"])  # neither cut nor wrapped, markup as text
    state = lines[0].index("STATE")
    assert lines[1].index("placed") == lines[2].index("rejected") == state
    count_end = lines[0].index("COUNT") + len("COUNT")
    assert lines[1][count_end - 1] == "7" and lines[2][count_end - 2 : count_end] == "12"


def test_the_default_table_leaves_the_wide_columns_out_and_json_is_the_answer() -> None:
    out = io.StringIO()
    show({"items": ROWS}, ROWS, COLUMNS, _args(), out=out)
    assert out.getvalue().splitlines()[0].split() == ["ID", "STATE", "COUNT"]
    for words in (["-o", "json"], ["--json"]):
        out = io.StringIO()
        show({"items": ROWS, "next": None}, ROWS, COLUMNS, _args(*words), out=out)
        assert json.loads(out.getvalue()) == {"items": ROWS, "next": None}


def test_an_empty_table_is_its_header() -> None:
    out = io.StringIO()
    print_table([], COLUMNS, out)
    assert out.getvalue() == "ID   STATE   COUNT   REASON\n"


def test_colours_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TERM"):
        monkeypatch.delenv(name, raising=False)
    terminal = Terminal()
    print_table(ROWS, COLUMNS, terminal)
    coloured = terminal.getvalue()
    assert "\x1b[1m" in coloured  # a bold header
    assert "\x1b[32mplaced" in coloured and "\x1b[31mrejected" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    plain = Terminal()
    print_table(ROWS, COLUMNS, plain)
    assert "\x1b[32m" not in plain.getvalue() and "\x1b[31m" not in plain.getvalue()
    assert "placed" in plain.getvalue()


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (None, "-"),
        (-5, "0s"),
        (59, "59s"),
        (61, "1m1s"),
        (600, "10m"),
        (3600, "1h"),
        (3 * 3600 + 20 * 60 + 7, "3h20m"),
        (5 * 86400 + 4 * 3600, "5d4h"),
        (2 * 86400, "2d"),
    ],
)
def test_durations_read_as_kubectl_ages(seconds: float | None, written: str) -> None:
    assert duration(seconds) == written


def test_ages_and_waits_from_api_timestamps() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert age((now - timedelta(minutes=90)).isoformat(), now=now) == "1h30m"
    assert age("2026-12-01T11:59:30", now=now) == "30s"  # no zone: UTC
    assert until((now + timedelta(hours=2)).isoformat(), now=now) == "2h"
    assert until((now - timedelta(hours=2)).isoformat(), now=now) == "now"
    assert age(None) == until(None) == "-"
