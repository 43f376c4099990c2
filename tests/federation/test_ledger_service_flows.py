"""A region's LedgerService holding the flows of parts, over gRPC on loopback, on PostgreSQL
and SQLite, taking parts as a regional brain does (held to the cohorts' quotas): the national
brain's participant sends a part's flows, the region holds them and, for a completed job,
keeps its delivery on release; a part whose flow names a link the region does not own, or is
malformed, is refused on its own, naming what is wrong, and holds nothing; the parts a
release names are counted released or not held."""

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from cnbrain.federation.codec import MAX_PART_FLOWS, part_message
from cnbrain.federation.ledger_service import LedgerServicer, add_ledger_service
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.metrics import LedgerPartMetrics
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.national.participants import RemoteParticipant
from cnbrain.national.regions import Region
from cnbrain.netmap.china import china_document
from cnbrain.regional.use_cases.cohort_quota import CohortQuotas
from cnbrain.rpc import PeerSecurity, open_channel, start_server
from cnbrain.storage import ledger_store, peer_ledger, registry, tenants
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc, regional_pb2_grpc
from tests.databases import Sessions
from tests.migrated_databases import database_url, engine, postgres_url, sessions, sqlite_url

__all__ = ["database_url", "engine", "postgres_url", "sessions", "sqlite_url"]

pytestmark = pytest.mark.asyncio

REGION = "east"
HOUR = 3600


@dataclass
class East:
    """The east region's LedgerService on loopback, its stub, the national brain's
    participant for it, two links it owns and one of the backbone."""

    stub: "ledger_pb2_grpc.LedgerServiceAsyncStub"
    participant: RemoteParticipant
    own: tuple[str, str]
    backbone: str
    counts: CollectorRegistry
    """Where its ledger service counts the parts it takes."""


@pytest_asyncio.fixture
async def east(sessions: Sessions) -> AsyncIterator[East]:
    async with sessions.begin() as session:
        await registry.seed_map(session, document=china_document())
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
    live_map = LiveMap(sessions, owner=REGION, restrict=True)
    await live_map.reload()
    counts = CollectorRegistry()
    servicer = LedgerServicer(
        sessions,
        view=live_map.view,
        watch=live_map,
        take=CohortQuotas().take_parts,
        metrics=LedgerPartMetrics(counts),
    )

    def register(server: grpc.aio.Server) -> list[str]:
        return [add_ledger_service(server, servicer)]

    server = await start_server(address="127.0.0.1:0", security=PeerSecurity(), register=register)
    endpoint = f"127.0.0.1:{server.port}"
    channel = open_channel(endpoint, security=PeerSecurity())
    try:
        stub = ledger_pb2_grpc.LedgerServiceStub(channel)
        region = Region(
            id=REGION,
            endpoint=endpoint,
            provinces=live_map.ownership.provinces,
            channel=channel,
            brain=regional_pb2_grpc.RegionalBrainServiceStub(channel),
            ledger=stub,
        )
        links = live_map.map.links
        own = [link.id for link in links if link.owner == REGION]
        backbone = next(link.id for link in links if link.owner == "national")
        participant = RemoteParticipant(region, deadline_s=5.0)
        yield East(stub, participant, (own[0], own[1]), backbone, counts)
    finally:
        await channel.close()
        await server.stop(0.5)


def _part(name: str, now: int) -> Claim:
    """A part that holds nothing but its flows."""
    return Claim(
        reservation_id=f"rsv-{name}",
        request_id=f"req-{name}",
        tenant_id="acme",
        site_id=None,
        cpu_m=0,
        mem_mib=0,
        storage_gib=0,
        accelerator_model=None,
        accelerator_milli=0,
        link_ids=(),
        mbps=0,
        window=Window(now, now + HOUR),
        counts_quota=False,
    )


def _flow(name: str, kind: str, link: str, window: Window) -> FlowHold:
    return FlowHold(f"rsv-{name}", kind, "SH", (link,), 100, window)


async def _held(sessions: Sessions, name: str) -> list[FlowHold]:
    async with sessions() as session:
        return await ledger_store.held_flows(session, request_id=f"req-{name}")


async def test_a_parts_flows_cross_the_wire_and_a_completed_release_keeps_its_delivery(
    sessions: Sessions, east: East
) -> None:
    now = epoch_s(utcnow())
    a, b = east.own
    staging = _flow("job", "staging", a, Window(now, now + HOUR))
    delivery = _flow("job", "delivery", b, Window(now + HOUR, now + 2 * HOUR))

    prepared = await east.participant.prepare(
        [_part("job", now)], ttl_ms=60_000, flows=[staging, delivery]
    )

    assert prepared == [None]
    assert await _held(sessions, "job") == [staging, delivery]
    await east.participant.release(["rsv-job"], "completed", keep_delivery=True)
    assert await _held(sessions, "job") == [delivery]


async def test_a_part_whose_flow_crosses_a_link_of_another_owner_is_refused_alone(
    sessions: Sessions, east: East
) -> None:
    now = epoch_s(utcnow())
    window = Window(now, now + HOUR)
    flows = [
        _flow("out", "staging", east.backbone, window),
        _flow("in", "staging", east.own[0], window),
    ]

    prepared = await east.participant.prepare(
        [_part("out", now), _part("in", now)], ttl_ms=60_000, flows=flows
    )

    assert prepared[1] is None
    assert prepared[0] == f"flows[0]: link {east.backbone!r} is not owned by {REGION}"
    assert await _held(sessions, "out") == []
    async with sessions() as session:
        assert await peer_ledger.get(session, reservation_id="rsv-out") is None


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("kind", "upload", "flows[0].kind: unknown kind 'upload'"),
        ("end_s", 0, "flows[0]: a flow needs a window"),
        ("mbps", 0, "flows[0].mbps: must be within"),
    ],
)
async def test_a_part_with_a_malformed_flow_is_refused_naming_it(
    sessions: Sessions, east: East, field: str, value: object, named: str
) -> None:
    now = epoch_s(utcnow())
    message = part_message(
        _part("bad", now), [_flow("bad", "staging", east.own[0], Window(now, now + HOUR))]
    )
    setattr(message.flows[0], field, value)

    answer = await east.stub.Prepare(ledger_pb2.PrepareRequest(parts=[message], ttl_ms=60_000))

    [result] = answer.results
    assert not result.prepared and result.reason.startswith(named), result.reason
    async with sessions() as session:
        assert await peer_ledger.get(session, reservation_id="rsv-bad") is None


async def test_a_part_with_too_many_flows_or_given_again_with_other_flows_is_refused(
    sessions: Sessions, east: East
) -> None:
    now = epoch_s(utcnow())
    flow = _flow("many", "staging", east.own[0], Window(now, now + HOUR))
    many = part_message(_part("many", now), [flow] * (MAX_PART_FLOWS + 1))
    once = part_message(_part("twice", now), [_flow("twice", "staging", east.own[0], flow.window)])
    again = part_message(_part("twice", now), [_flow("twice", "stream", east.own[0], flow.window)])

    answer = await east.stub.Prepare(
        ledger_pb2.PrepareRequest(parts=[many, once, again], ttl_ms=60_000)
    )

    many_result, once_result, again_result = answer.results
    assert many_result.reason.startswith("flows: a part carries at most")
    assert once_result.prepared
    assert not again_result.prepared and "other flows" in again_result.reason
    assert [f.kind for f in await _held(sessions, "twice")] == ["staging"]


async def test_a_release_counts_what_it_released_and_what_was_not_held(east: East) -> None:
    def released(outcome: str) -> float | None:
        labels = {"step": "release", "outcome": outcome}
        return east.counts.get_sample_value("cnbrain_ledger_parts_total", labels)

    assert (released("ok"), released("not_held")) == (0, 0)
    assert await east.participant.prepare([_part("counted", epoch_s(utcnow()))], ttl_ms=60_000)
    answer = await east.stub.Release(
        ledger_pb2.ReleaseRequest(reservation_ids=["rsv-counted", "rsv-none-such"])
    )
    assert list(answer.released) == [True, False]
    assert (released("ok"), released("not_held")) == (1, 1)
    await east.stub.Release(ledger_pb2.ReleaseRequest(reservation_ids=["rsv-counted"]))
    assert (released("ok"), released("not_held")) == (1, 2)  # released already
