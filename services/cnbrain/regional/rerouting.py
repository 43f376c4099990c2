"""Re-routing a held reservation off a link that went down (`docs/dataplane.md`,
"Re-steering").

The brain's steered paths (`federation.steered_paths`) find the held reservations with a
link of this brain's segments down and hand each here. Its request keeps its site, its
compute and its window; its path is computed again from the same access node to the same
site on the brain's router, avoiding the links that are down and those without the
reservation's bandwidth free (its own given back). Then, in order:

1. the new path is steered under its new reservation id: its headends replace the old ones'
   routes for the job's address (the swap; make before break in the data plane);
2. one unit of work releases the old reservation and takes the new one (the same compute,
   the new links), stores the new decision and appends the `rerouted` event: the ledger
   never holds both, nor neither;
3. what is left of the old path's steering (its policers) is removed.

A part of a cross-brain reservation that this brain holds (not a reservation of its own)
goes to `parts` (`federation.segment_rerouting`): each owner re-routes only its own
segments, under the same reservation id.

When no path avoids the links down, or the request moves data (its flows were planned on
the old path), or its path crosses another brain's segments (a reservation of its own whose
path is not all its own), or the new path cannot be steered, the request gets a
`not_rerouted` event with the reason (the data plane's details go to the log only), once
per reservation and set of its links down while they stay down, and keeps its reservation
and its old path's steering. When the unit of work fails, the old path's steering is put
back and the new path's removed: the ledger is as it was (a reservation released meanwhile,
by a cancel say, is left so, without an event).
"""

import itertools
import logging
import math
import secrets
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import Decision, NetworkPath
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.detours import ToldOnce, blocked_links
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.steered_paths import Reroute, SteeredPaths
from cnbrain.ledger.claim import Claim
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.routing.router import Route
from cnbrain.storage import ledger_store, request_events, requests
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import LedgerStoreError

log = logging.getLogger("cnbrain.regional")

K_PATHS = 3


class Rerouter:
    """Re-routes held reservations of this brain (see the module docstring); `steered` is
    the brain's steering, `owner` the brain's region (None: a standalone brain, which owns
    every segment), `parts` what re-routes its parts of cross-brain reservations (None:
    nothing; a standalone brain holds none)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        changes: CapacityChanges,
        live_map: LiveMap,
        steered: SteeredPaths,
        owner: str | None,
        parts: Reroute | None = None,
    ) -> None:
        self._parts = parts
        self._sessions = sessions
        self._changes = changes
        self._live_map = live_map
        self._steered = steered
        self._owner = owner
        self._told = ToldOnce()
        """(reservation id, its links down) of the `not_rerouted` events written."""

    def keep(self, reservation_ids: set[str]) -> None:
        """Forget the `not_rerouted` events written for every reservation but these (held,
        with a link down): one whose links come up and go down again is told again."""
        self._told.keep(reservation_ids)
        if self._parts is not None:
            self._parts.keep(reservation_ids)

    async def retell(self) -> None:
        """What `parts` could not tell other regions before, told again."""
        if self._parts is not None:
            await self._parts.retell()

    async def __call__(self, decision: Decision, down: set[str]) -> None:
        """Re-route `decision`'s reservation off its links `down` (ids), and off every other
        link that is down (`SteeredPaths.links_down`), or tell its request why not; a part
        of a cross-brain reservation goes to `parts`."""
        path = decision.path
        assert path is not None and decision.reservation_id is not None
        cut = frozenset({hop.link for s in path.segments for hop in s.hops} & down)
        async with self._sessions() as session:
            stored = await requests.get_request(
                session, tenant_id=None, request_id=decision.request_id
            )
            held = await ledger_store.held_claims(session, request_id=decision.request_id)
        old = next((c for c in held if c.reservation_id == decision.reservation_id), None)
        if old is None:
            if self._parts is not None:
                await self._parts(decision, down)  # a part (or released meanwhile)
            return
        if stored is None:
            return
        request = PlacementRequest.model_validate(stored.body)
        why = f"link {', '.join(sorted(cut))} went down"
        if self._owner is not None and any(s.owner != self._owner for s in path.segments):
            await self._not_rerouted(
                decision, cut, f"{why}; its path crosses other brains' segments"
            )
            return
        if request.moves_data:
            await self._not_rerouted(
                decision, cut, f"{why}; a request that moves data keeps the path it was placed on"
            )
            return
        every = [link.id for link in self._live_map.map.links]
        found = await self._new_route(decision, old, down | await self._steered.links_down(every))
        if found is None:
            await self._not_rerouted(
                decision,
                cut,
                f"{why}; no other path to {decision.site} has "
                f"{path.bandwidth_gbps} Gbps free on every link",
            )
            return
        await self._move(decision, old, *found, cut, why)

    async def _new_route(
        self, decision: Decision, old: Claim, down: set[str]
    ) -> tuple[Route, list[float]] | None:
        """The best route from the old path's access node to its site that avoids `down`
        and every link without the reservation's bandwidth free (its own given back), with
        the free bandwidth of every link (Gbps, its own given back)."""
        path = decision.path
        assert path is not None and decision.site is not None
        engine = self._live_map.engine
        snapshot, _ = await self._live_map.snapshot()
        blocked, free_gbps = blocked_links(snapshot, held=old.link_ids, mbps=old.mbps, down=down)
        access = path.segments[0].hops[0].from_node
        [routes] = engine.router.routes(
            access_node=access,
            sites=[engine.arrays.map.site_index[decision.site]],
            k=K_PATHS,
            blocked=blocked,
            max_latency_ms=math.inf,
        )
        return (routes[0], free_gbps) if routes else None

    async def _move(
        self,
        decision: Decision,
        old: Claim,
        route: Route,
        free_gbps: list[float],
        cut: frozenset[str],
        why: str,
    ) -> None:
        engine = self._live_map.engine
        links = engine.arrays.map.links
        new_id = f"rsv-{secrets.token_hex(8)}"
        new_path = _network_path(route, engine, decision, free_gbps)
        moved = decision.model_copy(update={"path": new_path, "reservation_id": new_id})
        new_links = tuple(links[j].id for j in route.links)
        claim = replace(old, reservation_id=new_id, link_ids=new_links)
        try:
            await self._steered.install([moved])
        except SteeringError as error:
            await self._not_rerouted(
                decision, cut, f"{why}; the new path could not be established", detail=str(error)
            )
            return
        try:
            await self._swap_ledger(decision, old, claim, moved, why)
        except Exception as error:
            await self._unsteer_new(decision, new_id)
            if isinstance(error, ledger_store.CapacityConflict | ledger_store.QuotaExceeded):
                await self._not_rerouted(decision, cut, f"{why}; the new path was taken: {error}")
                return
            if isinstance(error, LedgerStoreError):
                return  # the old reservation was released meanwhile
            raise
        await self._steered.release([str(decision.reservation_id)])
        log.info(
            "request %s: rerouted off %s (reservation %s -> %s)",
            decision.request_id,
            why,
            decision.reservation_id,
            new_id,
        )

    async def _unsteer_new(self, decision: Decision, new_id: str) -> None:
        """Put the old path's steering back in place of the new one's, and remove the new
        one's (what of the old cannot be put back now, the steered paths put back once its
        links are up)."""
        try:
            await self._steered.install([decision])
        except SteeringError as error:
            log.warning("request %s: %s", decision.request_id, error)
        await self._steered.release([new_id])

    async def _swap_ledger(
        self, decision: Decision, old: Claim, new: Claim, moved: Decision, why: str
    ) -> None:
        """One unit of work: `old` released, `new` taken, `moved` stored as the request's
        decision, and its `rerouted` event appended."""
        async with self._changes.begin() as (session, change):
            change.free()
            await ledger_store.release(session, reservation_id=old.reservation_id)
            await ledger_store.reserve_many(session, claims=[new])
            await requests.save_decisions(
                session, {decision.request_id: moved.model_dump(mode="json")}
            )
            event = RequestEvent.of(
                decision.request_id,
                RequestEventKind.REROUTED,
                utcnow(),
                reason=why,
                previous_reservation=old.reservation_id,
                reservation=new.reservation_id,
                hops=len(_hops(moved)),
            )
            await request_events.append_many(session, [event])

    async def _not_rerouted(
        self, decision: Decision, cut: frozenset[str], reason: str, *, detail: str = ""
    ) -> None:
        """Tell the request `reason` in a `not_rerouted` event, once per reservation and set
        of its links down `cut`; `detail` goes to the log only."""
        key = (str(decision.reservation_id), cut)
        if key in self._told:
            return
        async with self._sessions.begin() as session:
            event = RequestEvent.of(
                decision.request_id, RequestEventKind.NOT_REROUTED, utcnow(), reason=reason
            )
            await request_events.append_many(session, [event])
        self._told.add(key)
        if detail:
            log.warning("request %s not rerouted: %s (%s)", decision.request_id, reason, detail)
        else:
            log.warning("request %s not rerouted: %s", decision.request_id, reason)


def _hops(decision: Decision) -> list[str]:
    path = decision.path
    return [] if path is None else [hop.link for s in path.segments for hop in s.hops]


def _network_path(
    route: Route, engine: Any, decision: Decision, free_gbps: list[float]
) -> NetworkPath:
    """The path of `route` as a decision states it, with `decision`'s bandwidth and each
    hop's free bandwidth before it (`free_gbps`, by link index)."""
    assert decision.path is not None
    links = engine.arrays.map.links
    segments = [
        {
            "kind": segment.kind.value,
            "owner": segment.owner,
            "latency_ms": round(segment.path.latency_ms, 4),
            "hops": [
                {
                    "link": links[j].id,
                    "from_node": a,
                    "to_node": b,
                    "layer": links[j].layer.value,
                    "latency_ms": links[j].latency_ms,
                    "residual_gbps": free_gbps[j],
                }
                for (a, b), j in zip(
                    itertools.pairwise(segment.path.nodes), segment.path.links, strict=True
                )
            ],
        }
        for segment in route.segments
    ]
    return NetworkPath.model_validate(
        {
            "segments": segments,
            "latency_ms": round(route.latency_ms, 4),
            "bandwidth_gbps": decision.path.bandwidth_gbps,
            "srv6_segment_list": engine.sids.segment_list(route),
        }
    )
