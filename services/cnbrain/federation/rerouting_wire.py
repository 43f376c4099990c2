"""A segment's re-routing (`domain.rerouting.SegmentRerouting`) on the wire
(`paths.proto`, `SegmentRerouting`), both ways; what a peer sent is held to its bounds."""

from pydantic import ValidationError

from cnbrain.domain.bounds import MAX_NAME_LENGTH, has_control_characters
from cnbrain.domain.decision import Segment
from cnbrain.domain.events import MAX_DETAIL_TEXT
from cnbrain.domain.rerouting import SegmentRerouting
from cnbrain.federation.codec import WireError
from cnbrain.v1 import paths_pb2

MAX_ID = 64
"""Characters of a request or reservation id (their columns)."""

MAX_POSITION = 16
"""Segments of one path, and more."""

MAX_SEGMENT_JSON = 1 << 20
"""Characters of one segment's JSON."""

MAX_HOPS = 4096
"""Hops (and SIDs) of one segment."""

MAX_SID = 64
"""Characters of one SID (an IPv6 address)."""


def rerouting_message(news: SegmentRerouting) -> paths_pb2.SegmentRerouting:
    """`news` on the wire."""
    return paths_pb2.SegmentRerouting(
        request_id=news.request_id,
        reservation_id=news.reservation_id,
        position=news.position,
        owner=news.owner,
        reason=news.reason[:MAX_DETAIL_TEXT],
        segment_json="" if news.segment is None else news.segment.model_dump_json(),
        sids=list(news.sids),
    )


def rerouting_of(message: paths_pb2.SegmentRerouting) -> SegmentRerouting:
    """The re-routing `message` carries. Raises WireError naming the field for an id, owner
    or reason out of bounds or with control characters, a position out of range, a segment
    that is not one, or SIDs that are not one per hop."""
    for field, value, most in (
        ("request_id", message.request_id, MAX_ID),
        ("reservation_id", message.reservation_id, MAX_ID),
        ("owner", message.owner, MAX_NAME_LENGTH),
        ("reason", message.reason, MAX_DETAIL_TEXT),
    ):
        if not value or len(value) > most or has_control_characters(value):
            raise WireError(
                f"1 to {most} characters without control characters", field=f"rerouting.{field}"
            )
    if not 0 <= message.position < MAX_POSITION:
        raise WireError(f"within [0, {MAX_POSITION})", field="rerouting.position")
    segment: Segment | None = None
    if message.segment_json:
        if len(message.segment_json) > MAX_SEGMENT_JSON:
            raise WireError(
                f"at most {MAX_SEGMENT_JSON} characters", field="rerouting.segment_json"
            )
        try:
            segment = Segment.model_validate_json(message.segment_json)
        except ValidationError as wrong:
            raise WireError(
                f"not a segment: {wrong.errors()[0]['msg']}", field="rerouting.segment_json"
            ) from None
        if not segment.hops or len(segment.hops) > MAX_HOPS or segment.owner != message.owner:
            raise WireError(
                f"1 to {MAX_HOPS} hops, of owner {message.owner!r}", field="rerouting.segment_json"
            )
        if len(message.sids) != len(segment.hops) or any(
            not sid or len(sid) > MAX_SID or has_control_characters(sid) for sid in message.sids
        ):
            raise WireError("one SID per hop", field="rerouting.sids")
    elif message.sids:
        raise WireError("no SIDs without a segment", field="rerouting.sids")
    return SegmentRerouting(
        request_id=message.request_id,
        reservation_id=message.reservation_id,
        position=message.position,
        owner=message.owner,
        reason=message.reason,
        segment=segment,
        sids=tuple(message.sids),
    )
