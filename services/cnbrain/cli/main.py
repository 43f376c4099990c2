"""The `cnbrain` command line."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import RequestError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except (MapError, RequestError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    from cnbrain.cli import commands
    from cnbrain.placement.registry import DEFAULT_STRATEGY, STRATEGIES

    parser = argparse.ArgumentParser(prog="cnbrain", description="The compute-network brain.")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    map_help = (
        "china, synthetic:provinces=P,sites_per_province=S,seed=K, a .gml file, or a YAML/JSON map"
    )

    maps = sub.add_parser("map", help="inspect maps").add_subparsers(
        required=True, metavar="ACTION"
    )
    show = maps.add_parser("show", help="summarise a map")
    show.add_argument("--map", default="china", help=map_help)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=commands.map_show)

    place = sub.add_parser(
        "place", help="place one request (or a JSON list of them) and print the decision"
    )
    place.add_argument("--map", default="china", help=map_help)
    place.add_argument(
        "--request", required=True, type=Path, help="request JSON file ('-' for stdin)"
    )
    place.add_argument("--policy", default=DEFAULT_STRATEGY, choices=list(STRATEGIES))
    place.add_argument("--explain", action="store_true", help="include the explanation")
    place.add_argument("--quote", action="store_true", help="reserve nothing")
    place.set_defaults(run=commands.place)

    bench = sub.add_parser("bench", help="benchmarks that print figures").add_subparsers(
        required=True, metavar="WHAT"
    )
    placement = bench.add_parser("placement", help="throughput, latency and outcome per policy")
    placement.add_argument(
        "--map", default="synthetic:provinces=31,sites_per_province=100,seed=1", help=map_help
    )
    placement.add_argument("--requests", type=int, default=2000)
    placement.add_argument(
        "--policy",
        default="topn-cpsat,greedy,first-fit,least-allocated,most-allocated,random-feasible",
    )
    placement.add_argument("--seed", type=int, default=7)
    placement.add_argument("--json", action="store_true")
    placement.set_defaults(run=commands.bench_placement)

    scale = bench.add_parser("map", help="load time, first decision and peak memory of a map")
    scale.add_argument(
        "--map", default="synthetic:provinces=100,sites_per_province=1000,seed=1", help=map_help
    )
    scale.add_argument("--seed", type=int, default=7)
    scale.set_defaults(run=commands.bench_map)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
