"""The federation planner: a decision split into its owners' parts, and the view composed of
what the regions reported."""

from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.national import planner
from cnbrain.national.planner import Answers
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.paths import GraphPath
from tests.tiny_map import request

START_S = 1_800_000_000
ASCEND = {"cpu": 8, "memory_gib": 64, "accelerator": {"model": "Ascend910B", "count": 4}}


@dataclass(frozen=True, slots=True)
class Free:
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str
    accelerator_milli: int


def _cross_region(tiny_map: ComputeNetworkMap) -> tuple[PlacementEngine, Decision]:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(
        request(resources=ASCEND, constraints={"min_bandwidth_gbps": 10}), reserve=False
    )
    assert decision.status is DecisionStatus.PLACED and decision.path is not None
    assert [s.owner for s in decision.path.segments] == ["east", "national", "west"]
    return engine, decision


def test_a_decision_has_one_part_per_owner_with_what_each_owner_holds(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine, decision = _cross_region(tiny_map)
    placed = request(resources=ASCEND, constraints={"min_bandwidth_gbps": 10})
    reservation = engine.reservation_for(placed, decision)
    parts = planner.parts(placed, decision, reservation, engine.arrays, start_s=START_S)
    assert decision.path is not None
    links = {s.owner: tuple(h.link for h in s.hops) for s in decision.path.segments}
    assert [p.owner for p in parts] == ["east", "national", "west"]
    source, backbone, destination = (p.claim for p in parts)
    assert {c.reservation_id for c in (source, backbone, destination)} == {reservation.id}
    assert destination.site_id == decision.site and not destination.counts_quota
    assert (destination.cpu_m, destination.mem_mib) == (8_000, 64 * 1024)
    assert (destination.accelerator_model, destination.accelerator_milli) == ("Ascend910B", 4000)
    assert source.site_id is None and source.counts_quota and source.cpu_m == 8_000
    assert backbone.site_id is None and not backbone.counts_quota
    assert (backbone.cpu_m, backbone.accelerator_model, backbone.accelerator_milli) == (0, None, 0)
    for part in parts:
        assert part.claim.link_ids == links[part.owner]
        assert part.claim.mbps == 10_000
        assert part.claim.window == Window(START_S, START_S + round(placed.duration_hours * 3600))


def test_an_owner_of_the_source_and_the_destination_has_one_part_with_both(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine, decision = _cross_region(tiny_map)
    assert decision.path is not None
    segments = [
        s.model_copy(update={"owner": "east"}) if s.kind is SegmentKind.DESTINATION else s
        for s in decision.path.segments
    ]
    decision = decision.model_copy(
        update={"path": decision.path.model_copy(update={"segments": segments})}
    )
    placed = request(resources=ASCEND, constraints={"min_bandwidth_gbps": 10})
    reservation = engine.reservation_for(placed, decision)
    parts = planner.parts(placed, decision, reservation, engine.arrays, start_s=START_S)
    assert [p.owner for p in parts] == ["east", "national"]
    both = parts[0].claim
    assert both.site_id == decision.site and both.counts_quota
    assert both.link_ids == tuple(h.link for s in segments if s.owner == "east" for h in s.hops)


def test_a_national_quota_is_counted_in_the_national_part(tiny_map: ComputeNetworkMap) -> None:
    engine, decision = _cross_region(tiny_map)
    placed = request(resources=ASCEND, constraints={"min_bandwidth_gbps": 10})
    reservation = engine.reservation_for(placed, decision)
    parts = planner.parts(
        placed, decision, reservation, engine.arrays, start_s=START_S, national_quota=True
    )
    assert [p.owner for p in parts] == ["east", "national", "west"]
    source, backbone, destination = (p.claim for p in parts)
    assert source.counts_quota and not destination.counts_quota
    assert backbone.counts_quota and backbone.site_id is None
    assert (backbone.cpu_m, backbone.accelerator_milli, backbone.mbps) == (8_000, 4000, 10_000)
    assert decision.path is not None
    national = [h.link for s in decision.path.segments if s.owner == "national" for h in s.hops]
    assert backbone.link_ids == tuple(national) and national

    inside = decision.model_copy(
        update={"path": decision.path.model_copy(update={"segments": [decision.path.segments[0]]})}
    )
    parts = planner.parts(
        placed, inside, reservation, engine.arrays, start_s=START_S, national_quota=True
    )
    assert [p.owner for p in parts] == ["east", "national"]
    alone = parts[1].claim
    assert alone.counts_quota and alone.site_id is None and alone.link_ids == ()
    assert (alone.cpu_m, alone.accelerator_milli) == (8_000, 4000)


def test_the_composed_view_has_what_the_regions_reported_and_the_national_backbone(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    arrays = engine.arrays
    backbone = Snapshot.empty(arrays)
    site = tiny_map.site_index["CC-hub"]
    province_link = int(np.flatnonzero(~arrays.link_backbone)[0])
    backbone_link = int(np.flatnonzero(arrays.link_backbone)[0])
    answers = Answers(
        access_node="AA-acc",
        source=[],
        destinations={},
        free={site: Free(4_000, 8_192, 100, "Ascend910B", 2000)},
        residual={province_link: 1_234, backbone_link: 1},
        regions=["west"],
    )
    view = planner.composed(backbone, [answers])
    assert (view.free_cpu_m[site], view.free_mem_mib[site], view.free_storage_gib[site]) == (
        4_000,
        8_192,
        100,
    )
    assert view.free_acc[site, arrays.accelerator_column["Ascend910B"]] == 2000
    others = np.arange(arrays.n_sites) != site
    assert not view.free_cpu_m[others].any() and not view.free_acc[others].any()
    assert view.residual_mbps[province_link] == 1_234
    assert view.residual_mbps[backbone_link] == backbone.residual_mbps[backbone_link]
    unreported = ~arrays.link_backbone
    unreported[province_link] = False
    assert not view.residual_mbps[unreported].any()


def _path(links: tuple[int, ...], latency_ms: float) -> GraphPath:
    nodes = tuple(f"n{i}" for i in range(len(links) + 1))
    return GraphPath(nodes, links, np.array(links, dtype=np.int64), latency_ms)


def test_segments_of_all_answers_have_no_repeats_and_go_fastest_first() -> None:
    slow, fast, other = _path((1, 2), 3.0), _path((3,), 1.0), _path((4,), 2.0)

    def answers(source: list[GraphPath], destinations: dict[int, list[GraphPath]]) -> Answers:
        return Answers("AA-acc", source, destinations, free={}, residual={}, regions=[])

    sources, destinations = planner.segments(
        [answers([slow, fast], {7: [other]}), answers([fast, other], {7: [slow, other]})]
    )
    assert sources == {"AA-acc": [fast, other, slow]}
    assert destinations == {7: [other, slow]}
