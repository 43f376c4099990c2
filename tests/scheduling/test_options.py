"""Options for the admission planner, from the placement engine's ranking and routes."""

from cnbrain.bench.workload import random_requests
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import demand_units, gbps_to_mbps
from cnbrain.netmap.load import load_map
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.composed import OwnerRoutes, OwnerSegments
from cnbrain.scheduling.options import (
    CalendarKeys,
    free_bandwidth_now_on,
    ranked_sites,
    request_options,
    site_options,
)
from cnbrain.scheduling.resources import Resources

SMALL_MAP = "synthetic:provinces=3,sites_per_province=5,seed=1"


def test_keys_number_every_resource_once_with_its_capacity() -> None:
    engine = PlacementEngine(load_map(SMALL_MAP))
    a = engine.arrays
    keys = CalendarKeys(a)
    capacities = keys.capacities()
    models = a.cap_acc.shape[1]
    assert len(capacities) == a.n_sites * (3 + models) + len(a.link_cap_mbps)
    assert sorted(capacities) == list(range(len(capacities)))
    last = a.n_sites - 1
    assert capacities[keys.site(last, keys.CPU_M)] == a.cap_cpu_m[last]
    assert capacities[keys.site(0, keys.ACCELERATORS + models - 1)] == a.cap_acc[0, models - 1]
    assert capacities[keys.link(len(a.link_cap_mbps) - 1)] == a.link_cap_mbps[-1]
    assert len(Calendar(capacities, now=0)) == len(capacities)


def test_options_are_the_engines_ranked_sites_with_the_bandwidth_on_their_path() -> None:
    cmap = load_map(SMALL_MAP)
    engine = PlacementEngine(cmap)
    keys = CalendarKeys(engine.arrays)
    capacities = keys.capacities()
    requests = random_requests(cmap, count=40, seed=5)
    options = request_options(engine, requests, top_n=2)
    ranked = engine.rank_sites_many(requests, snapshot=Snapshot.empty(engine.arrays), n=2)
    assert len(options) == len(requests)
    for request, opts, (sites, _) in zip(requests, options, ranked, strict=True):
        # The ranked sites, best first, less any without a route within the latency bound.
        ranked_ids = [cmap.sites[s].id for s, _ in sites]
        positions = [ranked_ids.index(o.label) for o in opts]
        assert positions == sorted(positions)
        need = gbps_to_mbps(request.constraints.min_bandwidth_gbps)
        for option in opts:
            site = cmap.site_index[option.label]
            cpu_m = demand_units(request.resources).cpu_m
            assert option.demand[keys.site(site, keys.CPU_M)] == cpu_m
            assert set(option.demand) <= set(capacities)
            assert all(0 < amount <= capacities[key] for key, amount in option.demand.items())
            links = [k for k in option.demand if k >= keys.link(0)]
            assert all(option.demand[k] == need for k in links)
            assert bool(links) == (need > 0)
            # The same bandwidth by link id, for preemption.
            assert option.bandwidth == Resources.bandwidth(
                {cmap.links[k - keys.link(0)].id: option.demand[k] for k in links}
            )
    assert sum(len(opts) for opts in options) > len(requests)


def test_options_on_sites_already_ranked_are_those_of_the_ranking_itself() -> None:
    cmap = load_map(SMALL_MAP)
    engine = PlacementEngine(cmap)
    keys = CalendarKeys(engine.arrays)
    requests = random_requests(cmap, count=40, seed=5)
    options = request_options(engine, requests, top_n=3)
    for request, opts in zip(requests, options, strict=True):
        sites = ranked_sites(engine, request, top_n=3)
        assert site_options(engine, request, sites, keys=keys, router=engine.router) == opts
    # With routes from owners that gave no segment, no site has a route, so no option.
    silent = OwnerRoutes(cmap, engine.router, OwnerSegments())
    routed = [r for r in requests if r.constraints.min_bandwidth_gbps > 0]
    assert routed
    for request in routed:
        sites = ranked_sites(engine, request, top_n=3)
        assert site_options(engine, request, sites, keys=keys, router=silent) == ()


def test_free_bandwidth_now_is_what_a_links_calendar_has_free_at_its_now() -> None:
    cmap = load_map(SMALL_MAP)
    keys = CalendarKeys(PlacementEngine(cmap).arrays)
    calendar = Calendar(keys.capacities(), now=100)
    first, second = cmap.links[0], cmap.links[1]
    calendar.take({keys.link(0): 300}, Window(100, 200))
    calendar.take({keys.link(1): 50}, Window(150, 200))  # later: free now
    free = free_bandwidth_now_on(calendar, keys)
    assert free(first.id) == gbps_to_mbps(first.bandwidth_gbps) - 300
    assert free(second.id) == gbps_to_mbps(second.bandwidth_gbps)
    assert free("no--such-link") == 0
