"""Re-routing a brain's own segments of a cross-brain reservation off a link that went down
(`docs/dataplane.md`, "Re-routing by segment").

A cross-region reservation's parts are held by the owners of its path's segments under one
reservation id: the source region (access node to its province's gateway), the national
brain (gateway to gateway on the backbone) and the destination region (gateway to the site).
Each owner re-routes only its own segments, each between the same two nodes, and changes
only its own part. The brain's steered paths (`federation.steered_paths`) hand each held part
with a link of the brain's segments down here (with the decision as this brain steers it;
a part stored since with other segments of this brain, moved by another replica, is
steered as stored instead), and for each, in order:

1. every segment of this brain with a link down gets the best path between its two nodes
   on this brain's graph that avoids every link down (those named, and every link of this
   brain that `SteeredPaths.links_down` has down) and every link without the part's
   bandwidth free (its own given back);
2. one transaction takes the part's bandwidth on the new links, under the part
   (`storage.part_routes.take_links`);
3. the new segments are steered under the same reservation id: their headends, at the same
   first nodes, replace the old ones' routes (make before break in the data plane);
4. one transaction gives the old links' bandwidth back and stores the new decision with the
   part (`storage.part_routes.drop_links`);
5. the request's source region (the owner of the path's first segment) is told, through
   `tell`: its request gets a `rerouted` event naming the segment and its new hops, and its
   decision takes them.

Where it cannot (no path between a segment's nodes within free bandwidth, the part holds
flows planned on the old path, the new links were taken meanwhile, or the new path could
not be steered), the source region is told why (a `not_rerouted` event), once per
reservation and set of its links down while they stay down, and the part keeps its links
and steering: when step 3 fails, step 2 is undone. A part released meanwhile (a cancel) is
left so, untold.
"""

import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import Decision, Hop, Segment, SegmentKind
from cnbrain.domain.rerouting import SegmentRerouting, with_segment
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.local_ledger import CapacityWatch, local_change
from cnbrain.federation.steered_paths import SteeredPaths
from cnbrain.netmap.arrays import mbps_to_gbps
from cnbrain.routing.paths import Blocked, GraphPath
from cnbrain.storage import part_routes
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.part_routes import HeldPart, PartChanged

log = logging.getLogger("cnbrain.federation")

K_PATHS = 3

Tell = Callable[[str, SegmentRerouting], Awaitable[None]]
"""Tells region `source` (the request's source) what became of a segment; raises when it
cannot (the re-route stands: the caller logs it)."""


class SegmentRerouter:
    """Re-routes this brain's segments of its held parts (see the module docstring).
    `live_map`'s owner is the brain (a region id or `national`); `watch` keeps its cached
    snapshot current around its ledger's changes; `steered` is its steering."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        steered: SteeredPaths,
        watch: CapacityWatch,
        tell: Tell,
    ) -> None:
        assert live_map.owner is not None, "a standalone brain holds no parts"
        self._owner = live_map.owner
        self._sessions = sessions
        self._live_map = live_map
        self._steered = steered
        self._watch = watch
        self._tell = tell
        self._told: set[tuple[str, frozenset[str]]] = set()
        """(reservation id, its links down) of the `not_rerouted` outcomes told."""

    def keep(self, reservation_ids: set[str]) -> None:
        """Forget the `not_rerouted` outcomes told of every reservation but these (held,
        with a link down): one whose links come up and go down again is told again."""
        self._told = {told for told in self._told if told[0] in reservation_ids}

    async def __call__(self, decision: Decision, down: set[str]) -> None:
        """Re-route this brain's segments of `decision`'s part that cross a link of `down`
        (ids), or tell its source region why not; nothing when this brain holds no such
        part."""
        path = decision.path
        if path is None or decision.reservation_id is None or decision.site is None:
            return
        cut_at = [
            i
            for i, segment in enumerate(path.segments)
            if segment.owner == self._owner and any(hop.link in down for hop in segment.hops)
        ]
        cut = frozenset(
            hop.link for i in cut_at for hop in path.segments[i].hops if hop.link in down
        )
        if not cut:
            return
        async with self._sessions() as session:
            part = await part_routes.held_part(session, reservation_id=decision.reservation_id)
        if part is None:
            return  # released meanwhile
        stored = Decision.model_validate(part.decision)
        if self._own_links(stored) != self._own_links(decision):
            # Moved since this brain steered it (by another replica): steer the part as it
            # is stored; its links are checked again at the next pass.
            try:
                await self._steered.install([stored])
            except SteeringError as error:
                log.warning("part %s: %s", part.reservation_id, error)
            return
        why = f"link {', '.join(sorted(cut))} went down"
        if part.has_flows:
            await self._not_rerouted(
                decision, cut_at[0], cut, f"{why}; its flows were planned on it"
            )
            return
        own = [link.id for link in self._live_map.map.links if link.owner == self._owner]
        blocked, free_gbps = await self._blocked(part, down | await self._steered.links_down(own))
        moved = decision
        for position in cut_at:
            segment = path.segments[position]
            found = self._best_path(segment, decision.site, blocked)
            if found is None:
                first, last = segment.hops[0].from_node, segment.hops[-1].to_node
                await self._not_rerouted(
                    decision,
                    position,
                    cut,
                    f"{why}; no other path from {first} to {last} has "
                    f"{path.bandwidth_gbps} Gbps free on every link",
                )
                return
            new, sids = self._segment(segment, found, free_gbps)
            moved = with_segment(moved, position, new, sids)
        await self._move(decision, moved, part, cut_at, cut, why)

    async def _blocked(self, part: HeldPart, down: set[str]) -> tuple[Blocked, list[float]]:
        """The links a new path may not take (down, or without the part's bandwidth free,
        its own given back), by index; and the free bandwidth of every link (Gbps, its own
        given back)."""
        arrays = self._live_map.engine.arrays
        snapshot, _ = await self._live_map.snapshot()
        own = {arrays.link_index[link] for link in part.link_ids if link in arrays.link_index}
        free = [
            int(mbps) + (part.mbps if j in own else 0)
            for j, mbps in enumerate(snapshot.residual_mbps)
        ]
        need = part.mbps
        blocked = frozenset(
            j for j, link in enumerate(arrays.map.links) if link.id in down or free[j] < need
        )
        return blocked, [mbps_to_gbps(mbps) for mbps in free]

    def _best_path(self, segment: Segment, site: str, blocked: Blocked) -> GraphPath | None:
        """The best path between `segment`'s first and last nodes, on the graph of its kind
        (its province's, or the backbone), that avoids `blocked`; None when there is none."""
        engine = self._live_map.engine
        router = engine.router
        first, last = segment.hops[0].from_node, segment.hops[-1].to_node
        index = engine.arrays.map.site_index.get(site)
        paths: Sequence[GraphPath] = ()
        try:
            if segment.kind is SegmentKind.SOURCE:
                paths = router.source_paths(first, k=K_PATHS, blocked=blocked)
            elif segment.kind is SegmentKind.BACKBONE:
                paths = router.backbone_paths(first, last, k=K_PATHS, blocked=blocked)
            elif index is not None and segment.kind is SegmentKind.DESTINATION:
                paths = router.destination_paths(index, k=K_PATHS, blocked=blocked)
            elif index is not None:
                [routes] = router.routes(
                    access_node=first, sites=[index], k=K_PATHS, blocked=blocked
                )
                paths = [route.segments[0].path for route in routes if len(route.segments) == 1]
        except KeyError:
            return None  # a node the map does not have any more
        return next((p for p in paths if (p.nodes[0], p.nodes[-1]) == (first, last)), None)

    def _segment(
        self, old: Segment, found: GraphPath, free_gbps: list[float]
    ) -> tuple[Segment, tuple[str, ...]]:
        """`found` as segment `old` states it (each hop with its free bandwidth before the
        part, `free_gbps` by link index), and its SIDs."""
        engine = self._live_map.engine
        links = engine.arrays.map.links
        hops = tuple(
            Hop(
                link=links[j].id,
                from_node=a,
                to_node=b,
                layer=links[j].layer,
                latency_ms=links[j].latency_ms,
                residual_gbps=free_gbps[j],
            )
            for (a, b), j in zip(itertools.pairwise(found.nodes), found.links, strict=True)
        )
        segment = Segment(
            kind=old.kind, owner=old.owner, hops=hops, latency_ms=round(found.latency_ms, 4)
        )
        return segment, tuple(engine.sids.sid(node) for node in found.nodes[1:])

    async def _move(
        self,
        decision: Decision,
        moved: Decision,
        part: HeldPart,
        positions: list[int],
        cut: frozenset[str],
        why: str,
    ) -> None:
        """Steps 2 to 5 of the module docstring."""
        held = set(part.link_ids)
        wanted = set(self._own_links(moved)) if part.mbps else set()
        added, dropped = sorted(wanted - held), sorted(held - wanted)
        try:
            async with local_change(self._watch) as change, self._sessions.begin() as session:
                await part_routes.take_links(session, part=part, added=added)
                change.free()
        except PartChanged:
            return
        except (CapacityConflict, QuotaExceeded) as error:
            await self._not_rerouted(
                decision, positions[0], cut, f"{why}; the new path was taken: {error}"
            )
            return
        try:
            await self._steered.install([moved])
        except SteeringError as error:
            await self._undo_take(part, added)
            await self._not_rerouted(
                decision,
                positions[0],
                cut,
                f"{why}; the new path could not be established",
                detail=str(error),
            )
            return
        try:
            async with local_change(self._watch) as change, self._sessions.begin() as session:
                await part_routes.drop_links(
                    session,
                    part=part,
                    link_ids=sorted(held | set(added)),
                    dropped=dropped,
                    decision=moved.model_dump(mode="json"),
                )
                change.free()
        except PartChanged:
            return  # released meanwhile: its release gave every link back
        path = moved.path
        assert path is not None
        for position in positions:
            segment = path.segments[position]
            start = sum(len(s.hops) for s in path.segments[:position])
            sids = path.srv6_segment_list[start : start + len(segment.hops)]
            await self._say(
                moved,
                SegmentRerouting(
                    request_id=moved.request_id,
                    reservation_id=str(moved.reservation_id),
                    position=position,
                    owner=self._owner,
                    reason=why,
                    segment=segment,
                    sids=tuple(sids),
                ),
            )
        log.info(
            "request %s: %s segments %s rerouted off %s (reservation %s)",
            moved.request_id,
            self._owner,
            positions,
            why,
            moved.reservation_id,
        )

    async def _undo_take(self, part: HeldPart, added: list[str]) -> None:
        """Give back what `take_links` took for `added` (the new path could not be
        steered); what cannot be given back now stays held with the part until its release."""
        if not added:
            return
        try:
            async with local_change(self._watch) as change, self._sessions.begin() as session:
                await part_routes.drop_links(
                    session,
                    part=part,
                    link_ids=sorted(set(part.link_ids) | set(added)),
                    dropped=added,
                    decision=None,
                )
                change.free()
        except LedgerStoreError as error:
            log.warning(
                "part %s: the new links were not given back: %s", part.reservation_id, error
            )

    def _own_links(self, decision: Decision) -> list[str]:
        """The links of this brain's segments of `decision`'s path, in path order."""
        path = decision.path
        segments = () if path is None else path.segments
        return [hop.link for s in segments if s.owner == self._owner for hop in s.hops]

    async def _not_rerouted(
        self,
        decision: Decision,
        position: int,
        cut: frozenset[str],
        reason: str,
        *,
        detail: str = "",
    ) -> None:
        """Tell the source region `reason` (a `not_rerouted` event), once per reservation and
        set of its links down `cut`; `detail` goes to the log only."""
        key = (str(decision.reservation_id), cut)
        if key in self._told:
            return
        self._told.add(key)
        said = f"{reason} ({detail})" if detail else reason
        log.warning("request %s not rerouted by %s: %s", decision.request_id, self._owner, said)
        await self._say(
            decision,
            SegmentRerouting(
                request_id=decision.request_id,
                reservation_id=str(decision.reservation_id),
                position=position,
                owner=self._owner,
                reason=reason,
            ),
        )

    async def _say(self, decision: Decision, news: SegmentRerouting) -> None:
        """Tell `news` to the source region of `decision` (the owner of its first segment);
        a failure is logged (the ledger and the data plane stand as they are)."""
        assert decision.path is not None
        source = decision.path.segments[0].owner
        try:
            await self._tell(source, news)
        except Exception as error:
            log.warning(
                "request %s: region %s could not be told of segment %d (%s): %s",
                news.request_id,
                source,
                news.position,
                "rerouted" if news.rerouted else "not rerouted",
                error,
            )
