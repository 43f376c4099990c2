"""Room holds as a brain's snapshots count them: compute on one site left to one request (of
another region's queue) until a given second, taken from what every other request may take.

`HeldSnapshot` is free capacity as the ledger holds it with the holds on it; `seen_by` is
what one request (or any request) may take of it at a given second: the free capacity less
the compute of every hold that lasts beyond that second, but the request's own. A hold whose
end has passed counts for nothing, whether or not it was deleted yet.
"""

from dataclasses import dataclass

from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.ledger.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class HeldRoom:
    """The compute `compute` (indices into a map's arrays) left to request `request_id` until
    epoch second `until_s`."""

    request_id: str
    compute: ComputeClaim
    until_s: float

    def active_at(self, now_s: float) -> bool:
        """Whether the hold lasts beyond epoch second `now_s`."""
        return now_s < self.until_s


@dataclass(frozen=True, slots=True, eq=False)
class HeldSnapshot:
    """Free capacity as the ledger holds it (`free`), and the room holds on it (`holds`)."""

    free: Snapshot
    holds: tuple[HeldRoom, ...] = ()

    def seen_by(self, request_id: str | None, *, now_s: float) -> Snapshot:
        """What request `request_id` (None: a request without a hold) may take at epoch
        second `now_s`: `free` less the compute of every hold active then but its own;
        `free` itself when no other hold is active."""
        return self.free.less(
            [
                hold.compute
                for hold in self.holds
                if hold.active_at(now_s) and hold.request_id != request_id
            ]
        )

    def held_for(self, now_s: float) -> frozenset[str]:
        """The requests with a hold active at epoch second `now_s`."""
        return frozenset(hold.request_id for hold in self.holds if hold.active_at(now_s))

    def adjusted(self, reservation: Reservation) -> "HeldSnapshot | None":
        """This snapshot with `reservation` taken, or None when its request has a hold here:
        taking compute ends that hold in the ledger, so the snapshot is read again."""
        if any(hold.request_id == reservation.request_id for hold in self.holds):
            return None
        return HeldSnapshot(self.free.adjusted(reservation, taken=True), self.holds)
