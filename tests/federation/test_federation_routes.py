"""Routes composed from segments that their owners computed, the wire form of paths, and
each brain's view limited to what it owns."""

import numpy as np
import pytest

from cnbrain.federation.codec import PathReader, WireError, graph_path, path_message
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.load import load_map
from cnbrain.routing.composed import ComposedRouter
from cnbrain.routing.router import SegmentRouter


@pytest.fixture(scope="module")
def arrays() -> MapArrays:
    return MapArrays.build(load_map("china"))


@pytest.fixture(scope="module")
def router(arrays: MapArrays) -> SegmentRouter:
    return SegmentRouter(arrays)


def _site(arrays: MapArrays, province: str) -> int:
    """The first hub site of `province`."""
    return next(
        i for i, s in enumerate(arrays.map.sites) if s.province == province and s.kind == "hub"
    )


def test_composed_routes_equal_the_routes_of_one_brain_with_the_whole_map(
    arrays: MapArrays, router: SegmentRouter
) -> None:
    access = arrays.map.provinces["ZJ"].access_nodes[0]
    hub = _site(arrays, "NX")
    composed = ComposedRouter(
        router,
        sources={access: router.source_paths(access, k=3, blocked=frozenset())},
        destinations={hub: router.destination_paths(hub, k=3, blocked=frozenset())},
    )

    ours = composed.routes(access_node=access, sites=[hub], k=3)[0]
    whole = router.routes(access_node=access, sites=[hub], k=3)[0]

    assert ours and [r.links for r in ours] == [r.links for r in whole]
    assert [s.owner for s in ours[0].segments] == ["east", "national", "west"]


def test_composed_routes_offer_nothing_in_the_source_province_or_without_segments(
    arrays: MapArrays, router: SegmentRouter
) -> None:
    access = arrays.map.provinces["ZJ"].access_nodes[0]
    local = next(i for i, s in enumerate(arrays.map.sites) if s.province == "ZJ")
    hub = _site(arrays, "NX")
    composed = ComposedRouter(
        router,
        sources={access: router.source_paths(access, k=3, blocked=frozenset())},
        destinations={local: router.destination_paths(local, k=3, blocked=frozenset())},
    )

    assert composed.routes(access_node=access, sites=[local, hub], k=3) == [[], []]
    with pytest.raises(ValueError, match="composed for"):
        composed.routes(access_node="elsewhere", sites=[hub], k=3)


def test_paths_cross_the_wire_unchanged_and_bad_ones_are_named(
    arrays: MapArrays, router: SegmentRouter
) -> None:
    hub = _site(arrays, "NX")
    path = router.destination_paths(hub, k=1, blocked=frozenset())[0]
    residual = np.full(len(arrays.map.links), 1234, dtype=np.int64)
    links = arrays.link_index

    message = path_message(path, arrays=arrays, residual_mbps=residual)
    back = graph_path(message, arrays=arrays, links=links)

    assert back.links == path.links and back.nodes == path.nodes
    assert back.latency_ms == pytest.approx(path.latency_ms)
    assert list(message.free_mbps) == [1234] * len(path.links)
    unknown = type(message)()
    unknown.CopyFrom(message)
    unknown.link_ids[0] = "nowhere--nothing"
    with pytest.raises(WireError, match="unknown link 'nowhere--nothing'"):
        graph_path(unknown, arrays=arrays, links=links)
    wrong_ends = type(message)()
    wrong_ends.CopyFrom(message)
    wrong_ends.nodes[0] = "XX-somewhere"
    with pytest.raises(WireError, match="does not join"):
        graph_path(wrong_ends, arrays=arrays, links=links)
    short = type(message)()
    short.CopyFrom(message)
    del short.free_mbps[0]
    with pytest.raises(WireError, match="free bandwidth"):
        graph_path(short, arrays=arrays, links=links)


def test_a_path_reader_checks_each_path_and_its_owner_once(
    arrays: MapArrays, router: SegmentRouter
) -> None:
    hub = _site(arrays, "NX")
    path = router.destination_paths(hub, k=1, blocked=frozenset())[0]
    residual = np.full(len(arrays.map.links), 500, dtype=np.int64)
    message = path_message(path, arrays=arrays, residual_mbps=residual)
    owner = arrays.map.links[path.links[0]].owner
    assert all(arrays.map.links[j].owner == owner for j in path.links)
    reader = PathReader(arrays)

    first = reader.read(message, owner=owner)
    again = reader.read(message, owner=owner)

    assert first.links == path.links and first.nodes == path.nodes
    assert again is first  # the second request's copy of the path is not checked again
    with pytest.raises(WireError, match="is not owned by 'national'"):
        reader.read(message, owner="national")
    short = type(message)()
    short.CopyFrom(message)
    del short.free_mbps[0]
    with pytest.raises(WireError, match="free bandwidth"):
        reader.read(short, owner=owner)
    unknown = type(message)()
    unknown.CopyFrom(message)
    unknown.link_ids[0] = "nowhere--nothing"
    with pytest.raises(WireError, match="unknown link 'nowhere--nothing'"):
        reader.read(unknown, owner=owner)


def test_a_region_sees_only_its_own_sites_and_links(arrays: MapArrays) -> None:
    west = Ownership.of(arrays.map, "west")
    view = west.restrict(Snapshot.empty(arrays))

    for i, site in enumerate(arrays.map.sites):
        owned = arrays.map.provinces[site.province].region == "west"
        assert (view.free_cpu_m[i] > 0) == (owned and arrays.cap_cpu_m[i] > 0)
    for j, link in enumerate(arrays.map.links):
        assert (view.residual_mbps[j] > 0) == (link.owner == "west")
    national = Ownership.of(arrays.map, "national")
    assert not national.sites.any()
    assert national.links.sum() == arrays.link_backbone.sum()
    with pytest.raises(ValueError, match="unknown region 'atlantis'"):
        Ownership.of(arrays.map, "atlantis")
