"""`cnbrain sites` and `cnbrain links`: what the brain's sites and links hold and have free
now (`GET /v1/capacity/sites`, `GET /v1/capacity/links`; operators and admins), as Slurm's
`sinfo` shows partitions. A standalone brain shows its whole map; a regional brain of a
federation what its region owns."""

import argparse
import math

from cnbrain.cli import columns
from cnbrain.cli.output import add_output_option, show
from cnbrain.cli.rest import add_connection_options, call
from cnbrain.domain.enums import LinkLayer


def share(text: str) -> float:
    """A share from 0 to 1, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share from 0 to 1")
    return value


def add_capacity_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `sites` and `links` under `sub`."""
    sites = sub.add_parser(
        "sites", help="sites with their capacity and what is free now, by accelerator model"
    )
    sites.add_argument("--province", help="only the sites of this province (its code)")
    sites.add_argument("--model", help="only the sites with accelerators of this model")
    add_output_option(sites)
    add_connection_options(sites)
    sites.set_defaults(run=sites_list)

    links = sub.add_parser("links", help="links with their capacity and what is reserved now")
    links.add_argument(
        "--layer", choices=[layer.value for layer in LinkLayer], help="only the links of this layer"
    )
    links.add_argument(
        "--busy",
        type=share,
        metavar="SHARE",
        help="only the links with at least this share of their capacity in use (0 to 1)",
    )
    add_output_option(links)
    add_connection_options(links)
    links.set_defaults(run=links_list)


def sites_list(args: argparse.Namespace) -> int:
    """The sites (those of `--province` or with `--model` only), a row each."""
    found = [
        site
        for site in call(args, "GET", "/v1/capacity/sites")
        if (args.province is None or site["province"] == args.province)
        and (args.model is None or args.model in site["capacity"]["accelerators"])
    ]
    return show(found, found, columns.SITES, args)


def links_list(args: argparse.Namespace) -> int:
    """The links (those of `--layer`, or at least `--busy` in use, only), a row each."""
    found = [
        link
        for link in call(args, "GET", "/v1/capacity/links")
        if (args.layer is None or link["layer"] == args.layer)
        and (args.busy is None or link["utilisation"] >= args.busy)
    ]
    return show(found, found, columns.LINKS, args)
