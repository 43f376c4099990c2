"""A segment put in place in a decision's path (`domain.rerouting.with_segment`), and a
segment's re-routing on the wire (`federation.rerouting_wire`), pure."""

import itertools

import pytest

from cnbrain.domain.decision import Decision, DecisionStatus, Hop, NetworkPath, Segment
from cnbrain.domain.enums import LinkLayer
from cnbrain.domain.errors import Invalid
from cnbrain.domain.rerouting import SegmentRerouting, with_segment
from cnbrain.federation.codec import WireError
from cnbrain.federation.rerouting_wire import rerouting_message, rerouting_of


def _segment(kind: str, owner: str, nodes: list[str], layer: LinkLayer) -> Segment:
    hops = tuple(
        Hop(link=f"{a}--{b}", from_node=a, to_node=b, layer=layer, latency_ms=1.0, residual_gbps=9)
        for a, b in itertools.pairwise(nodes)
    )
    return Segment.model_validate(
        {"kind": kind, "owner": owner, "hops": hops, "latency_ms": float(len(hops))}
    )


def _decision() -> Decision:
    segments = (
        _segment("source", "east", ["A-acc", "A-gw"], LinkLayer.ACCESS),
        _segment("backbone", "national", ["A-gw", "B-gw", "C-gw"], LinkLayer.BACKBONE),
        _segment("destination", "west", ["C-gw", "C-agg", "C-hub"], LinkLayer.PROVINCE),
    )
    return Decision(
        request_id="req-1",
        status=DecisionStatus.PLACED,
        policy="topn-cpsat",
        site="C-hub",
        reservation_id="rsv-1",
        path=NetworkPath(
            segments=segments,
            latency_ms=5.0,
            bandwidth_gbps=1.0,
            srv6_segment_list=("s:A-gw", "s:B-gw", "s:C-gw", "s:C-agg", "s:C-hub"),
        ),
    )


def test_a_segment_takes_its_place_with_its_sids_and_latency() -> None:
    decision = _decision()
    direct = _segment("backbone", "national", ["A-gw", "C-gw"], LinkLayer.BACKBONE)

    moved = with_segment(decision, 1, direct, ("s:C-gw",))

    assert moved.path is not None and decision.path is not None
    assert moved.path.segments == (decision.path.segments[0], direct, decision.path.segments[2])
    assert moved.path.srv6_segment_list == ("s:A-gw", "s:C-gw", "s:C-agg", "s:C-hub")
    assert moved.path.latency_ms == 4.0
    assert moved.model_copy(update={"path": decision.path}) == decision

    longer = _segment("source", "east", ["A-acc", "A-agg", "A-gw"], LinkLayer.ACCESS)
    again = with_segment(moved, 0, longer, ("s:A-agg", "s:A-gw"))
    assert again.path is not None
    assert again.path.srv6_segment_list == ("s:A-agg", "s:A-gw", "s:C-gw", "s:C-agg", "s:C-hub")


@pytest.mark.parametrize(
    ("position", "segment", "sids", "field"),
    [
        (
            3,
            _segment("backbone", "national", ["A-gw", "C-gw"], LinkLayer.BACKBONE),
            ("s",),
            "position",
        ),
        (1, _segment("backbone", "west", ["A-gw", "C-gw"], LinkLayer.BACKBONE), ("s",), "segment"),
        (
            1,
            _segment("backbone", "national", ["A-gw", "D-gw"], LinkLayer.BACKBONE),
            ("s",),
            "segment",
        ),
        (1, _segment("backbone", "national", ["A-gw", "C-gw"], LinkLayer.BACKBONE), (), "sids"),
    ],
)
def test_a_segment_that_does_not_fit_is_refused(
    position: int, segment: Segment, sids: tuple[str, ...], field: str
) -> None:
    with pytest.raises(Invalid) as refused:
        with_segment(_decision(), position, segment, sids)
    assert refused.value.field == field


def test_a_rerouting_goes_over_the_wire_and_back() -> None:
    segment = _segment("backbone", "national", ["A-gw", "C-gw"], LinkLayer.BACKBONE)
    news = SegmentRerouting("req-1", "rsv-1", 1, "national", "link A-gw--B-gw went down")
    rerouted = SegmentRerouting(
        "req-1", "rsv-1", 1, "national", "link A-gw--B-gw went down", segment, ("fc00::1",)
    )

    assert rerouting_of(rerouting_message(news)) == news
    assert rerouting_of(rerouting_message(rerouted)) == rerouted
    assert rerouted.rerouted and not news.rerouted


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request_id": ""}, "rerouting.request_id"),
        ({"reason": "down\x00"}, "rerouting.reason"),
        ({"position": -1}, "rerouting.position"),
        ({"sids": ["fc00::1"]}, "rerouting.sids"),
        ({"segment_json": "{}"}, "rerouting.segment_json"),
    ],
)
def test_a_rerouting_out_of_bounds_is_refused(change: dict[str, object], field: str) -> None:
    message = rerouting_message(SegmentRerouting("req-1", "rsv-1", 1, "national", "why"))
    for name, value in change.items():
        if name == "sids":
            message.sids.extend(value)  # type: ignore[arg-type]
        else:
            setattr(message, name, value)
    with pytest.raises(WireError) as refused:
        rerouting_of(message)
    assert refused.value.field == field
