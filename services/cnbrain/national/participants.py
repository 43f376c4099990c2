"""The owners' ledgers as participants of the two-phase commit (`coordinator.Participant`):
the national brain's own ledger (its database) and a region's (its LedgerService, over gRPC),
and the lookup of an owner's."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.states import ReservationState
from cnbrain.federation.codec import part_message
from cnbrain.federation.local_ledger import (
    CapacityWatch,
    commit_parts,
    prepare_parts,
    release_parts,
)
from cnbrain.federation.steered_paths import Steered
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.national.coordinator import Commitment, Participant
from cnbrain.national.planner import owners
from cnbrain.national.regions import Region, RegionDirectory, unavailable
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import peer_ledger, tenants
from cnbrain.v1 import ledger_pb2


class LocalParticipant:
    """The national brain's own ledger, in its database: the participant for the backbone
    links, and what it holds of every cross-region reservation; with `steered`, its
    backbone segments are steered in the data plane as they are committed and released."""

    region: None = None

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        arrays: Callable[[], MapArrays],
        watch: CapacityWatch,
        steered: Steered | None = None,
    ) -> None:
        self._sessions = sessions
        self._arrays = arrays
        self._watch = watch
        self._steered = steered

    async def prepare(
        self, claims: Sequence[Claim], *, ttl_ms: int, flows: Sequence[FlowHold] = ()
    ) -> list[str | None]:
        return await prepare_parts(
            self._sessions,
            claims,
            ttl_ms=ttl_ms,
            arrays=self._arrays(),
            watch=self._watch,
            flows=flows,
        )

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        return await commit_parts(
            self._sessions,
            [(c.reservation_id, c.decision, c.request) for c in commitments],
            steered=self._steered,
        )

    async def release(
        self, reservation_ids: Sequence[str], reason: str, *, keep_delivery: bool = False
    ) -> None:
        await release_parts(
            self._sessions,
            reservation_ids,
            watch=self._watch,
            keep_delivery=keep_delivery,
            steered=self._steered,
        )

    async def held_decisions(self, request_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The committed decision of every request of `request_ids` it holds one of."""
        async with self._sessions() as session:
            return await peer_ledger.held_decisions(session, request_ids=request_ids)

    async def owners_of(self, reservation_id: str) -> list[str] | None:
        """The owners of the parts of a reservation it holds (prepared or committed), in
        segment order, itself last when no segment is its own (a part that counts the
        national quota alone); None when it holds none."""
        async with self._sessions() as session:
            record = await peer_ledger.get(session, reservation_id=reservation_id)
        if record is None or record.state == ReservationState.RELEASED:
            return None
        found = owners(record.decision)
        return found if NATIONAL_OWNER in found else [*found, NATIONAL_OWNER]

    async def nationally_limited(self, tenant_ids: Iterable[str]) -> set[str]:
        """Those of `tenant_ids` with a limit in its quotas: its limits are the national ones
        (`storage.models.Quota`)."""
        async with self._sessions() as session:
            return await tenants.limited_tenants(session, tenant_ids, national=False)


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

    async def prepare(
        self, claims: Sequence[Claim], *, ttl_ms: int, flows: Sequence[FlowHold] = ()
    ) -> list[str | None]:
        """`Participant.prepare`; each part carries the flows of its reservation id. Raises
        ValueError for a flow of no claim of `claims`."""
        flows_of: dict[str, list[FlowHold]] = {}
        for flow in flows:
            flows_of.setdefault(flow.reservation_id, []).append(flow)
        strays = sorted(set(flows_of) - {c.reservation_id for c in claims})
        if strays:
            raise ValueError(f"flows of reservation {strays[0]!r}, not among the claims")
        parts = [part_message(c, flows_of.get(c.reservation_id, ())) for c in claims]
        try:
            answer = await self._region.ledger.Prepare(
                ledger_pb2.PrepareRequest(parts=parts, ttl_ms=ttl_ms),
                timeout=self._deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self._region.id, error) from error
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
            raise unavailable(self._region.id, error) from error
        if len(answer.results) != len(commitments):
            raise RuntimeError(f"{len(answer.results)} results for {len(commitments)} parts")
        return [None if r.committed else r.reason or "refused" for r in answer.results]

    async def release(
        self, reservation_ids: Sequence[str], reason: str, *, keep_delivery: bool = False
    ) -> None:
        try:
            await self._region.ledger.Release(
                ledger_pb2.ReleaseRequest(
                    reservation_ids=list(reservation_ids),
                    reason=reason,
                    keep_delivery=keep_delivery,
                ),
                timeout=self._deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self._region.id, error) from error


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
