"""The in-memory ledger: exact, atomic reservation of compute and bandwidth."""

import threading
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from cnbrain.domain.errors import Conflict
from cnbrain.ledger.nodes import NodeState, NodeTake, pick_on
from cnbrain.ledger.reservation import Reservation, gang_held
from cnbrain.ledger.snapshot import Snapshot, all_free, site_pools, summaries_of
from cnbrain.netmap.arrays import MapArrays


class LedgerError(Conflict):
    """A reservation cannot be taken or released; the message says which resource or id."""


class InMemoryLedger:
    """Holds what is reserved on one map. Thread-safe.

    Contract: `reserve` takes all of a reservation or nothing; `release` gives back exactly what
    `reserve` took; free capacity and residual bandwidth never go negative. On a site with
    node pools, a reservation also takes the nodes of its gang (`cnbrain.ledger.nodes`),
    chosen here and given back on release; the snapshot summarises what is free on them.
    """

    def __init__(self, arrays: MapArrays) -> None:
        self._arrays = arrays
        self._lock = threading.Lock()
        self._used_cpu_m = np.zeros_like(arrays.cap_cpu_m)
        self._used_mem_mib = np.zeros_like(arrays.cap_mem_mib)
        self._used_storage_gib = np.zeros_like(arrays.cap_storage_gib)
        self._used_acc = np.zeros_like(arrays.cap_acc)
        self._used_mbps = np.zeros_like(arrays.link_cap_mbps)
        self._reservations: dict[str, Reservation] = {}
        self._nodes = {
            site: [NodeState(pool) for pool in pools] for site, pools in site_pools(arrays).items()
        }
        self._summaries = dict(all_free(arrays))
        """Per site with pools, its pools' summaries, kept as reservations come and go."""
        self._node_takes: dict[str, list[NodeTake]] = {}
        self._version = 0
        self._snapshot: Snapshot | None = None

    @property
    def arrays(self) -> MapArrays:
        return self._arrays

    @property
    def version(self) -> int:
        return self._version

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        with self._lock:
            return MappingProxyType(dict(self._reservations))

    def snapshot(self) -> Snapshot:
        """Free capacity now; the same object until the ledger changes."""
        with self._lock:
            if self._snapshot is None or self._snapshot.version != self._version:
                self._snapshot = Snapshot.of(
                    self._arrays,
                    version=self._version,
                    used_cpu_m=self._used_cpu_m.copy(),
                    used_mem_mib=self._used_mem_mib.copy(),
                    used_storage_gib=self._used_storage_gib.copy(),
                    used_acc=self._used_acc.copy(),
                    used_mbps=self._used_mbps.copy(),
                    nodes=MappingProxyType(dict(self._summaries)),
                )
            return self._snapshot

    def reserve(self, reservation: Reservation) -> None:
        """Take `reservation` whole, or raise LedgerError and take nothing."""
        with self._lock:
            if reservation.id in self._reservations:
                raise LedgerError(f"reservation {reservation.id!r} exists already")
            self._check_fits(reservation)
            takes = self._pick_nodes(reservation)
            self._apply(reservation, +1)
            self._node_takes[reservation.id] = takes
            self._apply_nodes(reservation.compute.site, takes, 1)
            self._reservations[reservation.id] = reservation
            self._version += 1

    def release(self, reservation_id: str) -> Reservation:
        """Give back everything `reservation_id` took; raise LedgerError if it is not held."""
        with self._lock:
            reservation = self._reservations.pop(reservation_id, None)
            if reservation is None:
                raise LedgerError(f"reservation {reservation_id!r} is not held")
            self._apply(reservation, -1)
            self._apply_nodes(
                reservation.compute.site, self._node_takes.pop(reservation_id, []), -1
            )
            self._version += 1
            return reservation

    def check_invariants(self) -> None:
        """Raise AssertionError unless usage equals the sum of held reservations and fits."""
        with self._lock:
            a = self._arrays
            for name, used, cap in (
                ("cpu", self._used_cpu_m, a.cap_cpu_m),
                ("memory", self._used_mem_mib, a.cap_mem_mib),
                ("storage", self._used_storage_gib, a.cap_storage_gib),
                ("accelerators", self._used_acc, a.cap_acc),
                ("bandwidth", self._used_mbps, a.link_cap_mbps),
            ):
                if (used < 0).any() or (used > cap).any():
                    raise AssertionError(f"{name} usage outside [0, capacity]")
            fresh = InMemoryLedger(a)
            for reservation in self._reservations.values():
                fresh._apply(reservation, +1)
            for mine, theirs in (
                (self._used_cpu_m, fresh._used_cpu_m),
                (self._used_mem_mib, fresh._used_mem_mib),
                (self._used_storage_gib, fresh._used_storage_gib),
                (self._used_acc, fresh._used_acc),
                (self._used_mbps, fresh._used_mbps),
            ):
                if not np.array_equal(mine, theirs):
                    raise AssertionError("usage differs from the sum of held reservations")

    def _check_fits(self, r: Reservation) -> None:
        a, c = self._arrays, r.compute
        if not 0 <= c.site < a.n_sites:
            raise LedgerError(f"site index {c.site} is not on the map")
        site_id = a.map.sites[c.site].id
        for name, used, cap, want in (
            ("cpu", self._used_cpu_m, a.cap_cpu_m, c.cpu_m),
            ("memory", self._used_mem_mib, a.cap_mem_mib, c.mem_mib),
            ("storage", self._used_storage_gib, a.cap_storage_gib, c.storage_gib),
        ):
            if want < 0 or used[c.site] + want > cap[c.site]:
                raise LedgerError(f"site {site_id!r}: not enough {name} for {r.id!r}")
        if c.acc_milli:
            if c.acc_milli < 0 or not 0 <= c.acc_column < a.cap_acc.shape[1]:
                raise LedgerError(f"reservation {r.id!r}: bad accelerator claim")
            if self._used_acc[c.site, c.acc_column] + c.acc_milli > a.cap_acc[c.site, c.acc_column]:
                raise LedgerError(f"site {site_id!r}: not enough accelerators for {r.id!r}")
        if r.mbps < 0 or len(set(r.links)) != len(r.links):
            raise LedgerError(f"reservation {r.id!r}: bad bandwidth claim")
        for link in r.links:
            if not 0 <= link < len(a.link_cap_mbps):
                raise LedgerError(f"reservation {r.id!r}: link index {link} is not on the map")
        for link in r.links:
            if self._used_mbps[link] + r.mbps > a.link_cap_mbps[link]:
                raise LedgerError(
                    f"link {a.map.links[link].id!r}: not enough bandwidth for {r.id!r}"
                )

    def _apply_nodes(self, site: int, takes: list[NodeTake], sign: int) -> None:
        """Apply `takes` on `site`'s pools (`sign` -1: give them back) and update its
        summaries."""
        if not takes:
            return
        states = self._nodes[site]
        for take in takes:
            states[take.pool].apply(take, sign=sign)
        self._summaries[site] = summaries_of(self._arrays, site, states)

    def _pick_nodes(self, r: Reservation) -> list[NodeTake]:
        """The nodes `r` takes on its site's pools (none on a site without pools); raises
        LedgerError when no pool has its gang's nodes free."""
        c = r.compute
        states = self._nodes.get(c.site)
        if not states:
            return []
        picked = pick_on(states, gang_held(c, self._arrays.map.accelerator_models))
        if picked is None:
            site_id = self._arrays.map.sites[c.site].id
            raise LedgerError(f"site {site_id!r}: no node pool has the nodes of {r.id!r} free")
        return picked

    def _apply(self, r: Reservation, sign: int) -> None:
        c = r.compute
        self._used_cpu_m[c.site] += sign * c.cpu_m
        self._used_mem_mib[c.site] += sign * c.mem_mib
        self._used_storage_gib[c.site] += sign * c.storage_gib
        if c.acc_milli:
            self._used_acc[c.site, c.acc_column] += sign * c.acc_milli
        if r.links and r.mbps:
            self._used_mbps[list(r.links)] += sign * r.mbps
