"""What a decision's traffic should show on the netlab's hop counters."""

from collections.abc import Mapping

from cnbrain.dataplane.plan import USERS_INTERFACE
from cnbrain.domain.decision import Decision

Counts = Mapping[tuple[str, str], int]


def hops_of(decision: Decision) -> set[tuple[str, str]]:
    """The (node, link) counters a decision's traffic passes: each hop's far end on its link,
    and the access router's users' counter."""
    assert decision.path is not None
    hops = [hop for segment in decision.path.segments for hop in segment.hops]
    return {(hops[0].from_node, USERS_INTERFACE)} | {(h.to_node, h.link) for h in hops}


def grown(before: Counts, after: Counts) -> dict[tuple[str, str], int]:
    """The counters that grew, by how much."""
    return {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}
