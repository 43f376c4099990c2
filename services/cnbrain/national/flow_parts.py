"""A cross-region request's flows split among the owners of what they cross, and its
decision's annotation. Pure."""

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from cnbrain.domain.decision import Decision
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import FlowHold
from cnbrain.national.planner import Part
from cnbrain.netmap.arrays import MapArrays


def with_flows(
    parts: Sequence[Part], flows: Sequence[FlowHold], arrays: MapArrays, *, window: Window
) -> list[Part]:
    """`parts` (one per owner, as `planner.parts` splits a decision), each holding over
    `window`, with every flow of `flows` split among the owners of its links: an owner's
    share of a flow is the links of its route that owner owns, in route order, with the
    flow's bandwidth and window. An owner of some flow's links that has no part among
    `parts` gets one that holds nothing else (no site, no link of the decision's path, no
    quota). `parts` must not be empty."""
    links = arrays.map.links
    shares: dict[str, list[FlowHold]] = {}
    for flow in flows:
        by_owner: dict[str, list[str]] = {}
        for link_id in flow.link_ids:
            by_owner.setdefault(links[arrays.link_index[link_id]].owner, []).append(link_id)
        for owner, ids in by_owner.items():
            shares.setdefault(owner, []).append(replace(flow, link_ids=tuple(ids)))
    found = [
        replace(
            part,
            claim=replace(part.claim, window=window),
            flows=tuple(shares.pop(part.owner, ())),
        )
        for part in parts
    ]
    nothing = replace(
        parts[0].claim.without_compute(),
        link_ids=(),
        mbps=0,
        window=window,
        counts_quota=False,
    )
    found += [Part(owner=owner, claim=nothing, flows=tuple(held)) for owner, held in shares.items()]
    return found


def annotated(
    decision: Decision, *, reservation_id: str, owners: Sequence[str], starts_at: datetime
) -> Decision:
    """`decision` with its reservation id, its job's start, and a note naming the owners
    whose calendars its flows were planned on."""
    decision = decision.model_copy(
        update={"reservation_id": reservation_id, "starts_at": starts_at}
    )
    explanation = decision.explanation
    if explanation is None:
        return decision
    note = (
        "planned over time by the national brain, each flow in its own window on the"
        f" calendars of {', '.join(owners)}"
    )
    return decision.model_copy(
        update={"explanation": explanation.model_copy(update={"notes": (*explanation.notes, note)})}
    )
