"""Planning a waiting cross-region request over time: its options split by owner, one calendar
joined from the backbone's and the regions' timelines, and its earliest start on it; a
request with flows, whose staging waits for the backbone, and its flows split among the
owners of their routes."""

from dataclasses import dataclass
from typing import Any

import pytest

from cnbrain.domain.bounds import MAX_EPOCH_S
from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import WireError
from cnbrain.federation.timelines import (
    key_of,
    planned_gang_messages,
    planned_gangs_of,
    steps_of,
    timeline_message,
)
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.keys import ResourceKey, accelerator_key, link_key
from cnbrain.ledger.nodes import Gang
from cnbrain.ledger.timed_demand import Part, TimedDemand
from cnbrain.national import flow_parts, planner, wait_planner
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.flow_requests import flow_holds, flow_plan_options
from cnbrain.scheduling.options import LedgerKeys, ledger_options
from cnbrain.v1 import regional_pb2
from tests.tiny_map import request

NOW = 1_800_000_000
HOUR = 3600
ASCEND = {"cpu": 8, "memory_gib": 64, "accelerator": {"model": "Ascend910B", "count": 16}}
"""All of CC-hub's Ascend910B: only the west's hub can take it, across the backbone."""


def _options(engine: PlacementEngine) -> list[PlanOption[ResourceKey]]:
    waiting = request(resources=ASCEND, constraints={"min_bandwidth_gbps": 10}, duration_hours=1)
    found = ledger_options(engine, [waiting], top_n=8, keys=LedgerKeys(engine.arrays))[0]
    return list(found)


def _calendar_of(arrays: MapArrays, owner: str) -> Calendar[ResourceKey]:
    """A calendar, empty of reservations, of every resource `owner` owns."""
    capacities: dict[ResourceKey, int] = {}
    for j, link in enumerate(arrays.map.links):
        if link.owner == owner:
            capacities[link_key(j)] = int(arrays.link_cap_mbps[j])
    for i in range(len(arrays.map.sites)):
        if wait_planner.region_of(i, arrays) == owner:
            keys = LedgerKeys(arrays)
            capacities[keys.site(i, keys.CPU_M)] = int(arrays.cap_cpu_m[i])
            capacities[keys.site(i, keys.MEM_MIB)] = int(arrays.cap_mem_mib[i])
            for model, column in arrays.accelerator_column.items():
                if arrays.cap_acc[i, column]:
                    capacities[accelerator_key(i, model)] = int(arrays.cap_acc[i, column])
    return Calendar(capacities, now=NOW)


def _answer(
    calendar: Calendar[ResourceKey], arrays: MapArrays
) -> regional_pb2.GetTimelinesResponse:
    return regional_pb2.GetTimelinesResponse(
        now_s=calendar.now,
        timelines=[
            timeline_message(key, calendar.profile(key), arrays=arrays)
            for key in _keys(calendar, arrays)
        ],
    )


def _keys(calendar: Calendar[ResourceKey], arrays: MapArrays) -> list[ResourceKey]:
    keys: list[ResourceKey] = [link_key(j) for j in range(len(arrays.map.links))]
    site_keys = LedgerKeys(arrays)
    for i in range(len(arrays.map.sites)):
        keys += [site_keys.site(i, d) for d in (site_keys.CPU_M, site_keys.MEM_MIB)]
        keys += [accelerator_key(i, model) for model in arrays.accelerator_column]
    return [key for key in keys if key in calendar]


def _plan(
    engine: PlacementEngine,
    backbone: Calendar[ResourceKey],
    regions: dict[str, Calendar[ResourceKey]],
    *,
    deadline_s: int = NOW + 24 * HOUR,
) -> tuple[int, str] | None:
    arrays = engine.arrays
    options = _options(engine)
    answers = {region: _answer(calendar, arrays) for region, calendar in regions.items()}
    joint = wait_planner.joint_calendar(backbone, answers, options=options, arrays=arrays)
    found = wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=deadline_s)
    return None if found is None else (found[0], found[1].label)


@pytest.fixture
def engine(tiny_map: ComputeNetworkMap) -> PlacementEngine:
    return PlacementEngine(tiny_map)


def test_the_options_of_a_cross_region_request_are_asked_of_every_owner_they_use(
    engine: PlacementEngine,
) -> None:
    options = _options(engine)
    assert [o.label for o in options] == ["CC-hub"]
    wanted = wait_planner.wanted(options, engine.arrays)
    assert set(wanted) == {"east", "national", "west"}
    assert wanted["west"].site_ids == ["CC-hub"]
    assert wanted["east"].site_ids == [] and wanted["east"].link_ids
    assert wanted["national"].site_ids == [] and wanted["national"].link_ids


def test_a_request_waits_for_the_destination_site_to_free(engine: PlacementEngine) -> None:
    arrays = engine.arrays
    west = _calendar_of(arrays, "west")
    hub = arrays.map.site_index["CC-hub"]
    west.take({accelerator_key(hub, "Ascend910B"): 4}, Window(NOW - HOUR, NOW + 3 * HOUR))
    regions = {"east": _calendar_of(arrays, "east"), "west": west}
    assert _plan(engine, _calendar_of(arrays, "national"), regions) == (NOW + 3 * HOUR, "CC-hub")


def test_the_backbone_calendar_holds_a_start_back_past_the_sites(engine: PlacementEngine) -> None:
    arrays = engine.arrays
    west = _calendar_of(arrays, "west")
    hub = arrays.map.site_index["CC-hub"]
    west.take({accelerator_key(hub, "Ascend910B"): 4}, Window(NOW, NOW + HOUR))
    backbone = _calendar_of(arrays, "national")
    for j, link in enumerate(arrays.map.links):
        if link.owner == "national":  # every backbone link full for five hours
            backbone.take({link_key(j): int(arrays.link_cap_mbps[j])}, Window(NOW, NOW + 5 * HOUR))
    regions = {"east": _calendar_of(arrays, "east"), "west": west}
    assert _plan(engine, backbone, regions) == (NOW + 5 * HOUR, "CC-hub")
    assert _plan(engine, backbone, regions, deadline_s=NOW + 4 * HOUR) is None


def test_an_option_whose_owner_did_not_answer_is_left_out(engine: PlacementEngine) -> None:
    arrays = engine.arrays
    regions = {"east": _calendar_of(arrays, "east")}
    assert _plan(engine, _calendar_of(arrays, "national"), regions) is None
    regions["west"] = _calendar_of(arrays, "west")
    assert _plan(engine, _calendar_of(arrays, "national"), regions) == (NOW, "CC-hub")


def test_a_timeline_names_its_resource_by_id_and_comes_back_to_the_same_steps(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    west = _calendar_of(arrays, "west")
    key = accelerator_key(arrays.map.site_index["CC-hub"], "Ascend910B")
    west.take({key: 10_000}, Window(NOW + 60, NOW + 120))
    message = timeline_message(key, west.profile(key), arrays=arrays)
    assert (message.site_id, message.resource, message.link_id) == ("CC-hub", "acc:Ascend910B", "")
    assert key_of(message, arrays=arrays) == key
    assert steps_of(message, now=NOW) == (
        16_000,
        [(NOW, 16_000), (NOW + 60, 6_000), (NOW + 120, 16_000)],
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"site_id": "nowhere"}, "unknown site"),
        ({"resource": "acc:TPU"}, "unknown resource"),
        ({"at_s": [NOW, NOW + 60, NOW + 60]}, "do not increase"),
        ({"free": [16_001, 16_000, 16_000]}, "outside"),
        ({"at_s": [NOW + 1, NOW + 60, NOW + 120]}, "start at"),
        ({"free": [16_000]}, "do not match"),
        ({"capacity": -1}, "out of bounds"),
    ],
)
def test_a_malformed_timeline_is_refused(
    engine: PlacementEngine, change: dict[str, object], words: str
) -> None:
    arrays = engine.arrays
    west = _calendar_of(arrays, "west")
    key = accelerator_key(arrays.map.site_index["CC-hub"], "Ascend910B")
    west.take({key: 10_000}, Window(NOW + 60, NOW + 120))
    message = timeline_message(key, west.profile(key), arrays=arrays)
    for field, value in change.items():
        if isinstance(value, list):
            getattr(message, field)[:] = value
        else:
            setattr(message, field, value)
    with pytest.raises(WireError, match=words):
        key_of(message, arrays=arrays)
        steps_of(message, now=NOW)


@dataclass(frozen=True, slots=True)
class _Booked:
    demand: tuple[tuple[tuple[str, ...], int], ...]
    start_s: int
    end_s: int
    nodes: int = 1


def test_a_request_is_planned_where_no_other_waiting_requests_plan_stands(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    west = _calendar_of(arrays, "west")
    hub = arrays.map.site_index["CC-hub"]
    west.take({accelerator_key(hub, "Ascend910B"): 4}, Window(NOW - HOUR, NOW + 3 * HOUR))
    options = _options(engine)
    answers = {
        r: _answer(c, arrays)
        for r, c in {"east": _calendar_of(arrays, "east"), "west": west}.items()
    }
    joint = wait_planner.joint_calendar(
        _calendar_of(arrays, "national"), answers, options=options, arrays=arrays
    )
    found = wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW + 9 * HOUR)
    assert found is not None and found[0] == NOW + 3 * HOUR
    first = _Booked(
        wait_planner.demand_by_id(found[1].demand, arrays), found[0], found[0] + 2 * HOUR
    )
    assert (("site", "CC-hub", "acc", "Ascend910B"), 16_000) in first.demand

    wait_planner.book(joint, [first], arrays)
    second = wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW + 9 * HOUR)
    assert second is not None and second[0] == NOW + 5 * HOUR, "after the first one's plan"
    assert (
        wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW + 4 * HOUR)
        is None
    )


def test_a_plan_names_its_resources_by_id_and_leaves_out_what_left_the_map(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    option = _options(engine)[0]
    named = wait_planner.demand_by_id(option.demand, arrays)
    assert wait_planner.demand_by_key(named, arrays) == dict(option.demand)
    gone = (("site", "no-such-site", "cpu_m"), 1), (("link", "no-such-link"), 1)
    odd = (("site", "CC-hub", "watts"), 1), (("moon", "x"), 1), (("site",), 1)
    assert wait_planner.demand_by_key([*gone, *odd], arrays) == {}


def _staged(volume_gb: float = 45) -> PlacementRequest:
    """The Ascend request from AA whose dataset, `volume_gb` at AA-dc, is staged on CC-hub
    at up to 10 Gbps."""
    return request(
        resources=ASCEND,
        duration_hours=1,
        start="queue",
        flows={
            "staging": [{"source": {"site": "AA-dc"}, "volume_gb": volume_gb, "max_rate_gbps": 10}]
        },
    )


def test_a_request_with_flows_waits_for_its_staging_to_cross_the_backbone(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    staged = _staged()
    pairs = flow_plan_options(engine, [staged], top_n=8, keys=LedgerKeys(arrays))[0]
    options = [option for option, _ in pairs]
    assert {o.label for o in options} == {"CC-hub"}
    fastest = pairs[0][1]
    assert fastest.lead == 36  # 45 GB at 10 Gbps
    assert set(wait_planner.wanted(options, arrays)) == {"east", "national", "west"}
    backbone = _calendar_of(arrays, "national")
    for j, link in enumerate(arrays.map.links):
        if link.owner == "national":  # every backbone link full for an hour
            backbone.take({link_key(j): int(arrays.link_cap_mbps[j])}, Window(NOW, NOW + HOUR))
    regions = {"east": _calendar_of(arrays, "east"), "west": _calendar_of(arrays, "west")}
    answers = {region: _answer(calendar, arrays) for region, calendar in regions.items()}
    joint = wait_planner.joint_calendar(backbone, answers, options=options, arrays=arrays)

    found = wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW + 9 * HOUR)

    # The staging starts when the backbone frees, and the job once the data is there.
    assert found is not None
    start, option = found
    assert option.timed is not None and start - option.timed.lead == NOW + HOUR
    assert option is options[0] and start == NOW + HOUR + 36
    # Its first part must begin by the deadline.
    late = wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW + HOUR - 1)
    assert late is None


def test_room_is_worth_making_only_where_the_flows_could_start_now(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    pairs = flow_plan_options(engine, [_staged()], top_n=8, keys=LedgerKeys(arrays))[0]
    options = [option for option, _ in pairs]
    regions = {"east": _calendar_of(arrays, "east"), "west": _calendar_of(arrays, "west")}
    hub = arrays.map.site_index["CC-hub"]
    ascend = accelerator_key(hub, "Ascend910B")
    regions["west"].take(
        {ascend: regions["west"].profile(ascend).capacity}, Window(NOW, NOW + HOUR)
    )
    answers = {region: _answer(calendar, arrays) for region, calendar in regions.items()}

    def room(backbone: Calendar[ResourceKey]) -> tuple[str, ...]:
        joint = wait_planner.joint_calendar(backbone, answers, options=options, arrays=arrays)
        assert wait_planner.planned_start(joint, options, duration_s=HOUR, deadline_s=NOW) is None
        return wait_planner.room_sites(joint, options)

    # The hub's compute is busy, its staging's links are free: room there lets it start.
    assert room(_calendar_of(arrays, "national")) == ("CC-hub",)
    # With every backbone link busy too, its staging could not start now: no room is worth it.
    backbone = _calendar_of(arrays, "national")
    for j, link in enumerate(arrays.map.links):
        if link.owner == "national":
            backbone.take({link_key(j): int(arrays.link_cap_mbps[j])}, Window(NOW, NOW + HOUR))
    assert room(backbone) == ()
    # An option without windows of its own holds its path from its start: always worth it.
    joint = wait_planner.joint_calendar(backbone, answers, options=_options(engine), arrays=arrays)
    assert wait_planner.room_sites(joint, _options(engine)) == ("CC-hub",)


def test_a_flow_is_held_by_every_owner_of_its_route_over_its_own_window(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    staged = _staged()
    decision = engine.place(staged, reserve=False)
    assert decision.site == "CC-hub"
    reservation = engine.reservation_for(staged, decision)
    [(_, option), *_] = flow_plan_options(engine, [staged], top_n=8, keys=LedgerKeys(arrays))[0]
    start = NOW + option.lead
    window = Window(NOW, start + HOUR)
    parts = planner.parts(staged, decision, reservation, arrays, start_s=NOW)
    [staging] = flow_holds(reservation.id, option, start_s=start, arrays=arrays)

    split = flow_parts.with_flows(parts, [staging], arrays, window=window)

    assert [p.owner for p in split] == [p.owner for p in parts]
    owners = {link.id: link.owner for link in arrays.map.links}
    shares = {p.owner: p.flows for p in split}
    assert set(shares) == {"east", "national", "west"}
    rejoined: list[str] = []
    for part in split:
        assert part.claim.window == window
        [share] = part.flows
        assert share.window == Window(NOW, start) and share.mbps == 10_000
        assert {owners[link] for link in share.link_ids} == {part.owner}
        rejoined += share.link_ids
    assert sorted(rejoined) == sorted(staging.link_ids)
    west = next(p for p in split if p.owner == "west")
    assert west.claim.site_id == "CC-hub" and west.claim.accelerator_milli == 16_000


def test_an_owner_only_a_flow_crosses_gets_a_part_of_that_flow_alone(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    staged = _staged()
    decision = engine.place(staged, reserve=False)
    reservation = engine.reservation_for(staged, decision)
    [(_, option), *_] = flow_plan_options(engine, [staged], top_n=8, keys=LedgerKeys(arrays))[0]
    window = Window(NOW, NOW + option.lead + HOUR)
    parts = planner.parts(staged, decision, reservation, arrays, start_s=NOW)
    flows = flow_holds(reservation.id, option, start_s=NOW + option.lead, arrays=arrays)
    without_east = [p for p in parts if p.owner != "east"]

    split = flow_parts.with_flows(without_east, flows, arrays, window=window)

    east = split[-1]
    assert east.owner == "east" and east.flows
    claim = east.claim
    assert claim.site_id is None and not claim.counts_quota and claim.mbps == 0
    assert claim.link_ids == () and claim.cpu_m == 0 and claim.window == window


def test_a_request_with_flows_is_planned_by_the_scarcity_rule() -> None:
    """Two sites of 16 A100 each, the first with 14 held for the next two hours: both start
    now; the earliest-start rule takes the first, the scarcity rule the second."""
    first, second = accelerator_key(0, "A100"), accelerator_key(1, "A100")
    calendar: Calendar[ResourceKey] = Calendar({first: 16_000, second: 16_000}, now=NOW)
    calendar.take({first: 14_000}, Window(NOW, NOW + 2 * HOUR))

    def options(objective: float | None) -> list[PlanOption[ResourceKey]]:
        return [
            PlanOption(
                f"site-{key[1]}",
                {key: 2000},
                timed=TimedDemand([Part(key, 2000, 0, HOUR)]),
                objective=objective,
                compute=frozenset({key}),
            )
            for key in (first, second)
        ]

    def chosen(objective: float | None) -> tuple[int, str] | None:
        found = wait_planner.planned_start(
            calendar, options(objective), duration_s=HOUR, deadline_s=NOW + HOUR
        )
        return None if found is None else (found[0], found[1].label)

    assert chosen(None) == (NOW, "site-0")
    assert chosen(1.0) == (NOW, "site-1")


def test_a_request_with_flows_is_planned_on_its_best_sites_against_the_calendar(
    engine: PlacementEngine,
) -> None:
    """4 A100 for the national optimum, staging 45 GB from AA-dc, planned on one site: its
    options cover more sites than that, and it goes where the accelerators are free, not to
    its best site on the empty map, whose A100 are held past its max wait."""
    arrays = engine.arrays
    staged = request(
        resources={"cpu": 4, "memory_gib": 16, "accelerator": {"model": "A100", "count": 4}},
        duration_hours=1,
        start="queue",
        national_optimum=True,
        flows={"staging": [{"source": {"site": "AA-dc"}, "volume_gb": 45, "max_rate_gbps": 10}]},
    )
    options = [
        o for o, _ in flow_plan_options(engine, [staged], top_n=1, keys=LedgerKeys(arrays))[0]
    ]
    labels = list(dict.fromkeys(o.label for o in options))
    assert len(labels) > 1
    best = arrays.map.site_index[labels[0]]
    calendars = {owner: _calendar_of(arrays, owner) for owner in ("east", "west")}
    full = calendars[wait_planner.region_of(best, arrays)]
    key = accelerator_key(best, "A100")
    full.take({key: full.profile(key).capacity}, Window(NOW, NOW + 24 * HOUR))
    answers = {owner: _answer(calendar, arrays) for owner, calendar in calendars.items()}
    backbone = _calendar_of(arrays, "national")
    joint = wait_planner.joint_calendar(backbone, answers, options=options, arrays=arrays)

    def planned(kept: list[PlanOption[ResourceKey]]) -> tuple[int, PlanOption[ResourceKey]] | None:
        return wait_planner.planned_start(
            joint, kept, duration_s=HOUR, deadline_s=NOW + 2 * HOUR, sites=1
        )

    # On its best site alone, as on the empty map's Top-1, it has no start by its deadline.
    assert planned([o for o in options if o.label == labels[0]]) is None
    found = planned(options)
    assert found is not None
    start, option = found
    assert option.label != labels[0]
    assert option.timed is not None and start - option.timed.lead == NOW  # its staging starts now


def test_an_option_waits_for_the_nodes_its_region_says_hold_the_gang(
    engine: PlacementEngine,
) -> None:
    arrays = engine.arrays
    hub: PlanOption[ResourceKey] = PlanOption("CC-hub", {})
    dc: PlanOption[ResourceKey] = PlanOption("AA-dc", {})

    def answer(region: str, site: str, at_s: int) -> regional_pb2.GetTimelinesResponse:
        return regional_pb2.GetTimelinesResponse(
            region_id=region,
            now_s=1_000,
            nodes_free_at=[regional_pb2.NodesFreeAt(site_id=site, at_s=at_s)],
        )

    west = arrays.map.region_of(arrays.map.sites[arrays.map.site_index["CC-hub"]].province)
    waits, same = wait_planner.waiting_for_nodes(
        [hub, dc], {west: answer(west, "CC-hub", 5_000)}, arrays
    )
    assert (waits.nodes_free_at, same) == (5_000, dc)
    [never] = wait_planner.waiting_for_nodes([hub], {west: answer(west, "CC-hub", 0)}, arrays)
    assert never.nodes_free_at == MAX_EPOCH_S
    flood = answer(west, "CC-hub", 5_000)
    flood.nodes_free_at.extend(flood.nodes_free_at[0] for _ in range(len(arrays.map.sites)))
    for wrong in (answer("east", "CC-hub", 5_000), answer(west, "CC-hub", 999), flood):
        with pytest.raises(WireError):
            wait_planner.waiting_for_nodes([hub], {wrong.region_id: wrong}, arrays)


def test_the_gangs_planned_on_a_regions_sites_go_to_it_and_come_back_checked() -> None:
    """Two nodes of 8 A100 planned on BJ-dc-1 (and a link, and a site not asked about)."""
    demand = (
        (("site", "BJ-dc-1", "cpu_m"), 32_000),
        (("site", "BJ-dc-1", "mem_mib"), 131_072),
        (("site", "BJ-dc-1", "acc", "A100"), 16_000),
        (("link", "BJ-BB"), 1000),
        (("site", "SH-hub", "cpu_m"), 1000),
    )
    [message] = planned_gang_messages([(demand, 2, 100, 3700)], {"BJ-dc-1"})
    [gang] = planned_gangs_of([message])
    assert gang.site_id == "BJ-dc-1" and gang.window == Window(100, 3700)
    assert gang.gang == Gang(nodes=2, cpu_m=16_000, mem_mib=65_536, model="A100", devices=8)
    assert planned_gang_messages([(demand, 2, 100, 3700)], {"GD-dc-1"}) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"site_id": ""}, "planned_gangs.0.site_id"),
        ({"nodes": 0}, "planned_gangs.0.nodes"),
        ({"cpu_m": -1}, "planned_gangs.0.cpu_m"),
        ({"accelerator_milli": 2**60}, "planned_gangs.0.accelerator_milli"),
        ({"start_s": 3700}, "planned_gangs.0.start_s"),
        ({"end_s": MAX_EPOCH_S + 1}, "planned_gangs.0.start_s"),
        ({"accelerator_model": ""}, "planned_gangs.0.accelerator_model"),
        ({"accelerator_milli": 15_000}, "planned_gangs.0"),
    ],
)
def test_a_planned_gang_out_of_bounds_is_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    fields: dict[str, Any] = {
        "site_id": "BJ-dc-1",
        "nodes": 2,
        "cpu_m": 32_000,
        "mem_mib": 131_072,
        "accelerator_model": "A100",
        "accelerator_milli": 16_000,
        "start_s": 100,
        "end_s": 3700,
    }
    with pytest.raises(Invalid) as refused:
        planned_gangs_of([regional_pb2.PlannedGang(**{**fields, **change})])
    assert refused.value.field == field
    with pytest.raises(Invalid) as too_many:
        planned_gangs_of([regional_pb2.PlannedGang(**fields)] * 257)
    assert too_many.value.field == "planned_gangs"
