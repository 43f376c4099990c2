"""Room holds in a snapshot (`ledger.held_room`) and in the snapshot cache, on the tiny map:
what a request may take is the free capacity less the holds of other requests active then,
and a reservation of a held request drops the cached snapshot.

Capacities (conftest): AA-dc 64 cores, 512 GiB, 10 000 GiB storage, 4 A100.
"""

import asyncio

import numpy as np
import pytest

from cnbrain.ledger.held_room import HeldRoom, HeldSnapshot
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.snapshot_cache import SnapshotCache
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap

NOW = 1_000.0


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


def _hold(arrays: MapArrays, request_id: str, *, cpu_m: int, a100: int, until_s: float) -> HeldRoom:
    site = arrays.map.site_index["AA-dc"]
    compute = ComputeClaim(
        site=site,
        cpu_m=cpu_m,
        mem_mib=1024,
        storage_gib=0,
        acc_column=arrays.accelerator_column["A100"],
        acc_milli=a100,
    )
    return HeldRoom(request_id, compute, until_s)


def test_a_request_sees_the_holds_of_others_taken_and_its_own_left_to_it(
    arrays: MapArrays,
) -> None:
    empty = Snapshot.empty(arrays)
    aa, a100 = arrays.map.site_index["AA-dc"], arrays.accelerator_column["A100"]
    held = HeldSnapshot(
        empty,
        (
            _hold(arrays, "x", cpu_m=60_000, a100=4000, until_s=NOW + 30),
            _hold(arrays, "y", cpu_m=8_000, a100=0, until_s=NOW + 10),
        ),
    )

    anyone = held.seen_by(None, now_s=NOW)
    assert (int(anyone.free_cpu_m[aa]), int(anyone.free_acc[aa, a100])) == (0, 0)  # never < 0
    assert int(anyone.free_acc_by_model[a100, aa]) == 0
    x = held.seen_by("x", now_s=NOW)
    assert (int(x.free_cpu_m[aa]), int(x.free_acc[aa, a100])) == (56_000, 4000)
    y = held.seen_by("y", now_s=NOW)
    assert (int(y.free_cpu_m[aa]), int(y.free_acc[aa, a100])) == (4_000, 0)
    others = np.arange(arrays.n_sites) != aa
    assert (anyone.free_cpu_m[others] == empty.free_cpu_m[others]).all()
    assert held.held_for(NOW) == {"x", "y"}


def test_a_hold_that_lapsed_counts_for_nothing(arrays: MapArrays) -> None:
    empty = Snapshot.empty(arrays)
    held = HeldSnapshot(empty, (_hold(arrays, "x", cpu_m=60_000, a100=4000, until_s=NOW),))

    assert held.seen_by(None, now_s=NOW) is empty
    assert held.seen_by(None, now_s=NOW - 1) is not empty
    assert held.held_for(NOW) == frozenset()


def test_the_cache_drops_its_snapshot_when_a_held_request_takes_compute(
    arrays: MapArrays,
) -> None:
    aa = arrays.map.site_index["AA-dc"]
    loads = 0

    async def load() -> HeldSnapshot:
        nonlocal loads
        loads += 1
        hold = _hold(arrays, "x", cpu_m=8_000, a100=0, until_s=NOW + 30)
        return HeldSnapshot(Snapshot.empty(arrays), (hold,))

    def taking(request_id: str) -> Reservation:
        compute = ComputeClaim(site=aa, cpu_m=1_000, mem_mib=0, storage_gib=0)
        return Reservation(f"r-{request_id}", request_id, compute, links=(), mbps=0)

    async def run() -> None:
        cache = SnapshotCache(load, arrays=lambda: arrays)
        await cache.get()
        cache.begin_change()
        cache.end_change(taking("other"))
        cached = cache.cached
        assert cached is not None and loads == 1
        assert int(cached.free.free_cpu_m[aa]) == int(arrays.cap_cpu_m[aa]) - 1_000
        assert len(cached.holds) == 1
        cache.begin_change()
        cache.end_change(taking("x"))  # its hold ended in the ledger
        assert cache.cached is None
        await cache.get()
        assert loads == 2

    asyncio.run(run())
