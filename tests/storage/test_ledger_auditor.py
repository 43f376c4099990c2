"""The ledger auditor on a brain's database (PostgreSQL and SQLite): what it finds in the rows,
what it releases once the grace has passed (through the ledger's release paths, audited), and
what it only reports."""

import time
from collections.abc import Sequence
from datetime import timedelta

import pytest
import pytest_asyncio
from sqlalchemy import select, update

from cnbrain.federation.auditor import LedgerAuditor
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.audit import Liveness
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, peer_ledger, requests
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.models import AuditEntry, PeerReservation, ReservationRecord, SiteCapacity
from cnbrain.storage.requests import NewRequest, StateChange
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.claims import claim

pytestmark = pytest.mark.asyncio

TENANT = "acme"
GRACE_S = 300.0
PROVINCES = {"ZJ": "east", "SC": "west"}


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(session, user_id="u", name="u", role="tenant-user", tenant_id=TENANT)
    return seeded


def _claim(arrays: MapArrays, reservation_id: str, request_id: str) -> Claim:
    """2 cores on the first site; counted in the quota."""
    site = arrays.map.sites[0].id
    return claim(reservation_id, request_id, TENANT, site_id=site, cpu_m=2000, mem_mib=1024)


async def _request(sessions: Sessions, request_id: str, states: Sequence[str] = ()) -> None:
    async with sessions.begin() as session:
        new = NewRequest(request_id=request_id, tenant_id=TENANT, user_id="u", body={})
        assert await requests.insert_requests(session, [new]) == [None]
    for state in states:
        async with sessions.begin() as session:
            await requests.set_states(session, [StateChange(request_id, state)])


async def _held_part(
    sessions: Sessions,
    arrays: MapArrays,
    part_id: str,
    request_id: str,
    province: str,
    flows: Sequence[FlowHold] = (),
) -> None:
    """A part of `request_id` (of `province`) prepared and committed here, with `flows`."""
    claim = _claim(arrays, part_id, request_id)
    expires_at = utcnow() + timedelta(minutes=5)
    async with sessions.begin() as session:
        await peer_ledger.prepare(session, claim=claim, expires_at=expires_at, flows=flows)
        request = {"id": request_id, "source_province": province}
        assert (
            await peer_ledger.commit(
                session, reservation_id=part_id, decision=None, request=request
            )
            is None
        )


def _delivery(arrays: MapArrays) -> tuple[str, Window]:
    """The first link, and a delivery's window from an hour to two hours from now."""
    now = epoch_s(utcnow())
    return arrays.map.links[0].id, Window(now + 3600, now + 7200)


class Sources:
    """The other regions as the auditor asks them: the live and the completed request ids of
    each region, and the regions that do not answer."""

    def __init__(
        self,
        live: dict[str, set[str]],
        down: frozenset[str] = frozenset(),
        completed: dict[str, set[str]] | None = None,
    ) -> None:
        self.live, self.down, self.completed = live, down, completed or {}
        self.asked: list[tuple[str, list[str]]] = []

    async def __call__(self, region: str, request_ids: Sequence[str]) -> Liveness:
        self.asked.append((region, list(request_ids)))
        if region in self.down:
            raise PeerUnavailable(region, "unavailable")
        return Liveness.among(
            request_ids,
            live=self.live.get(region, set()),
            completed=self.completed.get(region, set()),
        )


class Clock:
    """The wall clock, `later_s` ahead."""

    def __init__(self, later_s: float = 0.0) -> None:
        self.later_s = later_s

    def __call__(self) -> float:
        return time.time() + self.later_s


def _auditor(
    sessions: Sessions,
    *,
    region: str | None,
    sources: Sources | None,
    later_s: float = 0.0,
    clock: Clock | None = None,
) -> tuple[LedgerAuditor, list[int]]:
    changed: list[int] = []
    auditor = LedgerAuditor(
        sessions,
        region=region,
        region_of=PROVINCES.get,
        live_at=sources,
        grace_s=GRACE_S,
        changed=lambda: changed.append(1),
        clock=clock or Clock(later_s),
    )
    return auditor, changed


async def _states(
    sessions: Sessions, table: type[ReservationRecord] | type[PeerReservation]
) -> dict[str, str]:
    async with sessions() as session:
        return dict((await session.execute(select(table.id, table.state))).all())


async def _audit_log(sessions: Sessions) -> list[tuple[str, str, str, str | None]]:
    async with sessions() as session:
        rows = await session.execute(
            select(
                AuditEntry.actor, AuditEntry.action, AuditEntry.object_id, AuditEntry.tenant_id
            ).order_by(AuditEntry.id)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


async def _check(sessions: Sessions) -> None:
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_a_held_reservation_of_an_ended_request_is_released_once_the_grace_passed(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _request(sessions, "r-live", ["placed"])
    await _request(sessions, "r-ended", ["placed"])
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session,
            claims=[_claim(ledger, "res-live", "r-live"), _claim(ledger, "res-ended", "r-ended")],
        )
    async with sessions.begin() as session:  # its cancel forgot its reservation
        await requests.set_states(session, [StateChange("r-ended", "cancelled")])

    now, _ = _auditor(sessions, region="east", sources=None)
    first = await now.audit()
    assert first.found == {"ended_request": 1} and first.repaired == {}
    assert [f.object_id for f in first.findings] == ["res-ended"]
    assert await _states(sessions, ReservationRecord) == {"res-live": "held", "res-ended": "held"}

    later, changed = _auditor(sessions, region="east", sources=None, later_s=GRACE_S)
    audit = await later.audit()
    assert audit.repaired == {"ended_request": 1}
    assert await _states(sessions, ReservationRecord) == {
        "res-live": "held",
        "res-ended": "released",
    }
    assert changed == [1]
    await _check(sessions)
    assert await _audit_log(sessions) == [
        ("ledger-auditor", "reservation.release", "res-ended", TENANT)
    ]
    assert (await later.audit()).found == {}


async def test_the_release_of_a_completed_requests_reservation_keeps_its_delivery(
    sessions: Sessions, ledger: MapArrays
) -> None:
    link, delivery = _delivery(ledger)
    for request_id, ended in (("r-done", "completed"), ("r-cancelled", "cancelled")):
        await _request(sessions, request_id, ["placed", "submitted", "running"])
        reservation_id = f"res-{request_id}"
        async with sessions.begin() as session:
            await ledger_store.reserve_many(
                session,
                claims=[_claim(ledger, reservation_id, request_id)],
                flows=[FlowHold(reservation_id, "delivery", "ZJ", (link,), 100, delivery)],
            )
        async with sessions.begin() as session:  # its end forgot its reservation
            await requests.set_states(session, [StateChange(request_id, ended)])

    auditor, _ = _auditor(sessions, region="east", sources=None, later_s=GRACE_S)
    await auditor.audit()
    audit = await auditor.audit()

    assert audit.found == {}
    async with sessions() as session:
        kept = await ledger_store.held_flows(session, request_id="r-done")
        gone = await ledger_store.held_flows(session, request_id="r-cancelled")
    assert [(f.kind, f.window) for f in kept] == [("delivery", delivery)]
    assert gone == []
    await _check(sessions)


async def test_held_parts_are_released_when_their_request_is_not_live_at_its_source(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _request(sessions, "r-east-live")
    await _held_part(sessions, ledger, "p-east-live", "r-east-live", "ZJ")
    await _held_part(sessions, ledger, "p-east-ghost", "r-east-ghost", "ZJ")
    await _held_part(sessions, ledger, "p-west-live", "r-west-live", "SC")
    await _held_part(sessions, ledger, "p-west-ghost", "r-west-ghost", "SC")
    sources = Sources({"west": {"r-west-live"}})

    auditor, _ = _auditor(sessions, region="east", sources=sources, later_s=GRACE_S)
    audit = await auditor.audit()

    assert sources.asked == [("west", ["r-west-ghost", "r-west-live"])]
    assert audit.found == {"not_live_at_source": 2}
    assert audit.repaired == {"not_live_at_source": 2}
    assert await _states(sessions, PeerReservation) == {
        "p-east-live": "held",
        "p-east-ghost": "released",
        "p-west-live": "held",
        "p-west-ghost": "released",
    }
    await _check(sessions)
    assert {(a, o) for _, a, o, _ in await _audit_log(sessions)} == {
        ("part.release", "p-east-ghost"),
        ("part.release", "p-west-ghost"),
    }


async def test_the_release_of_a_part_of_a_completed_request_keeps_its_delivery(
    sessions: Sessions, ledger: MapArrays
) -> None:
    link, delivery = _delivery(ledger)
    for request_id, ended in (("r-east-done", "completed"), ("r-east-cancelled", "cancelled")):
        await _request(sessions, request_id, ["placed", "submitted", "running", ended])
    parts = {
        "p-east-done": ("r-east-done", "ZJ"),
        "p-east-cancelled": ("r-east-cancelled", "ZJ"),
        "p-west-done": ("r-west-done", "SC"),
        "p-west-gone": ("r-west-gone", "SC"),
    }
    for part_id, (request_id, province) in parts.items():
        flow = FlowHold(part_id, "delivery", province, (link,), 100, delivery)
        await _held_part(sessions, ledger, part_id, request_id, province, [flow])
    sources = Sources({"west": set()}, completed={"west": {"r-west-done"}})

    auditor, _ = _auditor(sessions, region="east", sources=sources, later_s=GRACE_S)
    audit = await auditor.audit()

    assert audit.repaired == {"not_live_at_source": 4}
    assert set((await _states(sessions, PeerReservation)).values()) == {"released"}
    async with sessions() as session:
        kept = {
            request_id: [(f.kind, f.window) for f in flows]
            for request_id, _ in parts.values()
            if (flows := await ledger_store.held_flows(session, request_id=request_id))
        }
    assert kept == {
        "r-east-done": [("delivery", delivery)],
        "r-west-done": [("delivery", delivery)],
    }
    await _check(sessions)


async def test_parts_whose_source_cannot_be_asked_are_only_reported(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _held_part(sessions, ledger, "p-west", "r-west", "SC")
    await _held_part(sessions, ledger, "p-nowhere", "r-nowhere", "XX")
    clock = Clock()
    sources = Sources({}, down=frozenset({"west"}))
    auditor, _ = _auditor(sessions, region="east", sources=sources, clock=clock)

    for later_s in (0.0, GRACE_S * 10):
        clock.later_s = later_s
        audit = await auditor.audit()
        assert audit.found == {"unverified": 2} and audit.repaired == {}
    assert await _states(sessions, PeerReservation) == {"p-west": "held", "p-nowhere": "held"}
    assert auditor.found_total == {"unverified": 4}


async def test_a_prepared_part_past_its_expiry_is_released_after_the_grace(
    sessions: Sessions, ledger: MapArrays
) -> None:
    async with sessions.begin() as session:
        await peer_ledger.prepare(
            session,
            claim=_claim(ledger, "p-lapsed", "r-any"),
            expires_at=utcnow() - timedelta(seconds=1),
        )
    soon, _ = _auditor(sessions, region=None, sources=None)
    assert (await soon.audit()).found == {"expired_prepared": 1}
    assert await _states(sessions, PeerReservation) == {"p-lapsed": "prepared"}

    later, _ = _auditor(sessions, region=None, sources=None, later_s=GRACE_S)
    assert (await later.audit()).repaired == {"expired_prepared": 1}
    assert await _states(sessions, PeerReservation) == {"p-lapsed": "released"}
    await _check(sessions)


async def test_over_commit_and_wrong_used_columns_are_reported_and_left_as_they_are(
    sessions: Sessions, ledger: MapArrays
) -> None:
    site = ledger.map.sites[0].id
    await _request(sessions, "r", ["placed"])
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[_claim(ledger, "res", "r")])
        await session.execute(
            update(SiteCapacity)
            .where(SiteCapacity.site_id == site)
            .values(cpu_m_cap=1000, mem_mib_used=SiteCapacity.mem_mib_used + 7)
        )
    auditor, changed = _auditor(sessions, region="east", sources=None, later_s=GRACE_S * 10)
    audit = await auditor.audit()

    assert audit.found == {"over_commit": 1, "used_mismatch": 1}
    assert {f.object_id for f in audit.findings} == {f"site {site!r} cpu", f"site {site!r} memory"}
    assert audit.repaired == {} and changed == []
    async with sessions() as session:
        row = await session.get(SiteCapacity, site)
        assert row is not None and row.cpu_m_used == 2000
    assert await _states(sessions, ReservationRecord) == {"res": "held"}
