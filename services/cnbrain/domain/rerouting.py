"""A segment of a decision's path re-routed by its owner, and what its request is told of it.

A cross-region path has up to three segments, each owned and re-routed by its own brain
between the same two nodes (`federation.segment_rerouting`). `with_segment` puts a new
route of one segment in place in a decision: its hops, its share of the strict SRv6 segment
list (one SID per hop, in path order) and the path's latency; every other segment stays as
it is. `SegmentRerouting` is what the owner tells the request's source region: the segment
re-routed, with its new hops and SIDs, or why it could not be.
"""

import itertools
from dataclasses import dataclass

from cnbrain.domain.decision import Decision, Segment
from cnbrain.domain.errors import Invalid


@dataclass(frozen=True, slots=True)
class SegmentRerouting:
    """What became of segment `position` (of `owner`) of the path of request `request_id`'s
    reservation `reservation_id` when a link of it went down: re-routed onto `segment` (its
    SIDs `sids`, one per hop), or not (`segment` None), for `reason`."""

    request_id: str
    reservation_id: str
    position: int
    owner: str
    reason: str
    segment: Segment | None = None
    sids: tuple[str, ...] = ()

    @property
    def rerouted(self) -> bool:
        return self.segment is not None


def with_segment(
    decision: Decision, position: int, segment: Segment, sids: tuple[str, ...]
) -> Decision:
    """`decision` with segment `position` of its path replaced by `segment`, whose SIDs are
    `sids`: the same kind and owner, between the same first and last nodes. Its segment list
    takes `sids` in place of the old segment's, and its latency is its segments' sum. Raises
    Invalid (naming the field) for a decision without a path, a position out of range, or a
    segment of another kind, owner or ends, without hops, or with other than one SID per
    hop."""
    path = decision.path
    if path is None or decision.reservation_id is None:
        raise Invalid(f"request {decision.request_id!r}: no path to re-route", field="decision")
    if not 0 <= position < len(path.segments):
        raise Invalid(f"no segment {position} on a path of {len(path.segments)}", field="position")
    old = path.segments[position]
    if (segment.kind, segment.owner) != (old.kind, old.owner):
        raise Invalid(
            f"segment {position} is the {old.kind} segment of {old.owner}, not the "
            f"{segment.kind} segment of {segment.owner}",
            field="segment",
        )
    if not segment.hops or not old.hops:
        raise Invalid(f"segment {position}: a segment without hops", field="segment")
    ends = (segment.hops[0].from_node, segment.hops[-1].to_node)
    if ends != (old.hops[0].from_node, old.hops[-1].to_node):
        raise Invalid(
            f"segment {position} goes from {old.hops[0].from_node} to {old.hops[-1].to_node}, "
            f"not from {ends[0]} to {ends[1]}",
            field="segment",
        )
    if any(a.to_node != b.from_node for a, b in itertools.pairwise(segment.hops)):
        raise Invalid(f"segment {position}: its hops do not follow one another", field="segment")
    if len(sids) != len(segment.hops):
        raise Invalid(
            f"segment {position}: {len(sids)} SIDs for {len(segment.hops)} hops", field="sids"
        )
    start = sum(len(s.hops) for s in path.segments[:position])
    listed = path.srv6_segment_list
    segments = (*path.segments[:position], segment, *path.segments[position + 1 :])
    moved = path.model_copy(
        update={
            "segments": segments,
            "latency_ms": round(sum(s.latency_ms for s in segments), 4),
            "srv6_segment_list": (*listed[:start], *sids, *listed[start + len(old.hops) :]),
        }
    )
    return decision.model_copy(update={"path": moved})
