"""The placer's quote against an in-process federation (the national brain's composition
without its server, and the east and west brains' regional and ledger services over gRPC on
loopback, each on its own SQLite database): it is the decision a placement of the same
request then commits, and it reserves nothing in any owner."""

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.ledger_service import LedgerServicer, add_ledger_service
from cnbrain.federation.live_map import LiveMap
from cnbrain.national.composition import NationalBrain, running
from cnbrain.national.planner import QUOTED_NOTE
from cnbrain.national.settings import NationalSettings
from cnbrain.netmap.load import load_document
from cnbrain.regional.federation import RegionalServicer, add_regional_service
from cnbrain.rpc.security import PeerSecurity
from cnbrain.rpc.server import start_server
from cnbrain.storage import registry, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema

pytestmark = pytest.mark.asyncio

EXAMPLE = Path(__file__).parents[2] / "examples" / "requests" / "gpu-training.json"


def _gpu_job(request_id: str) -> PlacementRequest:
    body = {**json.loads(EXAMPLE.read_text()), "id": request_id, "tenant": "acme"}
    return PlacementRequest.model_validate(body)


@dataclass
class Federation:
    national: NationalBrain
    regions: dict[str, LiveMap]

    async def free(self) -> list[np.ndarray]:
        """Every brain's free compute, accelerators and bandwidth, read from its database."""
        maps = [self.national.live_map, *self.regions.values()]
        found = []
        for live_map in maps:
            live_map.capacity_changed()
            snapshot, _ = await live_map.snapshot()
            found += [snapshot.free_cpu_m, snapshot.free_acc, snapshot.residual_mbps]
        return found


@asynccontextmanager
async def federation(workdir: Path) -> AsyncIterator[Federation]:
    async with AsyncExitStack() as stack:
        settings = NationalSettings(
            database_url=f"sqlite+aiosqlite:///{workdir / 'national.db'}", grpc_port=None
        )
        national = await stack.enter_async_context(running(settings))
        regions: dict[str, LiveMap] = {}
        for region in ("east", "west"):
            url = f"sqlite+aiosqlite:///{workdir / region}.db"
            await upgrade_schema(url)
            database = create_engine(url)
            stack.push_async_callback(database.dispose)
            sessions = session_factory(database)
            async with sessions.begin() as session:
                await registry.seed_if_empty(session, document=load_document(settings.map))
                await tenants.create_tenant(session, name="Acme", tenant_id="acme")
            live_map = LiveMap(sessions, owner=region, restrict=True)
            await live_map.reload()
            brain = RegionalServicer(live_map, region_id=region)
            ledger = LedgerServicer(sessions, view=live_map.view, watch=live_map)

            def register(
                server: grpc.aio.Server,
                brain: RegionalServicer = brain,
                ledger: LedgerServicer = ledger,
            ) -> list[str]:
                return [add_regional_service(server, brain), add_ledger_service(server, ledger)]

            server = await start_server(
                address="127.0.0.1:0", security=PeerSecurity(), register=register
            )
            stack.push_async_callback(server.stop, 0.5)
            provinces = frozenset(
                code for code, p in live_map.map.provinces.items() if p.region == region
            )
            await national.directory.register(region, f"127.0.0.1:{server.port}", provinces)
            regions[region] = live_map
        yield Federation(national=national, regions=regions)


def _route(decision: Decision) -> list[tuple[str, str, list[str]]]:
    assert decision.path is not None
    return [(s.kind, s.owner, [h.link for h in s.hops]) for s in decision.path.segments]


async def test_a_quote_is_what_the_placement_then_commits_and_reserves_nothing(
    tmp_path: Path,
) -> None:
    async with federation(tmp_path) as fed:
        placer = fed.national.placer
        before = await fed.free()

        quoted = await placer.quote(_gpu_job("quote-1"), "east")

        after = await fed.free()
        assert all((b == a).all() for b, a in zip(before, after, strict=True))
        assert quoted.status is DecisionStatus.PLACED, quoted.reason
        assert quoted.reservation_id is None
        assert quoted.explanation is not None and QUOTED_NOTE in quoted.explanation.notes
        assert [(kind, owner) for kind, owner, _ in _route(quoted)] == [
            ("source", "east"),
            ("backbone", "national"),
            ("destination", "west"),
        ]

        placed = await placer.place(_gpu_job("place-1"), "east")

        assert placed.status is DecisionStatus.PLACED, placed.reason
        assert placed.reservation_id is not None
        assert placed.site == quoted.site
        assert _route(placed) == _route(quoted)
        assert placed.outcome is not None and quoted.outcome is not None
        assert placed.outcome.cost_cny == quoted.outcome.cost_cny
        taken = await fed.free()
        assert not all((b == t).all() for b, t in zip(before, taken, strict=True))


async def test_a_quote_from_a_region_that_has_not_registered_is_rejected_naming_it(
    tmp_path: Path,
) -> None:
    async with federation(tmp_path) as fed:
        quoted = await fed.national.placer.quote(_gpu_job("quote-2"), "north")

        assert quoted.status is DecisionStatus.REJECTED
        assert quoted.reason is not None and "'north' is not registered" in quoted.reason
