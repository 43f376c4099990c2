"""What a request of this region is told when an owner of a segment of its cross-region path
re-routed it, or could not (`federation.segment_rerouting`): this region itself (its source
segment), or the national brain or the destination region, through the national brain
(`RegionalPathsService.NoteRerouting`, `regional.paths_service`).

A segment re-routed replaces the old one in the request's stored decision (its hops, its
share of the segment list and the path's latency: `domain.rerouting.with_segment`), and the
request gets a `rerouted` event naming the segment, its owner, the reservation and its new
route (its nodes and links); a segment that could not be re-routed gets a `not_rerouted`
event saying why. Both are written in one transaction, the request's row locked, so that the
outcomes of several segments never overwrite one another. Noting is idempotent: a segment
already in place, or a `not_rerouted` event that is the request's latest already, is not
told again. `tell_source` is how this region's own re-routing reaches a request's source
region: here, or through the national brain."""

from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.decision import Decision
from cnbrain.domain.errors import Invalid
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.rerouting import SegmentRerouting, with_segment
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.segment_rerouting import Tell
from cnbrain.storage import request_events, requests
from cnbrain.storage.clock import utcnow


class SegmentNotes:
    """Tells the requests of this brain what became of their segments."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def __call__(self, news: SegmentRerouting) -> bool:
        """Tell request `news.request_id` what became of its segment (module docstring);
        False when this brain does not hold it, or its decision holds another reservation
        (it was placed again since). Raises Invalid when the segment does not fit its path
        (`with_segment`), or is another owner's."""
        async with self._sessions.begin() as session:
            found = await requests.get_request(
                session, tenant_id=None, request_id=news.request_id, for_update=True
            )
            if found is None:
                return False
            document = await requests.get_decision(session, request_id=news.request_id)
            decision = None if document is None else Decision.model_validate(document)
            if (
                decision is None
                or decision.path is None
                or decision.reservation_id != news.reservation_id
                or not 0 <= news.position < len(decision.path.segments)
            ):
                return False
            old = decision.path.segments[news.position]
            if old.owner != news.owner:
                raise Invalid(
                    f"segment {news.position} of request {news.request_id!r} is {old.owner}'s, "
                    f"not {news.owner}'s",
                    field="owner",
                )
            if news.segment is None:
                event = RequestEvent.of(
                    news.request_id,
                    RequestEventKind.NOT_REROUTED,
                    utcnow(),
                    reason=news.reason,
                    segment=old.kind.value,
                    owner=news.owner,
                    reservation=news.reservation_id,
                )
                told = await request_events.events_of(
                    session, request_id=news.request_id, tenant_id=None
                )
                latest = told[-1] if told else None
                if latest is not None and (latest.kind, latest.detail) == (
                    event.kind,
                    event.detail,
                ):
                    return True
            else:
                moved = with_segment(decision, news.position, news.segment, news.sids)
                if moved == decision:
                    return True
                await requests.save_decisions(
                    session, {news.request_id: moved.model_dump(mode="json")}
                )
                hops = news.segment.hops
                event = RequestEvent.of(
                    news.request_id,
                    RequestEventKind.REROUTED,
                    utcnow(),
                    reason=news.reason,
                    segment=old.kind.value,
                    owner=news.owner,
                    reservation=news.reservation_id,
                    route=" > ".join([hops[0].from_node, *(hop.to_node for hop in hops)]),
                    links=", ".join(hop.link for hop in hops),
                )
            await request_events.append_many(session, [event])
        return True


class Relay(Protocol):
    """The national brain, which takes an outcome to another region."""

    async def relay(self, source_region: str, news: SegmentRerouting) -> bool:
        """Have region `source_region` note `news`; whether it holds the request."""


def tell_source(region_id: str, notes: SegmentNotes, relay: Relay | None) -> Tell:
    """How region `region_id`'s re-routing of its segments tells a request's source region:
    itself through `notes`, another through `relay` (None: no national brain to relay it;
    the outcome is not told, and the call raises PeerUnavailable)."""

    async def tell(source_region: str, news: SegmentRerouting) -> None:
        if source_region == region_id:
            await notes(news)
        elif relay is None:
            raise PeerUnavailable("the national brain", "unavailable", "not configured")
        else:
            await relay.relay(source_region, news)

    return tell
