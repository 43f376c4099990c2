"""What a brain's two re-routers share (`regional.rerouting` for its own reservations,
`federation.segment_rerouting` for its parts of cross-brain ones): the links a detour may
not take, and the failures each tells once."""

from collections.abc import Collection

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import mbps_to_gbps
from cnbrain.routing.paths import Blocked


def blocked_links(
    snapshot: Snapshot, *, held: Collection[str], mbps: int, down: Collection[str]
) -> tuple[Blocked, list[float]]:
    """For a holder of `mbps` on links `held` (ids): the links a detour may not take (those
    `down`, and those without `mbps` free once the holder's own are given back), by index;
    and every link's free bandwidth in Gbps, the holder's own given back."""
    arrays = snapshot.arrays
    own = {arrays.link_index[link] for link in held if link in arrays.link_index}
    free = [int(left) + (mbps if j in own else 0) for j, left in enumerate(snapshot.residual_mbps)]
    blocked = frozenset(
        j for j, link in enumerate(arrays.map.links) if link.id in down or free[j] < mbps
    )
    return blocked, [mbps_to_gbps(left) for left in free]


class ToldOnce:
    """The failures told, each once per reservation and set of its links down while they
    stay down."""

    def __init__(self) -> None:
        self._told: set[tuple[str, frozenset[str]]] = set()

    def __contains__(self, told: tuple[str, frozenset[str]]) -> bool:
        return told in self._told

    def add(self, told: tuple[str, frozenset[str]]) -> None:
        self._told.add(told)

    def keep(self, reservation_ids: Collection[str]) -> None:
        """Forget what was told of every reservation but these (held, with a link down): one
        whose links come up and go down again is told again."""
        self._told = {told for told in self._told if told[0] in reservation_ids}
