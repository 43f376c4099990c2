"""InMemoryLedger on the tiny map: exact, atomic, thread-safe reservation and release.

Capacities (conftest): AA-dc 64 cores = 64 000 millicores, 512 GiB, 10 000 GiB storage, 4 A100;
every site link is 100 Gbps = 100 000 Mbps.
"""

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cnbrain.ledger.memory import InMemoryLedger, LedgerError
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from tests.ledger.snapshots import FIELDS, assert_snapshot_equals, copy_of

N_LINKS_TINY = 28


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


@pytest.fixture
def ledger(arrays: MapArrays) -> InMemoryLedger:
    return InMemoryLedger(arrays)


def res(
    rid: str,
    site: int,
    *,
    cpu_m: int = 0,
    mem_mib: int = 0,
    storage_gib: int = 0,
    acc_column: int = -1,
    acc_milli: int = 0,
    links: tuple[int, ...] = (),
    mbps: int = 0,
) -> Reservation:
    return Reservation(
        id=rid,
        request_id=f"req-{rid}",
        compute=ComputeClaim(site, cpu_m, mem_mib, storage_gib, acc_column, acc_milli),
        links=links,
        mbps=mbps,
    )


def site_of(arrays: MapArrays, site_id: str) -> int:
    return arrays.map.site_index[site_id]


def site_links(arrays: MapArrays, site_id: str) -> tuple[int, ...]:
    g = arrays.map.graph
    return tuple(sorted(int(d["idx"]) for _, _, d in g.edges(site_id, data=True)))


def test_capacities_as_expected(arrays: MapArrays) -> None:
    aa = site_of(arrays, "AA-dc")
    assert arrays.cap_cpu_m[aa] == 64_000
    assert arrays.cap_mem_mib[aa] == 512 * 1024
    assert arrays.cap_acc[aa, arrays.accelerator_column["A100"]] == 4000
    for link in site_links(arrays, "AA-dc"):
        assert arrays.link_cap_mbps[link] == 100_000


def test_fresh_snapshot_is_capacity(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    snap = ledger.snapshot()
    assert snap.version == 0
    np.testing.assert_array_equal(snap.free_cpu_m, arrays.cap_cpu_m)
    np.testing.assert_array_equal(snap.free_acc, arrays.cap_acc)
    np.testing.assert_array_equal(snap.free_acc_by_model, arrays.cap_acc.T)
    np.testing.assert_array_equal(snap.residual_mbps, arrays.link_cap_mbps)
    assert_snapshot_equals(snap, copy_of(Snapshot.empty(arrays)))


def test_reserve_then_release_restores_exactly(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    before = copy_of(ledger.snapshot())
    aa = site_of(arrays, "AA-dc")
    col = arrays.accelerator_column["A100"]
    links = (*site_links(arrays, "AA-dc"), 3, 15)
    r = res(
        "r1",
        aa,
        cpu_m=12_345,
        mem_mib=4_097,
        storage_gib=77,
        acc_column=col,
        acc_milli=3000,
        links=links,
        mbps=1_234,
    )
    ledger.reserve(r)

    during = ledger.snapshot()
    assert during.free_cpu_m[aa] == 64_000 - 12_345
    assert during.free_mem_mib[aa] == 512 * 1024 - 4_097
    assert during.free_storage_gib[aa] == 10_000 - 77
    assert during.free_acc[aa, col] == 1000
    assert during.free_acc_by_model[col, aa] == 1000
    expected_mbps = before["residual_mbps"].copy()
    expected_mbps[list(links)] -= 1_234
    np.testing.assert_array_equal(during.residual_mbps, expected_mbps)
    others = np.arange(arrays.n_sites) != aa
    np.testing.assert_array_equal(during.free_cpu_m[others], before["free_cpu_m"][others])
    assert dict(ledger.reservations) == {"r1": r}

    assert ledger.release("r1") == r
    assert_snapshot_equals(ledger.snapshot(), before)
    assert dict(ledger.reservations) == {}
    ledger.check_invariants()


def test_reserve_exactly_to_capacity(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    aa = site_of(arrays, "AA-dc")
    col = arrays.accelerator_column["A100"]
    link = site_links(arrays, "AA-dc")[0]
    full = res(
        "full",
        aa,
        cpu_m=64_000,
        mem_mib=512 * 1024,
        storage_gib=10_000,
        acc_column=col,
        acc_milli=4000,
        links=(link,),
        mbps=100_000,
    )
    ledger.reserve(full)
    snap = ledger.snapshot()
    assert snap.free_cpu_m[aa] == 0
    assert snap.free_mem_mib[aa] == 0
    assert snap.free_storage_gib[aa] == 0
    assert snap.free_acc[aa, col] == 0
    assert snap.residual_mbps[link] == 0
    with pytest.raises(LedgerError):
        ledger.reserve(res("one-more", aa, cpu_m=1))
    with pytest.raises(LedgerError):
        ledger.reserve(res("one-more-mbps", site_of(arrays, "BB-hub"), links=(link,), mbps=1))
    ledger.check_invariants()


def over_capacity(arrays: MapArrays, what: str) -> Reservation:
    """A reservation on AA-dc where everything fits except `what`, by one unit."""
    aa = site_of(arrays, "AA-dc")
    col = arrays.accelerator_column["A100"]
    links = site_links(arrays, "AA-dc")
    kw = {
        "cpu_m": 1_000,
        "mem_mib": 1_024,
        "storage_gib": 10,
        "acc_column": col,
        "acc_milli": 1000,
        "links": links,
        "mbps": 1_000,
    }
    kw |= {
        "cpu": {"cpu_m": 64_001},
        "memory": {"mem_mib": 512 * 1024 + 1},
        "storage": {"storage_gib": 10_001},
        "accelerators": {"acc_milli": 4001},
        "bandwidth": {"mbps": 100_001},
    }[what]
    return res(f"over-{what}", aa, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("what", ["cpu", "memory", "storage", "accelerators", "bandwidth"])
def test_over_capacity_raises_and_changes_nothing(
    ledger: InMemoryLedger, arrays: MapArrays, what: str
) -> None:
    before_snap = ledger.snapshot()
    before = copy_of(before_snap)
    with pytest.raises(LedgerError):
        ledger.reserve(over_capacity(arrays, what))
    assert ledger.version == 0
    assert ledger.snapshot() is before_snap
    assert_snapshot_equals(ledger.snapshot(), before)
    assert dict(ledger.reservations) == {}
    ledger.check_invariants()


def test_bandwidth_failure_leaves_compute_untouched_after_prior_use(
    ledger: InMemoryLedger, arrays: MapArrays
) -> None:
    """Compute fits, the first link fits, the second link does not: nothing at all is taken."""
    aa = site_of(arrays, "AA-dc")
    first, second = site_links(arrays, "AA-dc")
    ledger.reserve(res("filler", site_of(arrays, "BB-hub"), cpu_m=1, links=(second,), mbps=95_000))
    before = copy_of(ledger.snapshot())
    version = ledger.version
    with pytest.raises(LedgerError):
        ledger.reserve(
            res("too-much", aa, cpu_m=10_000, mem_mib=10, links=(first, second), mbps=6_000)
        )
    assert ledger.version == version
    assert_snapshot_equals(ledger.snapshot(), before)
    assert ledger.snapshot().free_cpu_m[aa] == 64_000
    assert ledger.snapshot().residual_mbps[first] == 100_000
    assert set(ledger.reservations) == {"filler"}
    ledger.reserve(res("fits", aa, cpu_m=10_000, mem_mib=10, links=(first, second), mbps=5_000))
    assert ledger.snapshot().residual_mbps[second] == 0
    ledger.check_invariants()


def test_accumulated_use_limits_later_reservations(
    ledger: InMemoryLedger, arrays: MapArrays
) -> None:
    aa = site_of(arrays, "AA-dc")
    ledger.reserve(res("a", aa, cpu_m=60_000))
    with pytest.raises(LedgerError):
        ledger.reserve(res("b", aa, cpu_m=4_001))
    ledger.reserve(res("b", aa, cpu_m=4_000))
    assert ledger.snapshot().free_cpu_m[aa] == 0
    ledger.release("a")
    assert ledger.snapshot().free_cpu_m[aa] == 60_000


@pytest.mark.parametrize(
    "bad",
    [
        {"cpu_m": -1},
        {"mem_mib": -1},
        {"storage_gib": -1},
        {"acc_column": 0, "acc_milli": -1},
        {"acc_column": -1, "acc_milli": 1},
        {"acc_column": 99, "acc_milli": 1},
        {"mbps": -1, "links": (0,)},
        {"links": (0, 0), "mbps": 1},
    ],
)
def test_malformed_claims_refused(
    ledger: InMemoryLedger, arrays: MapArrays, bad: dict[str, object]
) -> None:
    before = copy_of(ledger.snapshot())
    with pytest.raises(LedgerError):
        ledger.reserve(res("bad", site_of(arrays, "AA-dc"), **bad))  # type: ignore[arg-type]
    assert_snapshot_equals(ledger.snapshot(), before)
    assert ledger.version == 0


@pytest.mark.parametrize("site", [-1, 5, 100])
def test_unknown_site_refused(ledger: InMemoryLedger, site: int) -> None:
    with pytest.raises(LedgerError):
        ledger.reserve(res("bad", site, cpu_m=1))
    assert ledger.version == 0


@pytest.mark.parametrize("link", [-1, N_LINKS_TINY])
def test_unknown_link_refused(ledger: InMemoryLedger, arrays: MapArrays, link: int) -> None:
    assert len(arrays.link_cap_mbps) == N_LINKS_TINY
    before = copy_of(ledger.snapshot())
    with pytest.raises(LedgerError):
        ledger.reserve(res("bad-link", site_of(arrays, "AA-dc"), cpu_m=1, links=(link,), mbps=5))
    assert_snapshot_equals(ledger.snapshot(), before)
    assert ledger.version == 0


def test_duplicate_id_refused(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    aa = site_of(arrays, "AA-dc")
    ledger.reserve(res("dup", aa, cpu_m=1_000))
    before = copy_of(ledger.snapshot())
    with pytest.raises(LedgerError):
        ledger.reserve(res("dup", site_of(arrays, "CC-hub"), cpu_m=2_000))
    assert_snapshot_equals(ledger.snapshot(), before)
    assert ledger.version == 1
    assert ledger.reservations["dup"].compute.site == aa
    ledger.release("dup")
    ledger.reserve(res("dup", aa, cpu_m=1_000))  # free again once released


def test_release_unknown_raises(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    with pytest.raises(LedgerError):
        ledger.release("nope")
    ledger.reserve(res("x", site_of(arrays, "AA-dc"), cpu_m=1))
    ledger.release("x")
    before = copy_of(ledger.snapshot())
    with pytest.raises(LedgerError):
        ledger.release("x")
    assert ledger.version == 2
    assert_snapshot_equals(ledger.snapshot(), before)


def test_version_increments(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    aa = site_of(arrays, "AA-dc")
    assert ledger.version == 0
    ledger.reserve(res("a", aa, cpu_m=1))
    assert ledger.version == 1
    ledger.reserve(res("b", aa, cpu_m=1))
    assert ledger.version == 2
    with pytest.raises(LedgerError):
        ledger.reserve(res("c", aa, cpu_m=10**9))
    assert ledger.version == 2
    ledger.release("a")
    assert ledger.version == 3
    assert ledger.snapshot().version == 3


def test_snapshot_cached_and_read_only(ledger: InMemoryLedger, arrays: MapArrays) -> None:
    aa = site_of(arrays, "AA-dc")
    s0 = ledger.snapshot()
    assert ledger.snapshot() is s0
    for f in FIELDS:
        arr = getattr(s0, f)
        assert not arr.flags.writeable, f
        with pytest.raises(ValueError):
            arr[(0,) * arr.ndim] = 1
    ledger.reserve(res("a", aa, cpu_m=5_000))
    s1 = ledger.snapshot()
    assert s1 is not s0
    assert s1.version == 1
    assert ledger.snapshot() is s1
    assert s0.free_cpu_m[aa] == 64_000  # an old snapshot does not move
    assert s1.free_cpu_m[aa] == 59_000
    ledger.release("a")
    s2 = ledger.snapshot()
    assert s2 is not s1
    assert s1.free_cpu_m[aa] == 59_000
    np.testing.assert_array_equal(s2.free_cpu_m, s0.free_cpu_m)


# --- random sequences ------------------------------------------------------------------


@dataclass(frozen=True)
class Reserve:
    site: int
    cpu_m: int
    mem_mib: int
    storage_gib: int
    acc_column: int
    acc_milli: int
    links: tuple[int, ...]
    mbps: int


@dataclass(frozen=True)
class Release:
    pick: int
    unknown: bool


N_SITES = 5
N_LINKS = N_LINKS_TINY
N_MODELS = 2


def small_or_large(small: int, large: int) -> st.SearchStrategy[int]:
    """Mostly amounts that fit, sometimes more than a site or link holds."""
    return st.one_of(st.integers(0, small), st.integers(0, small), st.integers(0, large))


reserve_ops = st.builds(
    Reserve,
    site=st.integers(0, N_SITES - 1),
    cpu_m=small_or_large(20_000, 700_000),
    mem_mib=small_or_large(100_000, 3_000_000),
    storage_gib=small_or_large(2_000, 12_000),
    acc_column=st.integers(-1, N_MODELS - 1),
    acc_milli=st.one_of(st.just(0), small_or_large(3000, 20_000)),
    links=st.lists(st.integers(0, N_LINKS - 1), max_size=4, unique=True).map(tuple),
    mbps=small_or_large(20_000, 150_000),
)
release_ops = st.builds(Release, pick=st.integers(0, 100), unknown=st.booleans())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(st.one_of(reserve_ops, release_ops), max_size=30))
def test_random_sequences_keep_invariants(arrays: MapArrays, ops: list[Reserve | Release]) -> None:
    assert (arrays.n_sites, len(arrays.link_cap_mbps), arrays.cap_acc.shape[1]) == (
        N_SITES,
        N_LINKS,
        N_MODELS,
    )
    ledger = InMemoryLedger(arrays)
    # An independent model of usage.
    used = {
        "cpu": np.zeros(N_SITES, dtype=np.int64),
        "mem": np.zeros(N_SITES, dtype=np.int64),
        "sto": np.zeros(N_SITES, dtype=np.int64),
        "acc": np.zeros((N_SITES, N_MODELS), dtype=np.int64),
        "mbps": np.zeros(N_LINKS, dtype=np.int64),
    }
    held: dict[str, Reserve] = {}
    version = 0

    def apply(op: Reserve, sign: int) -> None:
        used["cpu"][op.site] += sign * op.cpu_m
        used["mem"][op.site] += sign * op.mem_mib
        used["sto"][op.site] += sign * op.storage_gib
        if op.acc_milli:
            used["acc"][op.site, op.acc_column] += sign * op.acc_milli
        for link in op.links:
            used["mbps"][link] += sign * op.mbps

    def fits(op: Reserve) -> bool:
        s = op.site
        if used["cpu"][s] + op.cpu_m > arrays.cap_cpu_m[s]:
            return False
        if used["mem"][s] + op.mem_mib > arrays.cap_mem_mib[s]:
            return False
        if used["sto"][s] + op.storage_gib > arrays.cap_storage_gib[s]:
            return False
        if op.acc_milli and (
            op.acc_column < 0
            or used["acc"][s, op.acc_column] + op.acc_milli > arrays.cap_acc[s, op.acc_column]
        ):
            return False
        return all(used["mbps"][link] + op.mbps <= arrays.link_cap_mbps[link] for link in op.links)

    for n, op in enumerate(ops):
        if isinstance(op, Reserve):
            rid = f"r{n}"
            expected_ok = fits(op)
            r = res(
                rid,
                op.site,
                cpu_m=op.cpu_m,
                mem_mib=op.mem_mib,
                storage_gib=op.storage_gib,
                acc_column=op.acc_column,
                acc_milli=op.acc_milli,
                links=op.links,
                mbps=op.mbps,
            )
            event(f"reserve fits={expected_ok}")
            if expected_ok:
                ledger.reserve(r)
                apply(op, +1)
                held[rid] = op
                version += 1
            else:
                with pytest.raises(LedgerError):
                    ledger.reserve(r)
        elif op.unknown or not held:
            with pytest.raises(LedgerError):
                ledger.release(f"unknown-{n}")
        else:
            rid = sorted(held)[op.pick % len(held)]
            ledger.release(rid)
            apply(held.pop(rid), -1)
            version += 1
        ledger.check_invariants()
        assert ledger.version == version
        assert set(ledger.reservations) == set(held)
        snap = ledger.snapshot()
        np.testing.assert_array_equal(snap.free_cpu_m, arrays.cap_cpu_m - used["cpu"])
        np.testing.assert_array_equal(snap.free_mem_mib, arrays.cap_mem_mib - used["mem"])
        np.testing.assert_array_equal(snap.free_storage_gib, arrays.cap_storage_gib - used["sto"])
        np.testing.assert_array_equal(snap.free_acc, arrays.cap_acc - used["acc"])
        np.testing.assert_array_equal(snap.residual_mbps, arrays.link_cap_mbps - used["mbps"])

    for rid in list(held):
        ledger.release(rid)
    ledger.check_invariants()
    assert_snapshot_equals(ledger.snapshot(), copy_of(Snapshot.empty(arrays)))


# --- threads -------------------------------------------------------------------------


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def run_threads(n: int, body: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def wrapped(t: int) -> None:
        try:
            barrier.wait()
            body(t)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_concurrent_reserve_never_oversubscribes_cpu(
    ledger: InMemoryLedger, arrays: MapArrays, fast_switching: None
) -> None:
    aa = site_of(arrays, "AA-dc")
    per = 10_000  # 10 cores
    expected = int(arrays.cap_cpu_m[aa] // per)
    assert expected == 6
    won: list[str] = []
    lock = threading.Lock()

    def body(t: int) -> None:
        for i in range(50):
            rid = f"t{t}-{i}"
            try:
                ledger.reserve(res(rid, aa, cpu_m=per, mem_mib=1_024))
            except LedgerError:
                continue
            with lock:
                won.append(rid)

    run_threads(8, body)
    assert len(won) == expected
    assert set(ledger.reservations) == set(won)
    assert ledger.version == expected
    assert ledger.snapshot().free_cpu_m[aa] == arrays.cap_cpu_m[aa] - expected * per
    ledger.check_invariants()


def test_concurrent_reserve_never_oversubscribes_bandwidth(
    ledger: InMemoryLedger, arrays: MapArrays, fast_switching: None
) -> None:
    hub = site_of(arrays, "CC-hub")
    link = site_links(arrays, "CC-hub")[0]
    per = 15_000
    expected = int(arrays.link_cap_mbps[link] // per)
    assert expected == 6
    assert arrays.cap_cpu_m[hub] >= 8 * 50 * 1_000  # compute never the limit
    won: list[str] = []
    lock = threading.Lock()

    def body(t: int) -> None:
        for i in range(50):
            rid = f"t{t}-{i}"
            try:
                ledger.reserve(res(rid, hub, cpu_m=1_000, links=(link,), mbps=per))
            except LedgerError:
                continue
            with lock:
                won.append(rid)

    run_threads(8, body)
    assert len(won) == expected
    snap = ledger.snapshot()
    assert snap.residual_mbps[link] == arrays.link_cap_mbps[link] - expected * per
    assert snap.free_cpu_m[hub] == arrays.cap_cpu_m[hub] - expected * 1_000
    ledger.check_invariants()


def test_concurrent_reserve_and_release_churn(
    ledger: InMemoryLedger, arrays: MapArrays, fast_switching: None
) -> None:
    aa = site_of(arrays, "AA-dc")
    per = 10_000
    cap = int(arrays.cap_cpu_m[aa])
    seen_negative: list[int] = []

    def body(t: int) -> None:
        mine: list[str] = []
        for i in range(50):
            rid = f"t{t}-{i}"
            try:
                ledger.reserve(res(rid, aa, cpu_m=per))
                mine.append(rid)
            except LedgerError:
                pass
            if mine and i % 2:
                ledger.release(mine.pop(0))
            free = int(ledger.snapshot().free_cpu_m[aa])
            if not 0 <= free <= cap:
                seen_negative.append(free)
        for rid in mine:
            ledger.release(rid)

    run_threads(8, body)
    assert seen_negative == []
    assert dict(ledger.reservations) == {}
    assert ledger.snapshot().free_cpu_m[aa] == cap
    ledger.check_invariants()
