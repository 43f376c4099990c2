"""Flows of the parts of cross-brain reservations on PostgreSQL and SQLite: a part's flow holds
its links over its own window, on the calendar and in the snapshot, as a local reservation's
does; a part whose flow does not fit beside the others is refused (naming the link) and
stores none; release and expiry delete a part's flows but, when asked, its delivery; a
repeated prepare takes nothing twice; `held_flows` shows them; and migration 0020 keeps the
flows of reservations both ways."""

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
import sqlalchemy as sa

from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.ledger.keys import link_key
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import ledger_store, peer_ledger, registry
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.database import (
    create_engine,
    downgrade_schema,
    session_factory,
    upgrade_schema,
)
from cnbrain.storage.errors import LedgerStoreError
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.claims import claim
from tests.storage.test_peer_ledger import _Statements

pytestmark = pytest.mark.asyncio

TENANT = "acme"
HOUR = 3600
LATER = timedelta(minutes=5)


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
    return seeded


def _links(arrays: MapArrays) -> tuple[int, int]:
    """Two links of the map that no site's attachment is."""
    sites = {site.id for site in arrays.map.sites}
    free = [
        j for j, link in enumerate(arrays.map.links) if link.a not in sites and link.b not in sites
    ]
    return free[0], free[1]


def _part(name: str, window: Window, **changes: Any) -> Claim:
    """A part that holds nothing but its flows: no site, no link, no quota."""
    part = claim(f"rsv-{name}", f"req-{name}", TENANT, window=window, counts_quota=False)
    return dataclasses.replace(part, **changes)


def _flow(name: str, kind: str, link: str, mbps: int, window: Window) -> FlowHold:
    return FlowHold(f"rsv-{name}", kind, "SH", (link,), mbps, window)


async def _prepare(
    sessions: Sessions,
    claims: list[Claim],
    flows: list[FlowHold],
    expires_in: timedelta = LATER,
) -> list[bool | str]:
    async with sessions.begin() as session:
        return await peer_ledger.prepare_many(
            session, claims=claims, expires_at=utcnow() + expires_in, flows=flows
        )


async def test_a_parts_staging_flow_holds_its_link_over_the_flows_window_only(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    link, cap = ledger.map.links[j].id, int(ledger.link_cap_mbps[j])
    now = epoch_s(utcnow())
    staging = _flow("job", "staging", link, 1000, Window(now - 5, now + HOUR))

    assert await _prepare(sessions, [_part("job", Window(now, now + 3 * HOUR))], [staging]) == [
        True
    ]

    async with sessions() as session:
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
        snapshot = await ledger_store.load_snapshot(session, arrays=ledger)
        held = await ledger_store.held_flows(session, request_id="req-job")
        await ledger_store.check_invariants(session)
    assert held == [staging]
    on_link = calendar.profile(link_key(j))
    assert on_link.free_at(now) == cap - 1000 and on_link.free_at(now + HOUR - 1) == cap - 1000
    assert on_link.free_at(now + HOUR) == cap and on_link.free_at(now + 2 * HOUR) == cap
    assert int(snapshot.residual_mbps[j]) == cap - 1000


async def test_a_part_whose_flow_overlaps_beyond_capacity_is_refused_and_one_beside_it_is_not(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    link, cap = ledger.map.links[j].id, int(ledger.link_cap_mbps[j])
    now = epoch_s(utcnow())
    later = Window(now + 2 * HOUR, now + 3 * HOUR)
    first = _flow("first", "delivery", link, cap - 100, later)
    assert await _prepare(sessions, [_part("first", Window(now, now + HOUR))], [first]) == [True]
    crossing = _flow("crossing", "staging", link, 200, Window(now + 150 * 60, now + 4 * HOUR))
    before = _flow("before", "staging", link, 200, Window(now, now + 2 * HOUR))

    results = await _prepare(
        sessions,
        [_part("crossing", Window(now, now + HOUR)), _part("before", Window(now, now + HOUR))],
        [crossing, before],
    )

    assert isinstance(results[0], str) and f"link {link!r} bandwidth" in results[0]
    assert results[1] is True
    async with sessions() as session:
        assert await ledger_store.held_flows(session, request_id="req-crossing") == []
        assert await peer_ledger.get(session, reservation_id="rsv-crossing") is None
        assert await ledger_store.held_flows(session, request_id="req-before") == [before]
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
    on_link = calendar.profile(link_key(j))
    assert on_link.free_at(now) == cap - 200 and on_link.free_at(now + 2 * HOUR) == 100


async def test_release_and_expiry_delete_a_parts_flows_but_a_delivery_kept(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, k = _links(ledger)
    a, b = ledger.map.links[j].id, ledger.map.links[k].id
    now = epoch_s(utcnow())
    for name, expires_in in (("done", LATER), ("cancelled", LATER), ("lapsed", timedelta(0))):
        flows = [
            _flow(name, "staging", a, 1000, Window(now, now + HOUR)),
            _flow(name, "delivery", b, 1000, Window(now + 2 * HOUR, now + 3 * HOUR)),
        ]
        part = _part(name, Window(now, now + 2 * HOUR))
        assert await _prepare(sessions, [part], flows, expires_in) == [True]

    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id="rsv-done", keep_delivery=True)
        assert await peer_ledger.release_many(session, reservation_ids=["rsv-cancelled"]) == [True]
        assert await peer_ledger.expire(session, now=utcnow() + timedelta(seconds=1)) == [
            "rsv-lapsed"
        ]

    async with sessions() as session:
        kept = await ledger_store.held_flows(session, request_id="req-done")
        assert await ledger_store.held_flows(session, request_id="req-cancelled") == []
        assert await ledger_store.held_flows(session, request_id="req-lapsed") == []
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
        await ledger_store.check_invariants(session)
    assert [flow.kind for flow in kept] == ["delivery"]
    assert calendar.profile(link_key(j)).free_at(now) == int(ledger.link_cap_mbps[j])
    assert calendar.profile(link_key(k)).free_at(now + 2 * HOUR) == (
        int(ledger.link_cap_mbps[k]) - 1000
    )


async def test_a_repeated_prepare_takes_nothing_twice_and_other_flows_are_refused(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    link, cap = ledger.map.links[j].id, int(ledger.link_cap_mbps[j])
    now = epoch_s(utcnow())
    part = _part("job", Window(now, now + HOUR))
    staging = _flow("job", "staging", link, 500, Window(now, now + HOUR))

    assert await _prepare(sessions, [part, part], [staging]) == [True, False]
    assert await _prepare(sessions, [part], [staging]) == [False]
    async with sessions.begin() as session:
        assert not await peer_ledger.prepare(
            session, claim=part, expires_at=utcnow() + LATER, flows=[staging]
        )
    other = dataclasses.replace(staging, mbps=600)
    refused = await _prepare(sessions, [part], [other])
    assert isinstance(refused[0], str) and "other flows" in refused[0]

    async with sessions() as session:
        assert await ledger_store.held_flows(session, request_id="req-job") == [staging]
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
    assert calendar.profile(link_key(j)).free_at(now) == cap - 500


async def test_flows_of_no_part_are_refused_before_anything_is_taken(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    now = epoch_s(utcnow())
    stray = _flow("other", "staging", ledger.map.links[j].id, 10, Window(now, now + HOUR))
    with pytest.raises(LedgerStoreError, match="rsv-other"):
        await _prepare(sessions, [_part("job", Window(now, now + HOUR))], [stray])
    async with sessions() as session:
        assert await peer_ledger.get(session, reservation_id="rsv-job") is None


async def test_prepare_many_with_flows_runs_as_many_statements_for_one_part_as_for_three(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, k = _links(ledger)
    a, b = ledger.map.links[j].id, ledger.map.links[k].id
    now = epoch_s(utcnow())
    window = Window(now, now + HOUR)
    assert await _prepare(
        sessions, [_part("seed", window)], [_flow("seed", "stream", a, 1, window)]
    )

    counts = []
    for names in (["one"], ["two", "three", "four"]):
        claims = [_part(name, window) for name in names]
        flows = [
            flow
            for name in names
            for flow in (
                _flow(name, "staging", a, 1, window),
                _flow(name, "delivery", b, 1, window),
            )
        ]
        async with sessions.begin() as session:
            with _Statements(sessions) as statements:
                taken = await peer_ledger.prepare_many(
                    session, claims=claims, expires_at=utcnow() + LATER, flows=flows
                )
        assert taken == [True] * len(names)
        counts.append(statements.count)
    assert counts[0] == counts[1], counts


async def _reserve_with_flow(session: Any, link: str, site: str, now: int) -> None:
    """A held reservation of request `req-local` with a staging flow on `link`."""
    await create_tenant(session, tenant_id=TENANT, name="Acme")
    await create_user(session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT)
    await insert_requests(session, [NewRequest("req-local", TENANT, "alice", body={})])
    claim = _part("local", Window(now, now + HOUR), site_id=site, cpu_m=1000, counts_quota=True)
    flow = _flow("local", "staging", link, 100, Window(now, now + HOUR))
    await ledger_store.reserve_many(session, claims=[claim], flows=[flow])


@pytest.fixture(params=["postgres", "sqlite"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A database without any table: PostgreSQL, then SQLite."""
    if request.param == "postgres":
        return str(request.getfixturevalue("empty_postgres_url"))
    return f"sqlite:///{tmp_path / 'fresh.db'}"


async def test_migration_0020_keeps_the_flows_of_reservations_and_drops_those_of_parts_below(
    fresh_url: str, china: MapDocument
) -> None:
    url = fresh_url
    await upgrade_schema(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    link, other = china.links[-1].id, china.links[-2].id
    now = epoch_s(utcnow())

    async def flow_links() -> list[tuple[str, str]]:
        async with engine.connect() as connection:
            rows = await connection.execute(
                sa.text(
                    "SELECT f.reservation_id, l.link_id FROM reservation_flows AS f"
                    " JOIN reservation_flow_links AS l ON l.flow_id = f.id"
                    " ORDER BY f.reservation_id"
                )
            )
            return [(str(row[0]), str(row[1])) for row in rows]

    try:
        async with sessions.begin() as session:
            await registry.seed_map(session, document=china)
            await _reserve_with_flow(session, link, china.sites[0].id, now)
            assert await peer_ledger.prepare(
                session,
                claim=_part("part", Window(now, now + HOUR)),
                expires_at=utcnow() + LATER,
                flows=[_flow("part", "staging", other, 100, Window(now, now + HOUR))],
            )
        assert await flow_links() == [("rsv-local", link), ("rsv-part", other)]
        await downgrade_schema(url, revision="0019")
        assert await flow_links() == [("rsv-local", link)]
        await upgrade_schema(url, revision="0020")
        assert await flow_links() == [("rsv-local", link)]
    finally:
        await engine.dispose()
