"""A tiny real LedgerService for the gRPC plumbing tests, and the servers and channels of a test.

`RecordingLedger` keeps its reservations in memory and records, per call, the request id it
saw and the call's metadata. It can be told to fail its first calls with a status code, to
sleep before answering, and to forward each Prepare to another ledger (to follow a request id
across two servers). `rpc` starts servers and opens channels, and stops and closes them all
after the test (see the `rpc` fixture).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc

from cnbrain.rpc import PeerSecurity, RunningServer, current_request_id, open_channel, start_server
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc

LEDGER_SERVICE = ledger_pb2.DESCRIPTOR.services_by_name["LedgerService"].full_name

Context = grpc.aio.ServicerContext[object, object]


def prepare_of(*reservation_ids: str) -> ledger_pb2.PrepareRequest:
    """A Prepare of one part per reservation id (nothing else set)."""
    return ledger_pb2.PrepareRequest(
        parts=[ledger_pb2.PartClaim(reservation_id=i) for i in reservation_ids]
    )


def commit_of(*reservation_ids: str) -> ledger_pb2.CommitRequest:
    return ledger_pb2.CommitRequest(
        entries=[ledger_pb2.CommitEntry(reservation_id=i) for i in reservation_ids]
    )


def release_of(*reservation_ids: str) -> ledger_pb2.ReleaseRequest:
    return ledger_pb2.ReleaseRequest(reservation_ids=list(reservation_ids))


@dataclass
class RecordingLedger(ledger_pb2_grpc.LedgerServiceServicer):
    """An in-memory ledger: prepare, commit and release by reservation id (idempotent)."""

    fail_first: int = 0
    fail_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    delay_s: float = 0.0
    raises: Exception | None = None
    """An error every call raises once entered, as a handler's own would."""
    forward_to: ledger_pb2_grpc.LedgerServiceAsyncStub | None = None
    calls: int = 0
    request_ids: list[str | None] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    prepared: set[str] = field(default_factory=set)
    committed: set[str] = field(default_factory=set)
    finished: int = 0

    async def _enter(self, context: Context) -> None:
        self.calls += 1
        self.request_ids.append(current_request_id())
        self.metadata.append(
            {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        )
        if self.calls <= self.fail_first:
            await context.abort(self.fail_code, f"failing call {self.calls}")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.raises is not None:
            raise self.raises

    async def Prepare(  # noqa: N802
        self, request: ledger_pb2.PrepareRequest, context: Context
    ) -> ledger_pb2.PrepareResponse:
        await self._enter(context)
        if self.forward_to is not None:
            await self.forward_to.Prepare(request, timeout=2)
        ids = [part.reservation_id for part in request.parts]
        self.prepared.update(ids)
        self.finished += 1
        return ledger_pb2.PrepareResponse(
            results=[ledger_pb2.PrepareResult(reservation_id=i, prepared=True) for i in ids]
        )

    async def Commit(  # noqa: N802
        self, request: ledger_pb2.CommitRequest, context: Context
    ) -> ledger_pb2.CommitResponse:
        await self._enter(context)
        results = []
        for entry in request.entries:
            known = entry.reservation_id in self.prepared
            if known:
                self.committed.add(entry.reservation_id)
            results.append(
                ledger_pb2.CommitResult(
                    reservation_id=entry.reservation_id,
                    committed=known,
                    reason="" if known else "unknown",
                )
            )
        self.finished += 1
        return ledger_pb2.CommitResponse(results=results)

    async def Release(  # noqa: N802
        self, request: ledger_pb2.ReleaseRequest, context: Context
    ) -> ledger_pb2.ReleaseResponse:
        await self._enter(context)
        released = []
        for reservation_id in request.reservation_ids:
            released.append(reservation_id in self.prepared)
            self.prepared.discard(reservation_id)
            self.committed.discard(reservation_id)
        self.finished += 1
        return ledger_pb2.ReleaseResponse(released=released)


@dataclass
class Rpc:
    """Servers and channels of one test, all stopped and closed by the fixture."""

    servers: list[RunningServer] = field(default_factory=list)
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    async def serve(
        self, ledger: RecordingLedger | None = None, *, security: PeerSecurity | None = None
    ) -> tuple[RunningServer, RecordingLedger]:
        servicer = ledger if ledger is not None else RecordingLedger()

        def register(server: grpc.aio.Server) -> list[str]:
            ledger_pb2_grpc.add_LedgerServiceServicer_to_server(servicer, server)
            return [LEDGER_SERVICE]

        running = await start_server(
            address="127.0.0.1:0", security=security or PeerSecurity(), register=register
        )
        self.servers.append(running)
        return running, servicer

    def channel(
        self,
        target: str | RunningServer,
        *,
        security: PeerSecurity | None = None,
        server_name: str | None = None,
    ) -> grpc.aio.Channel:
        endpoint = f"127.0.0.1:{target.port}" if isinstance(target, RunningServer) else target
        channel = open_channel(
            endpoint, security=security or PeerSecurity(), server_name=server_name
        )
        self.channels.append(channel)
        return channel

    def ledger(
        self, target: str | RunningServer, *, security: PeerSecurity | None = None
    ) -> ledger_pb2_grpc.LedgerServiceAsyncStub:
        return ledger_pb2_grpc.LedgerServiceStub(self.channel(target, security=security))
