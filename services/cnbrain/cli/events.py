"""`cnbrain events ID [--follow]` (also `cnbrain requests events`): what happened to a
request, oldest first, as a table (`-o wide`: with each event's age) or the API's JSON.

With `--follow` the command goes on printing each new event as it comes (asking the brain
every `--interval` seconds) until the request ends (a state no other follows), then exits
0; with `-o json` it then prints one JSON object per event, a line each. Ctrl-C stops it.
An event is known by what it is (its kind, time and detail: the API gives events no id),
not by its place in the list, which the API orders by time: one stored late with an
earlier time is printed when it comes, and none twice.
"""

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote

from cnbrain.cli import columns
from cnbrain.cli.output import JSON, WIDE, add_output_option, print_table, show
from cnbrain.cli.rest import add_connection_options, call
from cnbrain.domain.states import ENDED_REQUEST

DEFAULT_INTERVAL_S: Final = 2.0
MIN_INTERVAL_S: Final = 0.1
MAX_INTERVAL_S: Final = 3600.0


def interval(text: str) -> float:
    """Seconds between two asks of `--follow`, for argparse: MIN_INTERVAL_S to
    MAX_INTERVAL_S."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}"
        )
    return seconds


def add_events_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of `events` (and `requests events`) on `parser`."""
    parser.add_argument("id", help="the request's id")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="go on printing new events until the request ends",
    )
    parser.add_argument(
        "--interval",
        type=interval,
        default=DEFAULT_INTERVAL_S,
        help=f"with --follow: seconds between two asks (default {DEFAULT_INTERVAL_S:g})",
    )
    add_output_option(parser, legacy_json=True)
    add_connection_options(parser)
    parser.set_defaults(run=events)


def add_events_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `events` under `sub`."""
    add_events_options(
        sub.add_parser(
            "events", help="what happened to a request, oldest first (--follow: as it happens)"
        )
    )


def events(args: argparse.Namespace) -> int:
    path = f"/v1/requests/{quote(args.id, safe='')}"
    if not args.follow:
        answer = call(args, "GET", f"{path}/events")
        return show(answer, answer["events"], columns.EVENTS, args)
    return follow(
        lambda: call(args, "GET", path)["state"],
        lambda: call(args, "GET", f"{path}/events")["events"],
        output=args.output,
        pause=lambda: time.sleep(args.interval),
    )


def follow(
    state: Callable[[], str],
    read: Callable[[], list[dict[str, Any]]],
    *,
    output: str | None,
    pause: Callable[[], None],
) -> int:
    """Print the events `read` gives, each once, as they come, until `state` is one that
    ends a request; `pause` between two asks. Exit status 0. Events are known by identity
    (`_identity`): one read before is not printed again wherever the list now puts it."""
    shown: Counter[str] = Counter()
    header = output != JSON
    chosen = [c for c in columns.EVENTS if output == WIDE or not c.wide]
    while True:
        now = state()  # before the events: those read next include the last one
        seen = read()
        fresh = _unseen(seen, shown)
        if output == JSON:
            for event in fresh:
                print(json.dumps(event, ensure_ascii=False))
        elif fresh or header:
            print_table(fresh, chosen, header=header)
            header = False
        sys.stdout.flush()
        if now in ENDED_REQUEST:
            return 0
        pause()


def _identity(event: dict[str, Any]) -> str:
    """What tells one event from another: its id when the API gives one, else all of it."""
    if "id" in event:
        return f"id:{event['id']}"
    return json.dumps(event, sort_keys=True, ensure_ascii=False)


def _unseen(events: list[dict[str, Any]], shown: Counter[str]) -> list[dict[str, Any]]:
    """Those of `events` not in `shown` (as many of each identity as were shown), in their
    order; `shown` then counts them too. Two events alike in everything count twice."""
    here: Counter[str] = Counter()
    fresh = []
    for event in events:
        key = _identity(event)
        here[key] += 1
        if here[key] > shown[key]:
            fresh.append(event)
            shown[key] += 1
    return fresh
