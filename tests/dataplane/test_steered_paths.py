"""A brain's steered paths following its ledger (on PostgreSQL) onto the tiny map's netlab:
what the ledger holds is installed, a headend the data plane lost is installed again, a
failed install is tried again, a reservation just released is not installed again while the
ledger still shows it, a lab made again is steered again, and a release never raises."""

import asyncio
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from cnbrain.dataplane import linux, manifest
from cnbrain.dataplane.plan import LabPlan, headends
from cnbrain.dataplane.steering import NetlabSteering
from cnbrain.domain.decision import Decision
from cnbrain.domain.states import ReservationState
from cnbrain.federation.steered_paths import SteeredPaths
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import create_engine, session_factory
from cnbrain.storage.models import Base, PeerReservation
from tests.databases import Sessions
from tests.dataplane.conftest import TINY_LAB
from tests.dataplane.test_steering import ascend, placed
from tests.dataplane.traffic import job_of
from tests.migrated_databases import postgres_url
from tests.polling import until

__all__ = ["postgres_url"]

pytestmark = pytest.mark.usefixtures("lab_tools")


@pytest_asyncio.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(postgres_url)
    tables = ", ".join(table.name for table in reversed(Base.metadata.sorted_tables))
    async with engine.begin() as connection:
        await connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> Sessions:
    return session_factory(engine)


async def hold(sessions: Sessions, decision: Decision) -> None:
    """The ledger holds `decision`'s reservation as a committed part of it."""
    now = utcnow()
    async with sessions.begin() as session:
        session.add(
            PeerReservation(
                id=str(decision.reservation_id),
                request_id=decision.request_id,
                tenant_id="acme",
                start_at=now,
                end_at=now + timedelta(hours=1),
                state=ReservationState.HELD,
                decision=decision.model_dump(mode="json"),
            )
        )


async def release_in_ledger(sessions: Sessions, reservation_id: str) -> None:
    async with sessions.begin() as session:
        await session.execute(
            update(PeerReservation)
            .where(PeerReservation.id == reservation_id)
            .values(state=ReservationState.RELEASED)
        )


async def routes_to(lab: LabPlan, job: str) -> dict[str, str]:
    """The reservation whose route to `job` each router holds, of those that hold one."""

    def read() -> dict[str, str]:
        routes = linux.Headends()
        try:
            found = {h.node: routes.installed(h.namespace, job) for h in lab.host_of.values()}
        finally:
            routes.close()
        return {node: rid for node, rid in found.items() if rid is not None}

    return await asyncio.to_thread(read)


def in_namespace(namespace: str, *command: str, stdin: str | None = None) -> None:
    subprocess.run(["ip", "netns", "exec", namespace, *command], input=stdin, text=True, check=True)


def steered_paths(sessions: Sessions) -> SteeredPaths:
    return SteeredPaths(
        NetlabSteering(lab=TINY_LAB, owner=None), sessions=sessions, interval_s=0.01
    )


@pytest.mark.asyncio
async def test_follow_steers_what_the_ledger_holds_and_mends_what_the_data_plane_lost(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap, sessions: Sessions
) -> None:
    [decision] = placed(tiny_map, ascend(0.01))
    rid = str(decision.reservation_id)
    job = job_of(tiny_lab, decision)
    heads = headends(tiny_lab, decision, owner=None)
    every = {h.node: rid for h in heads}
    assert len(every) == 3
    paths = steered_paths(sessions)
    try:
        await hold(sessions, decision)
        await paths.follow()
        assert await routes_to(tiny_lab, job) == every

        # The kernel dropped a headend's route (its link went down and came back up).
        in_namespace(heads[0].namespace, "ip", "-6", "route", "del", f"{job}/128")
        await paths.follow()
        assert await routes_to(tiny_lab, job) == every

        # A headend that cannot be installed now (its router takes no policer) is tried
        # again, until it is.
        in_namespace(heads[1].namespace, "nft", "delete", "table", "ip6", linux.TABLE)
        in_namespace(heads[1].namespace, "ip", "-6", "route", "del", f"{job}/128")
        await paths.follow()
        assert heads[1].node not in await routes_to(tiny_lab, job)
        in_namespace(heads[1].namespace, "nft", "-f", "-", stdin=linux.POLICERS)

        async def mended() -> bool | None:
            await paths.follow()
            return await routes_to(tiny_lab, job) == every or None

        await until(mended, "the failed headend installed again", timeout_s=10)

        # The lab is made again: everything is steered again, in its new namespaces.
        def remake() -> None:
            linux.destroy(tiny_lab.name)
            linux.build(tiny_lab)
            manifest.write(tiny_lab)

        await asyncio.to_thread(remake)
        assert await routes_to(tiny_lab, job) == {}
        await paths.follow()
        assert await routes_to(tiny_lab, job) == every

        # A cancel released it, and the ledger read by the next pass still holds it.
        await paths.release([rid])
        assert await routes_to(tiny_lab, job) == {}
        await paths.follow()
        assert await routes_to(tiny_lab, job) == {}
    finally:
        paths.close()


@pytest.mark.asyncio
async def test_a_release_that_cannot_read_the_ledger_does_not_raise_and_is_made_later(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap, sessions: Sessions, engine: AsyncEngine
) -> None:
    [decision] = placed(tiny_map, ascend(0.01))
    rid = str(decision.reservation_id)
    job = job_of(tiny_lab, decision)
    await hold(sessions, decision)
    before = steered_paths(sessions)
    try:
        await before.install([decision])
    finally:
        before.close()
    assert len(await routes_to(tiny_lab, job)) == 3

    # After a restart, the brain knows nothing installed: a release looks the decision up
    # in the ledger, which cannot be read now.
    paths = steered_paths(sessions)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("ALTER TABLE peer_reservations RENAME TO away"))
        try:
            await paths.release([rid])
        finally:
            async with engine.begin() as connection:
                await connection.execute(text("ALTER TABLE away RENAME TO peer_reservations"))
        await release_in_ledger(sessions, rid)
        assert len(await routes_to(tiny_lab, job)) == 3

        await paths.follow()
        assert await routes_to(tiny_lab, job) == {}
    finally:
        paths.close()
