"""`cnbrain usage`: a tenant's metered usage over a period (`GET /v1/usage/report`), by site,
as Slurm's `sreport` shows an account's: a row per tenant and site (jobs' attempts, core- and
accelerator-hours, cost), `-o wide` with memory, elapsed time and the cost's parts, `-o json`
the report as the API sends it (with each tenant's totals). A tenant's users see their own
tenant's; staff every tenant's, or the one `--tenant` names."""

import argparse
from datetime import UTC, datetime

from cnbrain.cli import columns
from cnbrain.cli.output import add_output_option, show
from cnbrain.cli.rest import add_connection_options, call


def moment(text: str) -> str:
    """An ISO 8601 date or time (UTC when it names no zone), for argparse; as the API takes
    it."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date or time (like 2026-11-01 or 2026-11-01T08:00Z)"
        ) from None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).isoformat()


def add_usage_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `usage` under `sub`."""
    usage = sub.add_parser(
        "usage", help="metered usage over a period: jobs, core- and accelerator-hours, cost"
    )
    usage.add_argument("--tenant", help="staff: this tenant only (default: every tenant)")
    usage.add_argument(
        "--from",
        dest="start",
        type=moment,
        help="start of the period, inclusive (default: 30 days before --to)",
    )
    usage.add_argument("--to", dest="end", type=moment, help="end, exclusive (default: now)")
    add_output_option(usage)
    add_connection_options(usage)
    usage.set_defaults(run=usage_report)


def usage_report(args: argparse.Namespace) -> int:
    params = {"from": args.start, "to": args.end, "tenant": args.tenant}
    report = call(
        args, "GET", "/v1/usage/report", params={k: v for k, v in params.items() if v is not None}
    )
    return show(report, report["rows"], columns.USAGE, args)
