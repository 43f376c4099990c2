"""Implementations of the `cnbrain` subcommands; each returns the process exit code."""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cnbrain.cli.progress import load_map_shown, progress
from cnbrain.domain.decision import Decision
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.errors import RequestError
from cnbrain.placement.registry import STRATEGIES
from cnbrain.placement.request_check import parse_request


def map_show(args: argparse.Namespace) -> int:
    cmap = load_map_shown(args.map)
    summary = map_summary(cmap)
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
        return 0

    def listing(counts: dict[str, Any], unit: str = "") -> str:
        return ", ".join(f"{key} {value:,}{unit}" for key, value in counts.items()) or "none"

    print(f"map {summary['name']}: {summary['description']}")
    print(f"  regions: {listing(summary['regions'], ' provinces')}")
    print(f"  provinces: {summary['provinces']}   network nodes: {summary['nodes']}")
    print(f"  sites: {summary['sites']} ({listing(summary['sites_by_kind'])})")
    print(f"  links: {summary['links']} ({listing(summary['links_by_layer'])})")
    print(f"  CPU cores: {summary['cpu_cores']:,.0f}   memory: {summary['memory_tib']:,.1f} TiB")
    print(f"  accelerators: {listing(summary['accelerators'])}")
    if summary["attribution"]:
        print(f"  attribution: {summary['attribution']}")
    return 0


def map_summary(cmap: ComputeNetworkMap) -> dict[str, Any]:
    accelerators: Counter[str] = Counter()
    for site in cmap.sites:
        accelerators.update(site.capacity.accelerators)
    return {
        "name": cmap.name,
        "description": cmap.document.description,
        "attribution": cmap.document.attribution,
        "regions": dict(Counter(p.region for p in cmap.provinces.values())),
        "provinces": len(cmap.provinces),
        "nodes": len(cmap.nodes),
        "sites": len(cmap.sites),
        "sites_by_kind": dict(Counter(s.kind.value for s in cmap.sites)),
        "links": len(cmap.links),
        "links_by_layer": dict(Counter(link.layer.value for link in cmap.links)),
        "cpu_cores": sum(s.capacity.cpu_cores for s in cmap.sites),
        "memory_tib": sum(s.capacity.memory_gib for s in cmap.sites) / 1024,
        "accelerators": {m: accelerators[m] for m in cmap.accelerator_models},
    }


def place(args: argparse.Namespace) -> int:
    raw = _read_json(args.request)
    items = raw if isinstance(raw, list) else [raw]
    requests = []
    for i, item in enumerate(items):
        try:
            request = parse_request(item)
            if request.moves_data:
                raise RequestError(
                    "flows",
                    "flows are planned over time: submit the request to a brain's queue, or "
                    "plan it with cnbrain simulate --flows",
                )
            requests.append(request)
        except RequestError as exc:
            prefix = f"[{i}]." if isinstance(raw, list) else ""
            raise RequestError(f"{args.request}: {prefix}{exc.field}", exc.message) from None
    engine = PlacementEngine(load_map_shown(args.map))
    decisions = engine.place_batch(requests, policy=args.policy, reserve=not args.quote)
    out = [_render(d, explain=args.explain) for d in decisions]
    print(json.dumps(out if isinstance(raw, list) else out[0], ensure_ascii=False, indent=2))
    return 0


def _render(decision: Decision, *, explain: bool) -> dict[str, Any]:
    return decision.model_dump(mode="json", exclude=None if explain else {"explanation"})


def _read_json(path: Path) -> Any:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RequestError(str(path), f"cannot read the request file ({exc.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(str(path), f"not valid JSON: {exc}") from None


def bench_placement(args: argparse.Namespace) -> int:
    from cnbrain.bench.placement import bench_policy, format_table

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in STRATEGIES]
    if unknown:
        print(
            f"cnbrain: unknown policy {', '.join(unknown)}; known: {', '.join(STRATEGIES)}",
            file=sys.stderr,
        )
        return 2
    cmap = load_map_shown(args.map)
    figures = []
    with progress("benchmarking policies", len(policies)) as advance:
        for policy in policies:
            figures.append(bench_policy(cmap, policy, requests=args.requests, seed=args.seed))
            advance(1)
    if args.json:
        print(json.dumps([f.as_dict() for f in figures], indent=2))
        return 0
    print(f"map {args.map}: {len(cmap.sites)} sites, {len(cmap.links)} links")
    print(f"{args.requests} requests, seed {args.seed}")
    print(format_table(figures))
    for f in figures:
        if f.gap_to_exact:
            g = f.gap_to_exact
            print(
                f"gap to exact, {f.policy}: {g.compared} requests, "
                f"within 1%: {g.within_1pct_share:.1%}, identical: {g.exact_matches_share:.1%}, "
                f"p50 {g.p50:.4%}, p95 {g.p95:.4%}, max {g.max:.4%}, misses {g.misses}"
            )
    print(
        "cold first decision (ms): "
        + ", ".join(f"{f.policy} {f.cold_first_decision_ms:.1f}" for f in figures)
    )
    return 0


def bench_map(args: argparse.Namespace) -> int:
    from cnbrain.bench.scale import bench_map as run

    figures = run(args.map, seed=args.seed)
    print(json.dumps(figures.as_dict(), indent=2))
    return 0


def bench_admission(args: argparse.Namespace) -> int:
    from cnbrain.bench.admission import bench_admission as run
    from cnbrain.bench.admission import format_figures

    if args.queued < 0 or args.running < 0 or args.top_n < 1 or not 0 <= args.flows <= 1:
        print(
            "cnbrain: --queued and --running must be at least 0, --top-n at least 1, "
            "--flows from 0 to 1",
            file=sys.stderr,
        )
        return 2
    figures = run(
        args.map,
        queued=args.queued,
        running=args.running,
        seed=args.seed,
        top_n=args.top_n,
        flows=args.flows,
        nodes=args.nodes,
    )
    print(json.dumps(figures.as_dict(), indent=2) if args.json else format_figures(figures))
    return 0


def bench_api(args: argparse.Namespace) -> int:
    import asyncio

    from cnbrain.bench.api import bench_api as run
    from cnbrain.cli.rest import token_of, url_of

    figures = asyncio.run(
        run(
            url=url_of(args),
            staff_token=token_of(args),
            requests=args.requests,
            concurrency=args.concurrency,
            seed=args.seed,
        )
    )
    print(json.dumps(figures.as_dict(), indent=2))
    return 0


def bench_federation(args: argparse.Namespace) -> int:
    import asyncio

    from cnbrain.bench.federation import bench_federation as run
    from cnbrain.cli.rest import token_of, url_of

    figures = asyncio.run(
        run(
            url=url_of(args),
            staff_token=token_of(args),
            map_spec=args.map,
            requests=args.requests,
            concurrency=args.concurrency,
            seed=args.seed,
        )
    )
    print(json.dumps(figures.as_dict(), indent=2))
    return 0
