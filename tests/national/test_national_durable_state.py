"""The national brain's state in its database, on PostgreSQL and SQLite: the coordinator
records every placement under way before its parts are prepared and forgets it once its
outcome is decided; `recover` releases in every owner the parts of those a run before left;
the directory's registrations are kept and taken back."""

from collections.abc import Sequence

import pytest

from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.national.coordinator import RECOVERED, Coordinator, InFlight, Participant
from cnbrain.national.inflight import DatabaseJournal
from cnbrain.national.known_regions import DatabaseRegions
from cnbrain.national.regions import RegionDirectory
from cnbrain.rpc.security import PeerSecurity
from tests.databases import Sessions
from tests.migrated_databases import database_url, engine, postgres_url, sessions, sqlite_url
from tests.national.test_national_coordinator import Ledger, _commitment, _plan

__all__ = ["database_url", "engine", "postgres_url", "sessions", "sqlite_url"]

pytestmark = pytest.mark.asyncio


class RecordingLedger(Ledger):
    """A participant that also notes what the journal held when it was asked to prepare."""

    def __init__(self, region: str | None, journal: DatabaseJournal) -> None:
        super().__init__(region)
        self.journal = journal
        self.recorded_at_prepare: list[str] = []
        self.reasons: list[str] = []

    async def prepare(
        self, claims: Sequence[Claim], *, ttl_ms: int, flows: Sequence[FlowHold] = ()
    ) -> list[str | None]:
        self.recorded_at_prepare = [p.reservation_id for p in await self.journal.under_way()]
        return await super().prepare(claims, ttl_ms=ttl_ms, flows=flows)

    async def release(
        self, reservation_ids: Sequence[str], reason: str, *, keep_delivery: bool = False
    ) -> None:
        self.reasons.append(reason)
        await super().release(reservation_ids, reason, keep_delivery=keep_delivery)


def _setup(sessions: Sessions) -> tuple[DatabaseJournal, dict[str, RecordingLedger], Coordinator]:
    journal = DatabaseJournal(sessions, replica="national-1")
    ledgers = {name: RecordingLedger(name, journal) for name in ("east", "west")}
    ledgers["national"] = RecordingLedger(None, journal)
    participants: dict[str, Participant] = dict(ledgers)
    return journal, ledgers, Coordinator(participants.get, ttl_ms=1_000, journal=journal)


async def test_a_placement_is_recorded_before_its_parts_are_prepared_until_decided(
    sessions: Sessions,
) -> None:
    journal, ledgers, coordinator = _setup(sessions)
    ledgers["west"].refuse.add("r1")
    plans = [_plan(0, ["east", "national", "west"]), _plan(1, ["east", "national", "west"])]
    failures = await coordinator.prepare(plans)
    assert list(failures) == [1]
    for ledger in ledgers.values():
        assert ledger.recorded_at_prepare == ["r0", "r1"]
    assert await journal.under_way() == [InFlight("r0", "q0", ("east", "national", "west"))]
    assert await coordinator.commit(plans[:1], {0: _commitment(plans[0])}) == {}
    assert await journal.under_way() == []


async def test_recover_releases_what_a_run_before_left_under_way_and_forgets_it(
    sessions: Sessions,
) -> None:
    journal, ledgers, coordinator = _setup(sessions)
    plans = [_plan(0, ["east", "national", "west"]), _plan(1, ["east", "national"])]
    assert await coordinator.prepare(plans) == {}  # then the brain stops, before commit

    _, ledgers, restarted = _setup(sessions)
    ledgers["west"].down = True
    assert await restarted.recover() == 2
    assert ledgers["east"].calls == [("release", ["r0", "r1"])]
    assert ledgers["national"].calls == [("release", ["r0", "r1"])]
    assert ledgers["west"].calls == [("release", ["r0"])]
    assert {reason for ledger in ledgers.values() for reason in ledger.reasons} == {RECOVERED}
    assert await journal.under_way() == []
    assert await restarted.recover() == 0


async def test_the_directory_keeps_its_registrations_and_takes_them_back(
    sessions: Sessions,
) -> None:
    security = PeerSecurity()
    directory = RegionDirectory(security, known=DatabaseRegions(sessions))
    await directory.register("east", "127.0.0.1:5001", frozenset({"ZJ", "JS"}))
    await directory.register("west", "127.0.0.1:5002", frozenset({"NX"}))
    await directory.register("west", "127.0.0.1:5003", frozenset({"NX"}))
    await directory.close()

    owned = {"east": frozenset({"ZJ", "JS", "SH"}), "west": None}
    restored = RegionDirectory(security, known=DatabaseRegions(sessions))
    assert await restored.restore(owned.get) == ["east"]
    east = restored.get("east")
    assert east is not None
    assert (east.endpoint, east.provinces, east.summary) == (
        "127.0.0.1:5001",
        frozenset({"ZJ", "JS", "SH"}),
        None,
    )
    assert "west" not in restored
    assert await DatabaseRegions(sessions).load() == [
        ("east", "127.0.0.1:5001", frozenset({"ZJ", "JS"})),
        ("west", "127.0.0.1:5003", frozenset({"NX"})),
    ]
    await restored.close()
