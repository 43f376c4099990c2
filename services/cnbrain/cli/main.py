"""The `cnbrain` command line.

Exit status: 0 done; 1 a submission the brain answered but rejected; 2 an error, said in one
line on standard error without a traceback (a usage error shows no secret given on the
command line).
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TypeAlias

from cnbrain import __version__
from cnbrain.domain.states import RequestState
from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import RequestError

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

MAP_HELP = (
    "china, synthetic:provinces=P,sites_per_province=S,seed=K, a .gml file, or a YAML/JSON map"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors hide the secrets of the command line
    (`hidden`: the words of the arguments that are or may be API keys)."""

    hidden: frozenset[str] = frozenset()

    def error(self, message: str) -> NoReturn:
        for word in self.hidden:
            message = message.replace(word, "***")
        super().error(message)


def _secrets(argv: Sequence[str]) -> frozenset[str]:
    """The words of `argv` that are API keys (`ck_...`) or follow an option that names a
    token or a key, as `--token ck_x` or `--token=ck_x`, also when misspelt."""
    found: set[str] = set()
    for i, word in enumerate(argv):
        option, equals, value = word.partition("=")
        named = option.startswith("-") and ("tok" in option.lower() or "key" in option.lower())
        if word.startswith("ck_") or (named and equals and value):
            found.add(value if equals else word)
        elif named and i + 1 < len(argv):
            found.add(argv[i + 1])
    return frozenset(word for word in found if word)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    _Parser.hidden = _secrets(words)
    args = _parser().parse_args(words)
    from cnbrain.cli.rest import BrainCallError

    try:
        code: int = args.run(args)
        sys.stdout.flush()
        return code
    except (MapError, RequestError, BrainCallError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of the output went away (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C (`events --follow` ends so): no traceback
        return 130


def _parser() -> argparse.ArgumentParser:
    """The whole command tree; every command sets `run`, which takes the parsed arguments
    and returns the exit status."""
    from cnbrain.cli.certs import add_certs_command
    from cnbrain.cli.completion import add_completion_command
    from cnbrain.cli.db import add_db_commands
    from cnbrain.cli.fragmentation import add_fragmentation_command
    from cnbrain.cli.netlab import add_netlab_command
    from cnbrain.cli.simulate import add_simulate_command
    from cnbrain.cli.trace import add_trace_commands

    parser: argparse.ArgumentParser = _Parser(
        prog="cnbrain", description="The compute-network brain."
    )
    parser.add_argument("--version", action="version", version=f"cnbrain {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    _add_map_commands(sub)
    _add_place_command(sub)
    _add_bench_commands(sub)
    _add_service_commands(sub)
    add_trace_commands(sub, MAP_HELP)
    add_simulate_command(sub, MAP_HELP)
    add_fragmentation_command(sub)
    add_netlab_command(sub)
    add_certs_command(sub)
    add_db_commands(sub)
    add_completion_command(sub, parser)
    return parser


def _add_map_commands(sub: Subcommands) -> None:
    """`cnbrain map show`."""
    from cnbrain.cli import commands

    maps = sub.add_parser("map", help="inspect maps").add_subparsers(
        required=True, metavar="ACTION"
    )
    show = maps.add_parser("show", help="summarise a map")
    show.add_argument("--map", default="china", help=MAP_HELP)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=commands.map_show)


def _add_place_command(sub: Subcommands) -> None:
    """`cnbrain place`: a decision on a map loaded in-process, without a running brain."""
    from cnbrain.cli import commands
    from cnbrain.cli.completion import completes_files
    from cnbrain.placement.registry import DEFAULT_STRATEGY, STRATEGIES

    place = sub.add_parser(
        "place", help="place one request (or a JSON list of them) and print the decision"
    )
    place.add_argument("--map", default="china", help=MAP_HELP)
    completes_files(
        place.add_argument(
            "--request", required=True, type=Path, help="request JSON file ('-' for stdin)"
        )
    )
    place.add_argument("--policy", default=DEFAULT_STRATEGY, choices=list(STRATEGIES))
    place.add_argument("--explain", action="store_true", help="include the explanation")
    place.add_argument("--quote", action="store_true", help="reserve nothing")
    place.set_defaults(run=commands.place)


def _add_bench_commands(sub: Subcommands) -> None:
    """`cnbrain bench placement|map|admission`, in-process, and `bench api|federation`,
    against running brains."""
    from cnbrain.cli import commands
    from cnbrain.cli.rest import add_connection_options

    bench = sub.add_parser("bench", help="benchmarks that print figures").add_subparsers(
        required=True, metavar="WHAT"
    )
    placement = bench.add_parser("placement", help="throughput, latency and outcome per policy")
    placement.add_argument(
        "--map", default="synthetic:provinces=31,sites_per_province=100,seed=1", help=MAP_HELP
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
        "--map", default="synthetic:provinces=100,sites_per_province=1000,seed=1", help=MAP_HELP
    )
    scale.add_argument("--seed", type=int, default=7)
    scale.set_defaults(run=commands.bench_map)

    admission = bench.add_parser(
        "admission", help="one admission cycle (backfill) over a full queue on the calendar"
    )
    admission.add_argument(
        "--map", default="synthetic:provinces=31,sites_per_province=100,seed=1", help=MAP_HELP
    )
    admission.add_argument("--queued", type=int, default=10_000, help="requests in the queue")
    admission.add_argument(
        "--running", type=int, default=5_000, help="requests generated as running work"
    )
    admission.add_argument("--top-n", type=int, default=3, help="options per request")
    admission.add_argument(
        "--flows", type=float, default=0.0, help="share of the queue that moves data (0 to 1)"
    )
    admission.add_argument(
        "--nodes",
        action="store_true",
        help="gangs wait for the sites' nodes and are booked on them, as in a brain's round",
    )
    admission.add_argument("--seed", type=int, default=7)
    admission.add_argument("--json", action="store_true")
    admission.set_defaults(run=commands.bench_admission)

    api = bench.add_parser("api", help="submissions/s and latency against a running brain")
    api.add_argument("--requests", type=int, default=2000)
    api.add_argument("--concurrency", type=int, default=32)
    api.add_argument("--seed", type=int, default=7)
    add_connection_options(api)
    api.set_defaults(run=commands.bench_api)

    federated = bench.add_parser(
        "federation", help="cross-region decisions/s and latency on a running `cnbrain up`"
    )
    federated.add_argument("--requests", type=int, default=500)
    federated.add_argument("--concurrency", type=int, default=16)
    federated.add_argument("--seed", type=int, default=7)
    federated.add_argument("--map", default="china", help="the federation's map")
    add_connection_options(federated)
    federated.set_defaults(run=commands.bench_federation)


def _add_service_commands(sub: Subcommands) -> None:
    """The commands that run brains, and those that call a running brain's REST API."""
    from cnbrain.cli.capacity import add_capacity_commands
    from cnbrain.cli.quote import add_quote_command
    from cnbrain.cli.usage import add_usage_command

    _add_brain_commands(sub)
    _add_tenant_commands(sub)
    _add_apikey_commands(sub)
    _add_user_commands(sub)
    _add_request_commands(sub)
    add_quote_command(sub)
    add_usage_command(sub)
    add_capacity_commands(sub)
    _add_priority_class_commands(sub)


def _add_brain_commands(sub: Subcommands) -> None:
    """`cnbrain brain regional|national` and `cnbrain up`."""
    from cnbrain.cli import federation, rest

    brain = sub.add_parser("brain", help="run a brain").add_subparsers(
        required=True, metavar="KIND"
    )
    regional = brain.add_parser("regional", help="run a regional brain (REST API)")
    regional.add_argument(
        "--database-url", help="default: $CNBRAIN_DATABASE_URL, else a SQLite file"
    )
    regional.add_argument("--redis-url", help="default: $CNBRAIN_REDIS_URL, else in-process")
    regional.add_argument("--map", help="map loaded into an empty database (default china)")
    regional.add_argument("--host")
    regional.add_argument("--port", type=int)
    regional.add_argument(
        "--metrics-port",
        type=int,
        help="port of GET /metrics (Prometheus), apart from the REST port (default: "
        "$CNBRAIN_METRICS_PORT, else none)",
    )
    regional.add_argument("--metrics-host", help="default: $CNBRAIN_METRICS_HOST, else 127.0.0.1")
    regional.add_argument("--region", help="join a federation as this region's brain")
    regional.add_argument("--national", help="host:port of the national brain's gRPC server")
    federation.add_grpc_options(regional)
    regional.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the API: replicas on one port (standalone brain with Redis)",
    )
    regional.add_argument("--log-level", default="info")
    regional.set_defaults(run=rest.brain_regional)
    federation.add_national_command(brain)
    federation.add_up_command(sub)


def _add_tenant_commands(sub: Subcommands) -> None:
    """`cnbrain tenants list|create` and `cnbrain tenants fair-share get|put|delete`
    (`tenant` is the same command)."""
    from cnbrain.cli import rest
    from cnbrain.cli.output import add_output_option

    tenant = sub.add_parser(
        "tenants", aliases=["tenant"], help="list, create and manage tenants"
    ).add_subparsers(required=True, metavar="ACTION")
    listing = tenant.add_parser("list", help="the tenants (operators and admins)")
    add_output_option(listing)
    rest.add_connection_options(listing)
    listing.set_defaults(run=rest.tenants_list)
    create = tenant.add_parser("create", help="create a tenant (prints it as JSON)")
    create.add_argument("id")
    create.add_argument("--name")
    rest.add_connection_options(create)
    create.set_defaults(run=rest.tenant_create)
    _add_fair_share_commands(tenant)


def _add_fair_share_commands(tenant: Subcommands) -> None:
    """`cnbrain tenant fair-share get|put|delete TENANT`."""
    from cnbrain.cli import rest

    shares = tenant.add_parser(
        "fair-share", help="a tenant's weight in the admission order, its cohort and quotas"
    ).add_subparsers(required=True, metavar="ACTION")
    get = shares.add_parser("get", help="the tenant's fair share (the defaults if none is set)")
    get.add_argument("tenant")
    rest.add_connection_options(get)
    get.set_defaults(run=rest.fair_share_get)
    put = shares.add_parser(
        "put",
        help="set the tenant's whole fair share (operators and admins); "
        "what it does not name is the default",
    )
    put.add_argument("tenant")
    put.add_argument("--weight", type=float, default=1.0, help="its weight (default 1)")
    put.add_argument("--cohort", help="the cohort it lends and borrows quota in")
    for prefix, what in (("nominal", "its nominal quota"), ("borrow", "its borrowing limit")):
        put.add_argument(f"--{prefix}-cpu", type=float, metavar="CORES", help=f"{what}: cores")
        put.add_argument(
            f"--{prefix}-memory-gib", type=float, metavar="GIB", help=f"{what}: memory GiB"
        )
        put.add_argument(
            f"--{prefix}-storage-gib", type=float, metavar="GIB", help=f"{what}: storage GiB"
        )
        put.add_argument(
            f"--{prefix}-accelerator",
            type=rest.model_count,
            action="append",
            default=[],
            metavar="MODEL=COUNT",
            help=f"{what}: accelerators of a model (repeat for more models)",
        )
    rest.add_connection_options(put)
    put.set_defaults(run=rest.fair_share_put)
    delete = shares.add_parser(
        "delete", help="delete the tenant's fair share: the defaults again (operators and admins)"
    )
    delete.add_argument("tenant")
    rest.add_connection_options(delete)
    delete.set_defaults(run=rest.fair_share_delete)


def _add_apikey_commands(sub: Subcommands) -> None:
    """`cnbrain keys create|list|revoke` (`apikey` is the same command)."""
    from cnbrain.cli import rest
    from cnbrain.cli.output import add_output_option

    apikey = sub.add_parser(
        "keys", aliases=["apikey"], help="list, create and revoke API keys"
    ).add_subparsers(required=True, metavar="ACTION")
    key = apikey.add_parser(
        "create",
        help="create an API key (and its user, unless --user); prints it, with its secret, as JSON",
    )
    key.add_argument("--user", help="an existing user's id")
    key.add_argument("--tenant", help="the new user's tenant")
    key.add_argument("--name", default="cli-user", help="the new user's name")
    key.add_argument(
        "--role",
        default="tenant-user",
        choices=["tenant-user", "tenant-admin", "operator", "admin"],
    )
    rest.add_connection_options(key)
    key.set_defaults(run=rest.apikey_create)
    keys = apikey.add_parser("list", help="list a user's API keys (never their secrets)")
    keys.add_argument("--user", required=True, help="the user's id")
    add_output_option(keys)
    rest.add_connection_options(keys)
    keys.set_defaults(run=rest.apikey_list)
    revoke = apikey.add_parser("revoke", help="revoke an API key (prints it as JSON)")
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id (ck_...)")
    revoke.add_argument("--user", required=True, help="the id of the key's user")
    rest.add_connection_options(revoke)
    revoke.set_defaults(run=rest.apikey_revoke)


def _add_user_commands(sub: Subcommands) -> None:
    """`cnbrain user disable`."""
    from cnbrain.cli import rest

    user = sub.add_parser("user", help="manage users").add_subparsers(
        required=True, metavar="ACTION"
    )
    disable = user.add_parser("disable", help="disable a user: none of its keys works any more")
    disable.add_argument("user_id", metavar="USER_ID")
    rest.add_connection_options(disable)
    disable.set_defaults(run=rest.user_disable)


def _add_request_commands(sub: Subcommands) -> None:
    """`cnbrain submit`, `cnbrain submit-group`, `cnbrain requests list|show|cancel|events|why`,
    `cnbrain events`, `cnbrain queue` and `cnbrain routes`."""
    from cnbrain.cli import rest
    from cnbrain.cli.completion import completes_files
    from cnbrain.cli.events import add_events_command, add_events_options
    from cnbrain.cli.output import add_output_option

    submit = sub.add_parser("submit", help="submit a request to a running brain")
    completes_files(submit.add_argument("file", type=Path, help="request JSON ('-' for stdin)"))
    submit.add_argument("--idempotency-key")
    rest.add_connection_options(submit)
    submit.set_defaults(run=rest.submit)

    group = sub.add_parser(
        "submit-group", help="submit related requests, placed together or spread, all or none"
    )
    completes_files(group.add_argument("file", type=Path, help="group JSON ('-' for stdin)"))
    rest.add_connection_options(group)
    group.set_defaults(run=rest.submit_group)

    reqs = sub.add_parser(
        "requests",
        help="list, show or cancel requests, show their events, or why one waits",
    ).add_subparsers(required=True, metavar="ACTION")
    listing = reqs.add_parser("list", help="the requests, newest first (staff: every tenant's)")
    listing.add_argument("--state", choices=[state.value for state in RequestState])
    listing.add_argument("--limit", type=int, help="at most this many (1 to 500, default 50)")
    listing.add_argument("--cursor", help="the next page, as the last one said")
    add_output_option(listing, legacy_json=True)
    rest.add_connection_options(listing)
    listing.set_defaults(run=rest.requests_list)
    for action, run, what in (
        ("show", rest.requests_show, "a request with its decision, as JSON"),
        ("cancel", rest.requests_cancel, "cancel a request: release what it holds"),
    ):
        one = reqs.add_parser(action, help=what)
        one.add_argument("id")
        rest.add_connection_options(one)
        one.set_defaults(run=run)
    add_events_options(
        reqs.add_parser("events", help="what happened to a request, oldest first (as `events`)")
    )
    add_events_command(sub)
    why = reqs.add_parser(
        "why", help="why a request waits: its place, estimated start and what blocks it"
    )
    why.add_argument("id")
    rest.add_connection_options(why)
    why.set_defaults(run=rest.requests_why)
    queue = sub.add_parser("queue", help="the region's admission queue, in order")
    queue.add_argument("--after", type=int, help="from this position on (exclusive)")
    queue.add_argument("--limit", type=int, help="at most this many (1 to 500, default 50)")
    add_output_option(queue, legacy_json=True)
    rest.add_connection_options(queue)
    queue.set_defaults(run=rest.queue_list)
    routes = sub.add_parser(
        "routes", help="the best routes between two sites, each segment by its owner"
    )
    routes.add_argument("from_site")
    routes.add_argument("to_site")
    routes.add_argument("--routes", type=int, default=3, help="how many (1 to 8)")
    routes.add_argument(
        "--min-free-gbps", type=float, default=0.0, help="leave out links with less free"
    )
    routes.add_argument("--json", action="store_true")
    rest.add_connection_options(routes)
    routes.set_defaults(run=rest.routes_between)


def _add_priority_class_commands(sub: Subcommands) -> None:
    """`cnbrain priority-classes list|put|delete`."""
    from cnbrain.cli import rest
    from cnbrain.cli.output import add_output_option

    classes = sub.add_parser(
        "priority-classes", help="list, put or delete priority classes"
    ).add_subparsers(required=True, metavar="ACTION")
    listing = classes.add_parser("list", help="the classes, highest value first")
    add_output_option(listing, legacy_json=True)
    rest.add_connection_options(listing)
    listing.set_defaults(run=rest.priority_classes_list)
    put = classes.add_parser("put", help="create or replace a class (operators and admins)")
    put.add_argument("name")
    put.add_argument("--value", type=int, required=True, help="higher classes go first")
    put.add_argument(
        "--preemptible",
        action=argparse.BooleanOptionalAction,
        required=True,
        help="whether higher classes may preempt its work",
    )
    put.add_argument(
        "--max-wait-s",
        type=float,
        required=True,
        help="the default max wait of its requests, in seconds",
    )
    put.add_argument(
        "--default", action="store_true", help="make it the class of requests that name none"
    )
    rest.add_connection_options(put)
    put.set_defaults(run=rest.priority_classes_put)
    delete = classes.add_parser("delete", help="delete a class (operators and admins)")
    delete.add_argument("name")
    rest.add_connection_options(delete)
    delete.set_defaults(run=rest.priority_classes_delete)


if __name__ == "__main__":
    raise SystemExit(main())
