"""Errors of calls to another brain, in words of their own: a service catching them needs no
transport library (the gRPC adapters translate their errors into these)."""

from cnbrain.domain.errors import Unavailable


class PeerUnavailable(Unavailable):
    """`peer` (say, "the national brain") could not be reached or did not answer in time.
    `cause` is a short lowercase word for why ("unavailable", "deadline_exceeded"), `details`
    what the transport said. Nothing is known to have changed in the peer."""

    def __init__(self, peer: str, cause: str, details: str = "") -> None:
        self.peer = peer
        self.cause = cause
        self.details = details
        super().__init__(f"{peer}: {cause}" + (f" ({details})" if details else ""))
