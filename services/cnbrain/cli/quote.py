"""`cnbrain quote FILE`: what the brain would decide for a request now, without submitting it
and reserving nothing (`POST /v1/quotes`): the chosen site with its cost, latency, energy and
carbon, then every candidate it weighed, best first (the chosen one ranked 1). Exit status 1
when no site fits (as `cnbrain submit` for a rejected request)."""

import argparse
import sys
from pathlib import Path
from typing import Any

from cnbrain.cli import columns
from cnbrain.cli.completion import completes_files
from cnbrain.cli.output import JSON, WIDE, add_output_option, number, print_json, print_table
from cnbrain.cli.rest import REJECTED, add_connection_options, call, read_body


def add_quote_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `quote` under `sub`."""
    quote = sub.add_parser(
        "quote", help="what the brain would decide for a request now; nothing is reserved"
    )
    completes_files(quote.add_argument("file", type=Path, help="request JSON ('-' for stdin)"))
    add_output_option(quote)
    add_connection_options(quote)
    quote.set_defaults(run=quote_request)


def quote_request(args: argparse.Namespace) -> int:
    answer = call(args, "POST", "/v1/quotes", json=read_body(args))
    decision = answer["decision"]
    status = REJECTED if decision["status"] == "rejected" else 0
    if args.output == JSON:
        print_json(answer)
        return status
    for note in answer.get("notes", ()):
        print(f"note: {note}", file=sys.stderr)
    if status:
        print(f"no site fits: {decision.get('reason') or 'rejected'}")
        return status
    outcome = decision.get("outcome") or {}
    print(
        f"{decision['site']} (province {decision.get('province') or '-'}, "
        f"{decision.get('site_kind') or '-'}) by {decision['policy']}; nothing is reserved"
    )
    print(
        f"cost {number(outcome.get('cost_cny'), 2)} CNY   "
        f"latency {number(outcome.get('latency_ms'), 3)} ms   "
        f"energy {number(outcome.get('energy_kwh'), 1)} kWh   "
        f"carbon {number(outcome.get('carbon_kg'), 1)} kg"
    )
    print()
    chosen = [c for c in columns.CANDIDATES if args.output == WIDE or not c.wide]
    print_table(ranked(answer), chosen)
    return 0


def ranked(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The chosen site (rank 1), then the alternatives by objective (those without one
    last), each with its rank and `versus`: how far its objective is from the chosen
    site's."""
    decision = answer["decision"]
    weighed = (decision.get("explanation") or {}).get("candidates") or ()
    best = next((dict(c) for c in weighed if c["site"] == decision["site"]), None)
    if best is None:
        best = {"site": decision["site"], "score": None}
    best["objective"] = (decision.get("outcome") or {}).get("objective", best.get("objective"))
    others = sorted(
        answer["alternatives"],
        key=lambda c: (c.get("objective") is None, c.get("objective") or 0.0),
    )
    base = best["objective"]
    rows = []
    for rank, one in enumerate([best, *others], 1):
        objective = one.get("objective")
        versus = "-"
        if rank > 1 and objective is not None and base:
            versus = f"{(objective - base) / abs(base):+.1%}"
        rows.append({**one, "rank": rank, "versus": versus})
    return rows
