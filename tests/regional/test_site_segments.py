"""A region's answer to GetSiteSegments (`regional.site_segments`) on the tiny map, as the
west (province CC): its own sites' and access nodes' segments, the local paths inside its
province, each avoiding the links blocked, and an error for what it does not own."""

import pytest

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.regional.site_segments import SiteSegments
from cnbrain.v1 import regional_pb2


@pytest.fixture(scope="module")
def engine(tiny_map: ComputeNetworkMap) -> PlacementEngine:
    return PlacementEngine(tiny_map)


def _west(engine: PlacementEngine, blocked: frozenset[int] = frozenset()) -> SiteSegments:
    return SiteSegments(
        engine=engine,
        snapshot=Snapshot.empty(engine.arrays),
        region_id="west",
        paths=2,
        blocked=blocked,
    )


ASKED = regional_pb2.GetSiteSegmentsRequest(
    site_ids=["CC-hub", "AA-dc"],
    access_nodes=["CC-acc", "AA-acc", "nowhere"],
    access_sites=[
        regional_pb2.AccessSite(access_node="CC-acc", site_id="CC-hub"),
        regional_pb2.AccessSite(access_node="CC-acc", site_id="AA-dc"),
    ],
    paths=2,
)


def test_the_west_answers_its_own_segments_and_refuses_the_rest(engine: PlacementEngine) -> None:
    answer = _west(engine).answer(ASKED)
    hub, east = answer.sites
    assert tuple(hub.paths[0].nodes) == ("CC-gw", "CC-agg1", "CC-hub")
    assert not hub.error and east.error == "site 'AA-dc' is not in region 'west'"
    own, other, unknown = answer.access_nodes
    assert own.paths and all(p.nodes[0] == "CC-acc" and p.nodes[-1] == "CC-gw" for p in own.paths)
    assert other.error == "access node 'AA-acc' is not in region 'west'" and not other.paths
    assert unknown.error == "unknown access node 'nowhere'"
    local, away = answer.access_sites
    assert local.paths[0].nodes[0] == "CC-acc" and local.paths[0].nodes[-1] == "CC-hub"
    assert len(local.paths) == 2 and not local.error
    assert away.error == "site 'AA-dc' is not in region 'west'"


def test_every_path_avoids_the_links_blocked(engine: PlacementEngine) -> None:
    index = engine.arrays.link_index
    first = _west(engine).answer(ASKED)
    cut = frozenset(
        {
            index[first.sites[0].paths[0].link_ids[0]],
            index[first.access_sites[0].paths[0].link_ids[0]],
        }
    )
    answer = _west(engine, cut).answer(ASKED)
    for entry in (answer.sites[0], answer.access_nodes[0], answer.access_sites[0]):
        assert entry.paths, entry
        for path in entry.paths:
            assert cut.isdisjoint(index[link] for link in path.link_ids), path
