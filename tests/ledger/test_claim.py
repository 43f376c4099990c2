"""A claim (ids) and the engine's reservation (indices) turn into each other exactly."""

import dataclasses

import pytest

from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, claim_from, duration_seconds, reservation_of, window_of
from cnbrain.ledger.nodes import Gang
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from tests.ledger.windows import HOUR


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


def _reservation(arrays: MapArrays) -> Reservation:
    column = next(iter(arrays.accelerator_column.values()))
    return Reservation(
        id="rsv-1",
        request_id="req-1",
        compute=ComputeClaim(1, 4000, 8192, 10, column, 2000),
        links=(0, 3),
        mbps=200,
    )


def test_a_reservation_becomes_a_claim_by_ids_and_back(arrays: MapArrays) -> None:
    reservation = _reservation(arrays)
    claim = claim_from(reservation, arrays=arrays, tenant_id="acme", window=HOUR)
    model = arrays.map.accelerator_models[reservation.compute.acc_column]
    assert claim == Claim(
        reservation_id="rsv-1",
        request_id="req-1",
        tenant_id="acme",
        site_id=arrays.map.sites[1].id,
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=10,
        accelerator_model=model,
        accelerator_milli=2000,
        link_ids=(arrays.map.links[0].id, arrays.map.links[3].id),
        mbps=200,
        window=HOUR,
        counts_quota=True,
    )
    assert reservation_of(claim, arrays=arrays) == reservation
    gang = dataclasses.replace(claim, nodes=2)
    assert reservation_of(gang, arrays=arrays).compute.gang == Gang(
        nodes=2, cpu_m=2000, mem_mib=4096, model=model, devices=1
    )
    assert (
        claim_from(
            reservation_of(gang, arrays=arrays), arrays=arrays, tenant_id="acme", window=HOUR
        )
        == gang
    )


def test_a_claim_without_a_site_takes_no_compute_in_the_engine(arrays: MapArrays) -> None:
    claim = dataclasses.replace(
        claim_from(_reservation(arrays), arrays=arrays, tenant_id="acme", window=HOUR),
        site_id=None,
    )
    back = reservation_of(claim, arrays=arrays)
    assert back.compute == ComputeClaim(0, 0, 0, 0, -1, 0)
    assert (back.links, back.mbps) == ((0, 3), 200)


def test_the_link_index_of_a_map_follows_its_links(arrays: MapArrays) -> None:
    assert [arrays.link_index[link.id] for link in arrays.map.links] == list(
        range(len(arrays.map.links))
    )


@pytest.mark.parametrize(
    ("hours", "seconds"), [(2.0, 7200), (0.25, 900), (1e-9, 1), (0.50001, 1801)]
)
def test_a_window_lasts_the_duration_in_whole_seconds_rounded_up(
    hours: float, seconds: int
) -> None:
    assert duration_seconds(hours) == seconds
    assert window_of(start_s=1_800_000_000, duration_hours=hours) == Window(
        1_800_000_000, 1_800_000_000 + seconds
    )
