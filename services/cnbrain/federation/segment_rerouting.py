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
   decision takes them. The note is kept as owed (`storage.owed_notes`) in step 4's
   transaction and forgotten once told: a source region that cannot be told now is told at
   a later pass (`retell`, oldest first), after its outage or this brain's restart.

Where it cannot (no path between a segment's nodes within free bandwidth, the part holds
flows planned on the old path, the new links were taken meanwhile, or the new path could
not be steered), the source region is told why (a `not_rerouted` event), once per
reservation and set of its links down while they stay down, and the part keeps its links
and steering: when step 3 fails, step 2 is undone; that note is owed and told as step 5's.
A part released meanwhile (a cancel) is left so, untold. A note not told within
MAX_NOTE_AGE_S is given up, with a warning in the log.
"""

import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from google.protobuf.message import DecodeError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import Decision, Hop, Segment, SegmentKind
from cnbrain.domain.rerouting import SegmentRerouting, with_segment
from cnbrain.federation.codec import WireError
from cnbrain.federation.detours import ToldOnce, blocked_links
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.local_ledger import CapacityWatch, local_change
from cnbrain.federation.rerouting_wire import rerouting_message, rerouting_of
from cnbrain.federation.steered_paths import SteeredPaths
from cnbrain.routing.paths import Blocked, GraphPath
from cnbrain.storage import owed_notes, part_routes
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.part_routes import HeldPart, PartChanged
from cnbrain.v1 import paths_pb2

log = logging.getLogger("cnbrain.federation")

K_PATHS = 3

MAX_NOTE_AGE_S = 86_400.0
"""How long a note is owed to a source region that cannot be told before it is given up."""

NOTES_PER_PASS = 100
"""Owed notes read by one `retell`."""

Tell = Callable[[str, SegmentRerouting], Awaitable[None]]
"""Tells region `source` (the request's source) what became of a segment; raises when it
cannot (the re-route stands, and the note stays owed)."""


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
        self._told = ToldOnce()
        """(reservation id, its links down) of the `not_rerouted` outcomes told."""
        self._unreachable: set[str] = set()
        """The source regions owed notes that could not be told them at the last try."""

    def keep(self, reservation_ids: set[str]) -> None:
        """Forget the `not_rerouted` outcomes told of every reservation but these (held,
        with a link down): one whose links come up and go down again is told again."""
        self._told.keep(reservation_ids)

    async def retell(self) -> None:
        """Tell the source regions the notes owed them, oldest first, and forget those told.
        A region that cannot be told keeps its notes, in order, for the next call (a warning
        is logged when it first cannot be); a note older than MAX_NOTE_AGE_S, or one that does
        not decode, is given up (logged)."""
        async with self._sessions() as session:
            notes = await owed_notes.owed(session, limit=NOTES_PER_PASS)
        if not notes:
            return
        oldest = utcnow() - timedelta(seconds=MAX_NOTE_AGE_S)
        settled: list[int] = []
        stuck: set[str] = set()
        for note in notes:
            if note.region_id in stuck:
                continue
            if note.since < oldest:
                log.warning(
                    "request %s: region %s was not told of a re-routed segment within %.0f s; "
                    "given up",
                    note.request_id,
                    note.region_id,
                    MAX_NOTE_AGE_S,
                )
                settled.append(note.id)
                continue
            try:
                news = rerouting_of(paths_pb2.SegmentRerouting.FromString(note.message))
            except (DecodeError, WireError) as error:
                log.error("owed note %d does not decode (%s); given up", note.id, error)
                settled.append(note.id)
                continue
            try:
                await self._tell(note.region_id, news)
            except Exception as error:
                stuck.add(note.region_id)
                if note.region_id not in self._unreachable:
                    log.warning(
                        "region %s could not be told what became of segment %d of request "
                        "%s: %s; telling it again at every pass",
                        note.region_id,
                        news.position,
                        news.request_id,
                        error,
                    )
                    self._unreachable.add(note.region_id)
                continue
            if note.region_id in self._unreachable:
                log.info("region %s told again what it was owed", note.region_id)
                self._unreachable.discard(note.region_id)
            settled.append(note.id)
        if settled:
            async with self._sessions.begin() as session:
                await owed_notes.settle(session, settled)

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
                decision,
                cut_at[0],
                cut,
                f"{why}; a request that moves data keeps the path it was placed on",
            )
            return
        own = [link.id for link in self._live_map.map.links if link.owner == self._owner]
        snapshot, _ = await self._live_map.snapshot()
        blocked, free_gbps = blocked_links(
            snapshot,
            held=part.link_ids,
            mbps=part.mbps,
            down=down | await self._steered.links_down(own),
        )
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
        path = moved.path
        assert path is not None
        news = []
        for position in positions:
            segment = path.segments[position]
            start = sum(len(s.hops) for s in path.segments[:position])
            news.append(
                SegmentRerouting(
                    request_id=moved.request_id,
                    reservation_id=str(moved.reservation_id),
                    position=position,
                    owner=self._owner,
                    reason=why,
                    segment=segment,
                    sids=tuple(path.srv6_segment_list[start : start + len(segment.hops)]),
                )
            )
        try:
            async with local_change(self._watch) as change, self._sessions.begin() as session:
                await part_routes.drop_links(
                    session,
                    part=part,
                    link_ids=sorted(held | set(added)),
                    dropped=dropped,
                    decision=moved.model_dump(mode="json"),
                )
                for one in news:
                    await _owe(session, moved, one)
                change.free()
        except PartChanged:
            return  # released meanwhile: its release gave every link back
        await self.retell()
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
        said = f"{reason} ({detail})" if detail else reason
        log.warning("request %s not rerouted by %s: %s", decision.request_id, self._owner, said)
        news = SegmentRerouting(
            request_id=decision.request_id,
            reservation_id=str(decision.reservation_id),
            position=position,
            owner=self._owner,
            reason=reason,
        )
        async with self._sessions.begin() as session:
            await _owe(session, decision, news)
        self._told.add(key)
        await self.retell()


async def _owe(session: AsyncSession, decision: Decision, news: SegmentRerouting) -> None:
    """Keep `news` owed to the source region of `decision` (the owner of its first segment),
    in `session`'s transaction."""
    assert decision.path is not None
    await owed_notes.owe(
        session,
        region_id=decision.path.segments[0].owner,
        request_id=news.request_id,
        message=rerouting_message(news).SerializeToString(),
    )
