"""Replicas of the national brain on one database, on PostgreSQL and SQLite: which placements
under way are orphans (their replica's lease lapsed, or the replica started again), and the
duties that one replica at a time does passing to another when its holder stops or dies."""

import asyncio
from datetime import timedelta

import pytest

from cnbrain.background import stop_task
from cnbrain.national.coordinator import InFlight
from cnbrain.national.inflight import DatabaseJournal
from cnbrain.national.replicas import DUTIES_LEASE, Duty, Replica
from cnbrain.storage import leases
from cnbrain.storage.clock import utcnow
from cnbrain.storage.inflight_placements import replica_lease
from tests.databases import Sessions
from tests.migrated_databases import database_url, engine, postgres_url, sessions, sqlite_url
from tests.polling import wait_until

__all__ = ["database_url", "engine", "postgres_url", "sessions", "sqlite_url"]

pytestmark = pytest.mark.asyncio

LEASE_S = 2.0
"""Long against the scheduling delays of a busy 2-core machine: a replica renews every third
of it, and the checks below allow it a whole lease."""


async def _lease(sessions: Sessions, replica: str, *, seconds: float) -> None:
    """Replica `replica`'s own lease, ending `seconds` from now (negative: lapsed)."""
    now = utcnow()
    async with sessions.begin() as session:
        assert await leases.hold(
            session,
            name=replica_lease(replica),
            owner=replica,
            until=now + timedelta(seconds=seconds),
            now=now - timedelta(seconds=3600),
        )


def _one(reservation_id: str) -> InFlight:
    return InFlight(reservation_id, f"q-{reservation_id}", ("east", "national"))


async def test_orphans_are_the_placements_of_replicas_whose_lease_lapsed(
    sessions: Sessions,
) -> None:
    a = DatabaseJournal(sessions, replica="a")
    b = DatabaseJournal(sessions, replica="b")
    c = DatabaseJournal(sessions, replica="c")
    await a.begin([_one("ra")])
    await b.begin([_one("rb")])
    await c.begin([_one("rc")])
    await _lease(sessions, "a", seconds=60)
    await _lease(sessions, "b", seconds=60)
    # "c" never held a lease: it is not alive.
    assert [p.reservation_id for p in await b.orphaned()] == ["rb", "rc"]  # its own, once
    assert [p.reservation_id for p in await b.orphaned()] == ["rc"]
    await _lease(sessions, "a", seconds=-1)
    assert [p.reservation_id for p in await b.orphaned()] == ["ra", "rc"]
    assert [p.reservation_id for p in await a.orphaned()] == ["ra", "rc"]  # its first look
    assert [p.reservation_id for p in await a.orphaned()] == ["rc"]
    await a.end(["ra", "rc"])
    assert await b.under_way() == [_one("rb")]
    assert await b.orphaned() == []


async def test_the_duties_run_on_one_replica_at_a_time_and_pass_on(sessions: Sessions) -> None:
    ran: dict[str, int] = {"a": 0, "b": 0}

    def duty(name: str) -> Duty:
        async def loop() -> None:
            while True:
                ran[name] += 1
                await asyncio.sleep(0.05)

        return ("count", loop)

    a = Replica(sessions, name="a", lease_s=LEASE_S)
    b = Replica(sessions, name="b", lease_s=LEASE_S)
    first = asyncio.create_task(a.duties_forever([duty("a")]))
    await wait_until(lambda: ran["a"] > 0, 5)
    second = asyncio.create_task(b.duties_forever([duty("b")]))
    try:
        await asyncio.sleep(LEASE_S * 2)
        assert ran["b"] == 0
        await stop_task(first)  # a clean stop lets the lease go
        took = await wait_until(lambda: ran["b"] > 0, LEASE_S)
        assert took < LEASE_S
    finally:
        await stop_task(first)
        await stop_task(second)

    # A holder that dies renews nothing: the others wait for its lease to lapse.
    ghost = Replica(sessions, name="ghost", lease_s=LEASE_S)
    assert await ghost.hold(DUTIES_LEASE)
    ran["b"] = 0
    third = asyncio.create_task(b.duties_forever([duty("b")]))
    try:
        await asyncio.sleep(LEASE_S / 2)
        assert ran["b"] == 0
        await wait_until(lambda: ran["b"] > 0, LEASE_S * 2)
    finally:
        await stop_task(third)


async def test_a_live_replica_renews_its_lease_and_lets_it_go_when_it_stops(
    sessions: Sessions,
) -> None:
    a = Replica(sessions, name="a", lease_s=LEASE_S)
    b = DatabaseJournal(sessions, replica="b")
    await DatabaseJournal(sessions, replica="a").begin([_one("ra")])
    assert [p.reservation_id for p in await b.orphaned()] == ["ra"]  # not alive yet
    living = asyncio.create_task(a.live_forever())
    try:
        await asyncio.sleep(LEASE_S * 2)  # renewed: never lapsed meanwhile
        assert await b.orphaned() == []
    finally:
        await stop_task(living)
    assert [p.reservation_id for p in await b.orphaned()] == ["ra"]  # let go at once


class GatedReplica(Replica):
    """A replica whose renewals wait at a gate before they reach the database."""

    def __init__(self, sessions: Sessions) -> None:
        super().__init__(sessions, name="a", lease_s=LEASE_S)
        self.at_gate = asyncio.Event()
        self.gate = asyncio.Event()
        self.renewed = 0

    async def hold(self, lease: str) -> bool:
        self.at_gate.set()
        await self.gate.wait()
        held = await super().hold(lease)
        self.renewed += 1
        return held


async def test_a_stop_lets_a_renewal_under_way_finish_then_lets_the_lease_go(
    sessions: Sessions,
) -> None:
    a = GatedReplica(sessions)
    b = DatabaseJournal(sessions, replica="b")
    await DatabaseJournal(sessions, replica="a").begin([_one("ra")])
    living = asyncio.create_task(a.live_forever())
    await asyncio.wait_for(a.at_gate.wait(), timeout=30)
    stopping = asyncio.create_task(stop_task(living))
    await asyncio.sleep(0.1)  # the cancellation reaches the renewal at its gate
    assert not stopping.done()
    a.gate.set()
    await asyncio.wait_for(stopping, timeout=30)
    assert a.renewed == 1
    assert [p.reservation_id for p in await b.orphaned()] == ["ra"]  # let go after it
