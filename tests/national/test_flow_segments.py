"""What the national brain asks each owner for the routes of a request's flows, and how it
checks the answers (`national.flow_segments`); the asking itself runs end to end in
`tests/federation/test_federation_flows.py`."""

import numpy as np
import pytest

from cnbrain.federation.codec import WireError, path_message
from cnbrain.national.flow_segments import flow_ends, read_segments, wanted_of
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.routing.paths import GraphPath
from cnbrain.routing.router import SegmentRouter
from cnbrain.v1 import common_pb2, regional_pb2
from tests.tiny_map import request

ROUND_TRIP = request(
    resources={"cpu": 8, "memory_gib": 64, "accelerator": {"model": "Ascend910B", "count": 16}},
    start="queue",
    flows={
        "staging": [{"source": {"site": "AA-dc"}, "volume_gb": 45}],
        "delivery": [{"destination": {"province": "CC"}, "volume_gb": 5}],
    },
)
"""From AA: a dataset at AA-dc staged, results delivered to the province CC."""


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


def test_the_ends_of_a_requests_flows_are_its_sites_and_access_nodes(arrays: MapArrays) -> None:
    assert flow_ends(ROUND_TRIP, arrays) == (["AA-dc"], ["CC-acc"])
    bound = ROUND_TRIP.model_copy(
        update={"constraints": ROUND_TRIP.constraints.model_copy(update={"max_latency_ms": 50.0})}
    )
    assert flow_ends(bound, arrays) == (["AA-dc"], ["AA-acc", "CC-acc"])


def test_each_region_is_asked_its_own_parts_of_the_routes_once(arrays: MapArrays) -> None:
    index = arrays.map.site_index
    candidates = [index["CC-hub"], index["AA-idle"], index["AA-dc"]]
    wanted = wanted_of(["AA-dc"], ["CC-acc"], candidates, arrays)
    assert set(wanted) == {"east", "west"}
    east, west = wanted["east"], wanted["west"]
    # AA-dc to CC-hub: AA-dc's segments (east) and CC-hub's (west); to AA-idle: the east's
    # local path; to itself: nothing. CC-acc to the east's sites: its segments (west) and theirs.
    assert list(east.sites) == ["AA-dc", "AA-idle"]
    assert list(east.pairs) == [("AA-dc", "AA-idle")]
    assert list(east.nodes) == [] and list(east.node_sites) == []
    assert list(west.sites) == ["CC-hub"]
    assert list(west.nodes) == ["CC-acc"]
    assert list(west.node_sites) == [("CC-acc", "CC-hub")]


def _answer(arrays: MapArrays) -> regional_pb2.GetSiteSegmentsResponse:
    """The west's true answer for CC-hub and CC-acc."""
    router = SegmentRouter(arrays)
    residual = np.asarray(arrays.link_cap_mbps)
    hub = arrays.map.site_index["CC-hub"]

    def wire(paths: list[GraphPath]) -> list[common_pb2.Path]:
        return [path_message(p, arrays=arrays, residual_mbps=residual) for p in paths]

    return regional_pb2.GetSiteSegmentsResponse(
        region_id="west",
        sites=[
            regional_pb2.SitePaths(
                from_site_id="CC-hub",
                paths=wire(router.destination_paths(hub, k=1, blocked=frozenset())),
            ),
            regional_pb2.SitePaths(from_site_id="AA-dc", error="site 'AA-dc' is not in region"),
        ],
        access_nodes=[
            regional_pb2.AccessPaths(
                access_node="CC-acc",
                paths=wire(router.source_paths("CC-acc", k=1, blocked=frozenset())),
            )
        ],
    )


def test_an_owners_answer_is_read_and_an_entry_with_an_error_gives_nothing(
    arrays: MapArrays,
) -> None:
    read = read_segments(_answer(arrays), "west", arrays)
    hub = arrays.map.site_index["CC-hub"]
    assert set(read.sites) == {hub}
    assert read.sites[hub][0].nodes == ("CC-gw", "CC-agg1", "CC-hub")
    assert read.nodes["CC-acc"][0].nodes[0] == "CC-acc"
    assert read.nodes["CC-acc"][0].nodes[-1] == "CC-gw"


def test_a_path_that_does_not_join_the_ends_asked_is_refused(arrays: MapArrays) -> None:
    answer = _answer(arrays)
    answer.sites[0].from_site_id = "BB-hub"
    with pytest.raises(WireError, match="does not join"):
        read_segments(answer, "west", arrays)


def test_a_path_over_a_link_its_owner_does_not_own_is_refused(arrays: MapArrays) -> None:
    with pytest.raises(WireError, match="does not own"):
        read_segments(_answer(arrays), "east", arrays)
