"""`cnbrain netlab`: an emulated backbone of a map in network namespaces (docs/dataplane.md).

    cnbrain netlab up --map china --part provinces=ZJ,NX [--name cnl]
    cnbrain netlab link down ZJ-gw SH-gw
    cnbrain netlab hops            # the hop counters
    cnbrain netlab bench --paths 200
    cnbrain netlab down

Needs root. Exit status 0, or 2 with one line on standard error; a lab whose build fails
or is interrupted, or whose manifest cannot be kept, is removed whole.
"""

import argparse
import asyncio
import random
import sys
import time
from typing import Any

import numpy as np

from cnbrain.cli.output import Column, print_table
from cnbrain.dataplane import linux, manifest
from cnbrain.dataplane.plan import HostKind, LabPlan, PlanError, parse_part, plan_lab
from cnbrain.dataplane.steering import NetlabSteering, SteeringError
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.load import load_map

MAP_HELP = "china, synthetic:..., a .gml file, or a YAML/JSON map"
BENCH_LAB = "cnlbench"


def add_netlab_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `netlab` under `sub`."""
    netlab = sub.add_parser(
        "netlab", help="an emulated SRv6 backbone of a map in network namespaces (root)"
    ).add_subparsers(required=True, metavar="ACTION")

    up = netlab.add_parser("up", help="build the lab of a map, or of some of its provinces")
    up.add_argument("--map", default="china", help=MAP_HELP)
    up.add_argument("--part", default="", help="provinces=CODE,CODE (default: the whole map)")
    _name(up)
    up.set_defaults(run=_up)

    down = netlab.add_parser("down", help="remove every namespace of the lab")
    _name(down)
    down.set_defaults(run=_down)

    link = netlab.add_parser("link", help="take a link of the lab down, or up again")
    link.add_argument("state", choices=["down", "up"])
    link.add_argument("a", help="a node at one end")
    link.add_argument("b", help="the node at the other end")
    _name(link)
    link.set_defaults(run=_link)

    hops = netlab.add_parser("hops", help="packets each node took for its SID, by link")
    _name(hops)
    hops.set_defaults(run=_hops)

    bench = netlab.add_parser(
        "bench", help="time to install and remove paths, routes installed per second"
    )
    bench.add_argument("--map", default="china", help=MAP_HELP)
    bench.add_argument(
        "--part", default="provinces=ZJ,SH,NX", help="provinces=CODE,CODE of the lab built"
    )
    bench.add_argument("--paths", type=int, default=200, help="decisions steered (1..5000)")
    bench.add_argument("--seed", type=int, default=7)
    bench.set_defaults(run=_bench)


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="cnl", help="the lab's name (default: %(default)s)")


def _fail(message: str) -> int:
    print(f"cnbrain: {message}", file=sys.stderr)
    return 2


def _up(args: argparse.Namespace) -> int:
    try:
        cmap = load_map(args.map)
        plan = plan_lab(cmap, name=args.name, provinces=parse_part(args.part))
        started = time.perf_counter()
        _build(plan)
    except (MapError, PlanError, linux.LabError, manifest.ManifestError) as error:
        return _fail(str(error))
    kinds = {kind: sum(h.kind is kind for h in plan.hosts) for kind in HostKind}
    print(
        f"netlab {plan.name} up in {time.perf_counter() - started:.1f} s: map {plan.map_name}"
        f"{' provinces ' + ','.join(plan.provinces) if plan.provinces else ''}, "
        f"{kinds[HostKind.ROUTER]} routers, {kinds[HostKind.SITE]} sites, "
        f"{kinds[HostKind.USERS]} users' hosts, {len(plan.wires)} links"
    )
    for host in plan.hosts:
        if host.kind is HostKind.USERS:
            print(f"  users of {host.node}: ip netns exec '{host.namespace}' ...")
    return 0


def _build(plan: LabPlan) -> None:
    """Build `plan`'s lab and keep its manifest: both, or (raising) neither."""
    linux.build(plan)
    try:
        manifest.write(plan)
    except BaseException:
        linux.destroy(plan.name)
        raise


def _down(args: argparse.Namespace) -> int:
    try:
        removed = linux.destroy(args.name)
        manifest.remove(args.name)
    except (PlanError, linux.LabError, manifest.ManifestError) as error:
        return _fail(str(error))
    print(f"netlab {args.name} down: {len(removed)} namespaces removed")
    return 0


def _plan(name: str) -> LabPlan:
    plan = manifest.read(name)
    if plan is None:
        raise linux.LabError(f"netlab {name!r} is not up")
    return plan


def _link(args: argparse.Namespace) -> int:
    try:
        plan = _plan(args.name)
        linux.set_link(plan, args.a, args.b, up=args.state == "up")
    except (PlanError, linux.LabError, manifest.ManifestError) as error:
        return _fail(str(error))
    print(f"link {plan.wire(args.a, args.b).link} {args.state}")
    return 0


HOPS_COLUMNS: list[Column[tuple[tuple[str, str], int]]] = [
    Column("NODE", lambda row: row[0][0]),
    Column("LINK", lambda row: row[0][1]),
    Column("PACKETS", lambda row: str(row[1]), justify="right"),
]
"""`netlab hops`: a node, the link it took packets for its SID on (`users`: from its users),
and how many."""


def _hops(args: argparse.Namespace) -> int:
    try:
        counts = linux.hop_counts(_plan(args.name))
    except (PlanError, linux.LabError, manifest.ManifestError) as error:
        return _fail(str(error))
    print_table(sorted((key, n) for key, n in counts.items() if n), HOPS_COLUMNS)
    return 0


def _bench(args: argparse.Namespace) -> int:
    if not 1 <= args.paths <= 5000:
        return _fail("--paths: from 1 to 5000")
    try:
        cmap = load_map(args.map)
        plan = plan_lab(cmap, name=BENCH_LAB, provinces=parse_part(args.part))
        decisions = _decisions(cmap, plan, args.paths, args.seed)
        linux.destroy(BENCH_LAB)
    except (MapError, PlanError, linux.LabError) as error:
        return _fail(str(error))
    try:
        _build(plan)
        install_ms, remove_ms, headends = asyncio.run(_steer(cmap, decisions))
    except (linux.LabError, manifest.ManifestError, SteeringError) as error:
        return _fail(str(error))
    finally:
        linux.destroy(BENCH_LAB)
        manifest.remove(BENCH_LAB)
    total_s = sum(install_ms) / 1000
    print(
        f"steering on netlab of {cmap.name} ({args.part}): {len(decisions)} paths, "
        f"{headends} headends (a route, its eBPF encapsulation and its policer each)"
    )
    print(
        f"install a path: p50 {_p(install_ms, 50):.1f} ms, p99 {_p(install_ms, 99):.1f} ms; "
        f"remove: p50 {_p(remove_ms, 50):.1f} ms, p99 {_p(remove_ms, 99):.1f} ms"
    )
    print(f"routes installed per second: {headends / total_s:.0f}")
    return 0


def _p(ms: list[float], percent: int) -> float:
    return float(np.percentile(ms, percent))


def _decisions(cmap: ComputeNetworkMap, plan: LabPlan, count: int, seed: int) -> list[Decision]:
    """`count` placed decisions of small requests from the lab's access nodes to its sites
    (bandwidth 0.01 Gbps each), as the engine makes them."""
    from cnbrain.domain.request import PlacementRequest
    from cnbrain.placement.engine import PlacementEngine

    engine = PlacementEngine(cmap)
    draw = random.Random(seed)
    provinces = sorted({cmap.node_province[node] for node in plan.users_of})
    wanted: list[dict[str, Any]] = [
        {
            "source_province": draw.choice(provinces),
            "resources": {"cpu": 1, "memory_gib": 1},
            "duration_hours": 1,
            "constraints": {"min_bandwidth_gbps": 0.01, "regions_allowed": provinces},
        }
        for _ in range(count)
    ]
    requests = [PlacementRequest.model_validate(raw) for raw in wanted]
    decisions = engine.place_batch(requests, reserve=True)
    placed = [d for d in decisions if d.status is DecisionStatus.PLACED]
    if not placed:
        raise PlanError("no request of the benchmark could be placed on the lab's part")
    return placed


async def _steer(
    cmap: ComputeNetworkMap, decisions: list[Decision]
) -> tuple[list[float], list[float], int]:
    owners = [*cmap.regions, "national"]
    steerings = [NetlabSteering(lab=BENCH_LAB, owner=owner) for owner in owners]
    install_ms: list[float] = []
    remove_ms: list[float] = []
    try:
        for decision in decisions:
            started = time.perf_counter()
            for steering in steerings:
                await steering.install([decision])
            install_ms.append((time.perf_counter() - started) * 1000)
        for decision in decisions:
            started = time.perf_counter()
            for steering in steerings:
                await steering.remove([decision])
            remove_ms.append((time.perf_counter() - started) * 1000)
    finally:
        for steering in steerings:
            steering.close()
    headends = sum(len(d.path.segments) if d.path else 0 for d in decisions)
    return install_ms, remove_ms, headends
