"""Options of jobs that move data (site, routes, rates, windows) and the rules that choose.

On the tiny map (tests/tiny_map.py): a dataset at CC-hub reaches AA-dc over CC-hub -> CC-agg1
-> CC-gw -> BB-gw -> AA-gw -> AA-agg1 -> AA-dc; its narrowest link is a site's attachment
(100 Gbps). 1000 GB at 10 Gbps takes 800 s.
"""

import math

import pytest

from cnbrain.domain.decision import SegmentKind
from cnbrain.domain.errors import Invalid
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Serving, Staging
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.request_check import check_flows
from cnbrain.routing.router import SegmentRouter
from cnbrain.scheduling import congestion, flow_choice
from cnbrain.scheduling.flow_options import (
    FlowJob,
    FlowRoutes,
    flow_options,
    least_lead,
    transfer_seconds,
)
from cnbrain.scheduling.options import CalendarKeys

HOUR = 3600


@pytest.fixture(scope="module")
def routes(tiny_map: ComputeNetworkMap) -> FlowRoutes[CalendarKeys]:
    arrays = MapArrays.build(tiny_map)
    return FlowRoutes(arrays, SegmentRouter(arrays), CalendarKeys(arrays))


NO_FLOWS = Flows()


def _job(flows: Flows = NO_FLOWS, **kw: object) -> FlowJob:
    keys = CalendarKeys.ACCELERATORS
    base: dict[str, object] = {
        "id": "j",
        "compute": ((CalendarKeys.CPU_M, 4000), (keys, 2000)),
        "duration": HOUR,
        "access_node": "AA-acc",
        "flows": flows,
    }
    return FlowJob(**{**base, **kw})  # type: ignore[arg-type]


def _site(routes: FlowRoutes[CalendarKeys], site_id: str) -> int:
    return routes.arrays.map.site_index[site_id]


def _calendar(routes: FlowRoutes[CalendarKeys]) -> Calendar[int]:
    return Calendar(routes.keys.capacities(), now=0)


STAGED = Flows(
    staging=(Staging(source=Endpoint(site="CC-hub"), volume_gb=1000.0, max_rate_gbps=10.0),),
    delivery=(Delivery(destination=Endpoint(province="AA"), volume_gb=100.0),),
)


def test_each_rate_step_stages_before_the_start_and_delivers_after_the_end(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    options = flow_options(_job(STAGED), _site(routes, "AA-dc"), routes)
    assert [o.step for o in options] == [1.0, 0.5, 0.25]
    for option, mbps, seconds in zip(
        options, (10_000, 5_000, 2_500), (800, 1600, 3200), strict=True
    ):
        staging, delivery = option.legs
        assert (staging.kind, staging.mbps, staging.offset, staging.duration) == (
            "staging",
            mbps,
            -seconds,
            seconds,
        )
        assert option.lead == seconds == option.demand.lead
        # Delivery has no rate cap: the narrowest link of AA-acc <-> AA-dc (100 Gbps), scaled.
        assert delivery.kind == "delivery" and delivery.offset == HOUR
        assert delivery.mbps == int(100_000 * option.step)
        assert delivery.duration == transfer_seconds(100.0, delivery.mbps)
        assert option.tail == delivery.duration
    staging = options[0].legs[0]
    assert [(s.kind, s.owner) for s in staging.route.segments] == [
        (SegmentKind.SOURCE, "west"),
        (SegmentKind.BACKBONE, "national"),
        (SegmentKind.DESTINATION, "east"),
    ]
    keys = routes.keys
    held = {(p.key, p.offset, p.duration): p.amount for p in options[0].demand.parts}
    for link in staging.route.links:
        assert held[(keys.link(link), -800, 800)] == 10_000
    assert held[(keys.site(_site(routes, "AA-dc"), keys.CPU_M), 0, HOUR)] == 4000


def test_a_dataset_at_the_site_moves_nothing_and_a_stream_holds_its_rate_over_the_run(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    here = Flows(staging=(Staging(source=Endpoint(site="AA-dc"), volume_gb=1e6),))
    (option,) = flow_options(_job(here), _site(routes, "AA-dc"), routes)
    assert option.legs == () and option.lead == 0
    stream = Flows(
        staging=(Staging(source=Endpoint(province="BB"), volume_gb=450.0, mode="stream"),)
    )
    (option,) = flow_options(_job(stream), _site(routes, "AA-dc"), routes)
    (leg,) = option.legs
    assert (leg.kind, leg.offset, leg.duration) == ("stream", 0, HOUR)
    assert leg.mbps == math.ceil(450 * 8000 / HOUR)


def test_the_least_lead_bounds_every_option_and_marks_sites_without_one(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    job = _job(STAGED)
    site = _site(routes, "AA-dc")
    assert least_lead(job, site, routes) == min(o.lead for o in flow_options(job, site, routes))
    assert least_lead(job, _site(routes, "CC-hub"), routes) == 0
    assert least_lead(_job(max_latency_ms=0.5), site, routes) is None


def test_serving_and_continuous_bandwidth_hold_the_run_within_their_bounds(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    far = Flows(serving=Serving(provinces=("AA", "BB"), rate_gbps=2.0, max_latency_ms=1.0))
    assert flow_options(_job(far), _site(routes, "AA-dc"), routes) == []
    near = Flows(serving=Serving(provinces=("AA", "BB"), rate_gbps=2.0, max_latency_ms=5.0))
    (option,) = flow_options(_job(near, continuous_mbps=5000), _site(routes, "AA-dc"), routes)
    kinds = [(leg.kind, leg.peer, leg.mbps, leg.offset, leg.duration) for leg in option.legs]
    assert kinds == [
        ("continuous", "AA-acc", 5000, 0, HOUR),
        ("serving", "province AA", 2000, 0, HOUR),
        ("serving", "province BB", 2000, 0, HOUR),
    ]
    assert flow_options(_job(max_latency_ms=0.5), _site(routes, "AA-dc"), routes) == []


def test_flows_are_routed_around_the_links_to_avoid(routes: FlowRoutes[CalendarKeys]) -> None:
    links = routes.arrays.link_index
    cut = frozenset({links["AA-acc--AA-agg1"], links["AA-gw--AA-agg1"]})
    avoiding = FlowRoutes(routes.arrays, routes.router, routes.keys, avoid=cut)
    job = _job(
        Flows(
            staging=(Staging(source=Endpoint(site="AA-dc"), volume_gb=10.0),),
            delivery=(Delivery(destination=Endpoint(province="AA"), volume_gb=1.0),),
        ),
        continuous_mbps=1000,
    )
    for site_id in ("AA-idle", "CC-hub"):
        plain = flow_options(job, _site(routes, site_id), routes)
        around = flow_options(job, _site(routes, site_id), avoiding)
        assert around, site_id
        assert any(not cut.isdisjoint(leg.route.links) for o in plain for leg in o.legs)
        for option in around:
            for leg in option.legs:
                assert cut.isdisjoint(leg.route.links), (site_id, leg.kind)
                assert leg.route.links, (site_id, leg.kind)
    (option, *_) = flow_options(job, _site(routes, "AA-idle"), avoiding)
    continuous = next(leg for leg in option.legs if leg.kind == "continuous")
    assert continuous.route.segments[0].path.nodes[:2] == ("AA-acc", "AA-gw")


def test_flow_ends_the_map_lacks_are_refused_by_field(routes: FlowRoutes[CalendarKeys]) -> None:
    with pytest.raises(Invalid) as info:
        check_flows(
            routes.arrays.map,
            Flows(staging=(Staging(source=Endpoint(site="nowhere"), volume_gb=1.0),)),
        )
    assert info.value.field == "flows.staging.0.source.site"
    with pytest.raises(Invalid) as info:
        check_flows(
            routes.arrays.map,
            Flows(delivery=(Delivery(destination=Endpoint(province="ZZ"), volume_gb=1.0),)),
        )
    assert info.value.field == "flows.delivery.0.destination.province"
    with pytest.raises(Invalid) as info:
        check_flows(
            routes.arrays.map,
            Flows(serving=Serving(provinces=("ZZ",), rate_gbps=1.0, max_latency_ms=9.0)),
        )
    assert info.value.field == "flows.serving.provinces.0"


def test_faster_staging_buys_an_earlier_start_unless_its_links_are_full(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    options = flow_options(_job(STAGED), _site(routes, "AA-dc"), routes)
    calendar = _calendar(routes)
    timed = flow_choice.feasible(options, calendar, not_before=0, deadline=4 * HOUR)
    assert [(t.option.step, t.start) for t in timed] == [(1.0, 800), (0.5, 1600), (0.25, 3200)]
    assert flow_choice.earliest(timed) == timed[0]
    # The backbone BB-gw -- CC-gw keeps 5 Gbps free for three hours: full rate waits for it.
    cmap = routes.arrays.map
    backbone = int(cmap.graph["BB-gw"]["CC-gw"]["idx"])
    calendar.take({routes.keys.link(backbone): 395_000}, Window(0, 3 * HOUR))
    timed = flow_choice.feasible(options, calendar, not_before=0, deadline=4 * HOUR)
    assert [(t.option.step, t.start) for t in timed] == [
        (1.0, 3 * HOUR + 800),
        (0.5, 1600),
        (0.25, 3200),
    ]
    assert flow_choice.earliest(timed) == timed[1]
    # Within a deadline of 1500 s no rate stages the data in time.
    assert flow_choice.feasible(options, calendar, not_before=0, deadline=1500) == []


def test_scarcity_prefers_the_less_loaded_site_and_candidates_follow_the_load(
    routes: FlowRoutes[CalendarKeys],
) -> None:
    job = _job(compute=((CalendarKeys.ACCELERATORS, 4000),))
    calendar = _calendar(routes)
    keys = routes.keys
    bb_dc, bb_hub = _site(routes, "BB-dc"), _site(routes, "BB-hub")
    calendar.take({keys.site(bb_dc, keys.ACCELERATORS): 4000}, Window(0, 2 * HOUR))
    options = [o for site in (bb_dc, bb_hub) for o in flow_options(job, site, routes)]
    timed = flow_choice.feasible(options, calendar, not_before=0, deadline=HOUR)
    objective = {bb_dc: 1.0, bb_hub: 1.0}
    assert flow_choice.earliest(timed).option.site == bb_dc  # type: ignore[union-attr]
    chosen = flow_choice.scarcity(calendar, timed, duration=HOUR, objective=objective)
    assert chosen is not None and chosen.option.site == bb_hub
    # BB-dc at 8/8 costs its whole share; BB-hub at 4/16 far less.
    full, quarter = (
        congestion.price(calendar, t.option.demand, t.option.compute, 0, duration=HOUR)
        for t in timed[:2]
    )
    assert full == pytest.approx(1.0) and 0 < quarter < 0.05
    # A much better objective outweighs the load.
    better = flow_choice.scarcity(
        calendar, timed, duration=HOUR, objective={bb_dc: 0.0, bb_hub: 2.0}
    )
    assert better is not None and better.option.site == bb_dc
    top = flow_choice.candidates(
        calendar,
        [(bb_dc, 1.0), (bb_hub, 1.0), (_site(routes, "CC-hub"), 1.5)],
        job.compute,
        lead=lambda site: 0,
        site_key=keys.site,
        start=0,
        deadline=HOUR,
        duration=HOUR,
        n=2,
    )
    assert [site for site, _ in top] == [bb_hub, _site(routes, "CC-hub")]
    # With BB-dc full for two hours and no option on CC-hub, only BB-hub is left.
    calendar.take({keys.site(bb_dc, keys.ACCELERATORS): 4000}, Window(0, 2 * HOUR))
    top = flow_choice.candidates(
        calendar,
        [(bb_dc, 1.0), (bb_hub, 5.0), (_site(routes, "CC-hub"), 0.0)],
        job.compute,
        lead=lambda site: None if site == _site(routes, "CC-hub") else 0,
        site_key=keys.site,
        start=0,
        deadline=HOUR - 1,
        duration=HOUR,
        n=1,
    )
    assert top == [(bb_hub, 5.0)]
