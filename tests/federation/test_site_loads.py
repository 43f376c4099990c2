"""The load of a region's sites on its summary, on the tiny map (AA-dc: 64 cores, 4 A100;
BB-dc: 128 cores): made by `summarise` from the region's capacity view, read back as sent
once serialised, and checked as the national brain checks it: a load that is not a share, a
site named twice or too many entries refused naming the entry, a site that is not the
region's left out."""

import math

import pytest

from cnbrain.federation.codec import WireError
from cnbrain.federation.ownership import Ownership
from cnbrain.federation.site_loads import MAX_WIRE_SITE_LOADS, site_loads_of
from cnbrain.ledger.held_room import HeldRoom, HeldSnapshot
from cnbrain.ledger.reservation import ComputeClaim
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import site_uses
from cnbrain.national.regions import owned_sites
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional.federation import summarise
from cnbrain.v1 import national_pb2

NOW = 1_000.0
EAST_SITES = ["AA-dc", "AA-idle", "BB-hub", "BB-dc"]


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


def _east_in_use(arrays: MapArrays) -> HeldSnapshot:
    """3 of AA-dc's 4 A100 taken; half of BB-dc's cores held for a waiting request."""
    index = arrays.map.site_index
    taken = Snapshot.empty(arrays).less(
        [
            ComputeClaim(
                site=index["AA-dc"],
                cpu_m=8_000,
                mem_mib=1024,
                storage_gib=0,
                acc_column=arrays.accelerator_column["A100"],
                acc_milli=3_000,
            )
        ]
    )
    hold = HeldRoom(
        "waiting",
        ComputeClaim(site=index["BB-dc"], cpu_m=64_000, mem_mib=1024, storage_gib=0),
        NOW + 60,
    )
    return HeldSnapshot(taken, (hold,))


def test_a_summary_carries_every_site_of_its_region_as_its_capacity_view_shows_it(
    arrays: MapArrays,
) -> None:
    east = Ownership.of(arrays.map, "east")
    held = _east_in_use(arrays)
    in_use = held.seen_by(None, now_s=NOW)
    summary = summarise(east, "east", held.free, 7, in_use=in_use)

    sent = national_pb2.RegionSummary.FromString(summary.SerializeToString())
    assert [s.site_id for s in sent.site_loads] == EAST_SITES
    view = {use.site.id: use.utilisation for use in site_uses(in_use, owned=east.sites)}
    assert {s.site_id: s.utilisation for s in sent.site_loads} == view
    loads = site_loads_of(sent.site_loads, sites=owned_sites(arrays.map, east.provinces))
    assert loads.loads == {"AA-dc": 0.75, "AA-idle": 0.0, "BB-hub": 0.0, "BB-dc": 0.5}
    assert loads.dropped == frozenset()
    # The room held counts as used in the sites' loads and as free in the free capacity.
    a100 = {a.model: (a.free, a.total) for a in sent.accelerators}["A100"]
    assert a100 == (25_000, 28_000)


def _loads(*entries: tuple[str, float]) -> list[national_pb2.SiteLoad]:
    return [national_pb2.SiteLoad(site_id=site, utilisation=share) for site, share in entries]


@pytest.mark.parametrize("share", [math.nan, math.inf, -math.inf, -0.01, 1.0001])
def test_a_load_that_is_not_a_share_is_refused_naming_its_entry(
    tiny_map: ComputeNetworkMap, share: float
) -> None:
    sites = owned_sites(tiny_map, frozenset({"AA", "BB"}))
    with pytest.raises(WireError, match=r"^summary\.site_loads\[1\]\.utilisation: must be finite"):
        site_loads_of(
            _loads(("AA-dc", 0.5), ("BB-hub", share)), sites=sites, field="summary.site_loads"
        )
    # Nor is it taken for a site that is not the region's.
    with pytest.raises(WireError, match=r"site_loads\[0\]\.utilisation"):
        site_loads_of(_loads(("CC-hub", share)), sites=sites)


def test_a_site_named_twice_or_too_many_entries_are_refused(tiny_map: ComputeNetworkMap) -> None:
    sites = owned_sites(tiny_map, frozenset({"AA", "BB"}))
    with pytest.raises(WireError, match=r"site_loads\[2\]\.site_id: site 'AA-dc' is named twice"):
        site_loads_of(_loads(("AA-dc", 0.5), ("BB-hub", 0.0), ("AA-dc", 0.5)), sites=sites)
    too_many = _loads(*[("AA-dc", 0.0)] * (MAX_WIRE_SITE_LOADS + 1))
    with pytest.raises(WireError, match=r"^site_loads: 100001 entries, more than 100000"):
        site_loads_of(too_many, sites=sites)


def test_the_load_of_a_site_that_is_not_the_regions_is_left_out(
    tiny_map: ComputeNetworkMap,
) -> None:
    sites = owned_sites(tiny_map, frozenset({"AA", "BB"}))
    assert sites == frozenset(EAST_SITES)
    loads = site_loads_of(
        _loads(("AA-dc", 1.0), ("CC-hub", 0.5), ("nowhere", 0.25), ("nowhere", 0.25)),
        sites=sites,
    )
    assert loads.loads == {"AA-dc": 1.0}
    assert loads.dropped == {"CC-hub", "nowhere"}
    assert site_loads_of([], sites=sites).loads == {}
