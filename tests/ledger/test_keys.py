"""What a claim demands of the resources of a calendar, by key."""

import dataclasses

import pytest

from cnbrain.ledger.claim import Claim
from cnbrain.ledger.keys import accelerator_key, demand_of, link_key, site_key
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from tests.ledger.windows import HOUR


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


def _claim(arrays: MapArrays) -> Claim:
    return Claim(
        reservation_id="rsv-1",
        request_id="req-1",
        tenant_id="acme",
        site_id=arrays.map.sites[1].id,
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=0,
        accelerator_model="A100",
        accelerator_milli=2000,
        link_ids=(arrays.map.links[0].id, arrays.map.links[3].id),
        mbps=200,
        window=HOUR,
    )


def test_a_claim_demands_its_compute_on_its_site_and_its_mbps_on_each_link(
    arrays: MapArrays,
) -> None:
    assert demand_of(_claim(arrays), arrays=arrays) == {
        site_key(1, "cpu_m"): 4000,
        site_key(1, "mem_mib"): 8192,
        accelerator_key(1, "A100"): 2000,
        link_key(0): 200,
        link_key(3): 200,
    }


def test_a_claim_without_a_site_or_bandwidth_demands_only_the_rest(arrays: MapArrays) -> None:
    claim = _claim(arrays)

    assert demand_of(dataclasses.replace(claim, site_id=None), arrays=arrays) == {
        link_key(0): 200,
        link_key(3): 200,
    }
    assert demand_of(dataclasses.replace(claim, mbps=0), arrays=arrays) == {
        site_key(1, "cpu_m"): 4000,
        site_key(1, "mem_mib"): 8192,
        accelerator_key(1, "A100"): 2000,
    }
    with pytest.raises(KeyError):
        demand_of(dataclasses.replace(claim, link_ids=("nowhere",)), arrays=arrays)
