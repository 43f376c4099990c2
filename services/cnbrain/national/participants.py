"""The owners' ledgers as participants of the two-phase commit: the port, the national
brain's own ledger (its database) and a region's (its LedgerService, over gRPC).

Every call carries many parts, one result per part, in the order given."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.federation.codec import part_message
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.ledger_service import (
    CapacityWatch,
    commit_parts,
    prepare_parts,
    release_parts,
)
from cnbrain.ledger.peer_claim import PeerClaim
from cnbrain.national.regions import Region, RegionDirectory
from cnbrain.netmap.arrays import MapArrays
from cnbrain.v1 import ledger_pb2


@dataclass(frozen=True, slots=True)
class Commitment:
    """What an owner stores with a committed part: the decision and the request, as
    documents (for a ledger in this process) and as JSON (for the wire)."""

    reservation_id: str
    decision: dict[str, Any]
    decision_json: str
    request: dict[str, Any]
    request_json: str


class Participant(Protocol):
    """One owner's ledger in the two-phase commit of cross-region reservations."""

    @property
    def region(self) -> str | None:
        """The region left out of the next attempt when this ledger fails a part; None for
        the national brain's own."""

    async def prepare(self, claims: Sequence[PeerClaim], *, ttl_ms: int) -> list[str | None]:
        """Prepare every claim, each expiring after `ttl_ms` unless committed; for each,
        None (prepared) or why not. Raises PeerUnavailable when the owner does not answer."""

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        """Commit the prepared part of every commitment; for each, None (held) or why not.
        Raises PeerUnavailable when the owner does not answer."""

    async def release(self, reservation_ids: Sequence[str], reason: str) -> None:
        """Release every reservation's part, prepared or committed (none held: nothing).
        Raises PeerUnavailable when the owner does not answer (nothing known released)."""


class LocalParticipant:
    """The national brain's own ledger: the backbone links, in its database."""

    region = None

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        arrays: Callable[[], MapArrays],
        watch: CapacityWatch,
    ) -> None:
        self._sessions = sessions
        self._arrays = arrays
        self._watch = watch

    async def prepare(self, claims: Sequence[PeerClaim], *, ttl_ms: int) -> list[str | None]:
        return await prepare_parts(
            self._sessions, claims, ttl_ms=ttl_ms, arrays=self._arrays(), watch=self._watch
        )

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        return await commit_parts(
            self._sessions, [(c.reservation_id, c.decision, c.request) for c in commitments]
        )

    async def release(self, reservation_ids: Sequence[str], reason: str) -> None:
        await release_parts(self._sessions, reservation_ids, watch=self._watch)


class RemoteParticipant:
    """A region's ledger, through its LedgerService; every call under `deadline_s`."""

    def __init__(self, region: Region, *, deadline_s: float) -> None:
        self._region = region
        self._deadline_s = deadline_s

    @property
    def region(self) -> str:
        return self._region.id

    @property
    def through(self) -> Region:
        """The registration whose channel the calls take."""
        return self._region

    async def prepare(self, claims: Sequence[PeerClaim], *, ttl_ms: int) -> list[str | None]:
        try:
            answer = await self._region.ledger.Prepare(
                ledger_pb2.PrepareRequest(parts=[part_message(c) for c in claims], ttl_ms=ttl_ms),
                timeout=self._deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise self._unavailable(error) from error
        if len(answer.results) != len(claims):
            raise RuntimeError(f"{len(answer.results)} results for {len(claims)} parts")
        return [None if r.prepared else r.reason or "refused" for r in answer.results]

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        try:
            answer = await self._region.ledger.Commit(
                ledger_pb2.CommitRequest(
                    entries=[
                        ledger_pb2.CommitEntry(
                            reservation_id=c.reservation_id,
                            decision_json=c.decision_json,
                            request_json=c.request_json,
                        )
                        for c in commitments
                    ]
                ),
                timeout=self._deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise self._unavailable(error) from error
        if len(answer.results) != len(commitments):
            raise RuntimeError(f"{len(answer.results)} results for {len(commitments)} parts")
        return [None if r.committed else r.reason or "refused" for r in answer.results]

    async def release(self, reservation_ids: Sequence[str], reason: str) -> None:
        try:
            await self._region.ledger.Release(
                ledger_pb2.ReleaseRequest(reservation_ids=list(reservation_ids), reason=reason),
                timeout=self._deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise self._unavailable(error) from error

    def _unavailable(self, error: grpc.aio.AioRpcError) -> PeerUnavailable:
        return PeerUnavailable(self._region.id, error.code().name.lower(), error.details() or "")


class Participants:
    """The participant of every owner: the national brain's own ledger for the backbone, a
    registered region's LedgerService for the region (None: not registered)."""

    def __init__(
        self, local: Participant, directory: RegionDirectory, *, deadline_s: float
    ) -> None:
        self._local = local
        self._directory = directory
        self._deadline_s = deadline_s
        self._remote: dict[str, RemoteParticipant] = {}

    def __call__(self, owner: str) -> Participant | None:
        if owner == NATIONAL_OWNER:
            return self._local
        region = self._directory.get(owner)
        if region is None:
            return None
        remote = self._remote.get(owner)
        if remote is None or remote.through is not region:
            remote = self._remote[owner] = RemoteParticipant(region, deadline_s=self._deadline_s)
        return remote
