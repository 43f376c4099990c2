"""End to end on separate processes and PostgreSQL: every brain's ledger auditor releases a
held part whose request is not live at its source once the grace has passed, reports it, and
leaves alone the parts of a live cross-region request; a part of a request that completed at
its source keeps its delivery.

The orphans are written straight into the databases of the west and of the national brain:
a held part for a request that its source (the east) never had, with the `used` columns
raised by what it holds, so the ledger is otherwise consistent. The west asks the east
through the national brain (GetSourceLiveRequests), the national brain asks the east
itself (GetLiveRequests).
"""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest

from tests.databases import libpq_url
from tests.federation.ledgers import all_released_and_sound, check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

GRACE_S = 1.0


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("auditor"),
        regions=["east", "west"],
        database_prefix="cnbrain_feda",
        shared_env={"CNBRAIN_AUDIT_INTERVAL_S": "0.5", "CNBRAIN_AUDIT_GRACE_S": str(GRACE_S)},
    )


async def _inject_part(url: str, part_id: str, *, site: bool) -> datetime:
    """A held part `part_id` for request ghost-<part_id> of province ZJ (the east's) in the
    database at `url`: 1 CPU and 1 GiB on a site with room (`site`), or 100 Mbps on a
    backbone link with room; the `used` columns raised by as much. Its creation time."""
    connection = await asyncpg.connect(libpq_url(url))
    now = datetime.now(UTC)
    try:
        async with connection.transaction():
            site_id = link_id = None
            if site:
                site_id = await connection.fetchval(
                    "SELECT c.site_id FROM site_capacity c JOIN sites s ON s.id = c.site_id"
                    " WHERE s.province IN (SELECT code FROM jsonb_to_recordset("
                    "  (SELECT document::jsonb->'provinces' FROM map_frame)) AS p(code text,"
                    "  region text) WHERE region = 'west')"
                    " AND c.cpu_m_cap - c.cpu_m_used - c.cpu_m_external >= 1000"
                    " AND c.mem_mib_cap - c.mem_mib_used - c.mem_mib_external >= 1024"
                    " ORDER BY c.site_id LIMIT 1"
                )
                assert site_id is not None
                await connection.execute(
                    "UPDATE site_capacity SET cpu_m_used = cpu_m_used + 1000,"
                    " mem_mib_used = mem_mib_used + 1024 WHERE site_id = $1",
                    site_id,
                )
            else:
                link_id = await connection.fetchval(
                    "SELECT c.link_id FROM link_capacity c JOIN links l ON l.id = c.link_id"
                    " WHERE l.document::jsonb->>'owner' = 'national'"
                    " AND c.mbps_cap - c.mbps_used - c.mbps_external >= 100"
                    " ORDER BY c.link_id LIMIT 1"
                )
                assert link_id is not None
                await connection.execute(
                    "UPDATE link_capacity SET mbps_used = mbps_used + 100 WHERE link_id = $1",
                    link_id,
                )
            await connection.execute(
                "INSERT INTO peer_reservations (id, request_id, tenant_id, site_id, cpu_m,"
                " mem_mib, storage_gib, accelerator_milli, mbps, start_at, end_at,"
                " counts_quota, state, request, created_at)"
                " VALUES ($1, $2, 'acme', $3, $4, $5, 0, 0, $6, $7, $8, false, 'held',"
                " $9::json, $7)",
                part_id,
                f"ghost-{part_id}",
                site_id,
                1000 if site else 0,
                1024 if site else 0,
                0 if site else 100,
                now,
                now + timedelta(hours=1),
                json.dumps({"id": f"ghost-{part_id}", "source_province": "ZJ"}),
            )
            if link_id is not None:
                await connection.execute(
                    "INSERT INTO peer_reservation_links (reservation_id, link_id) VALUES ($1, $2)",
                    part_id,
                    link_id,
                )
    finally:
        await connection.close()
    return now


async def _state(url: str, part_id: str) -> dict[str, Any]:
    (found,) = await rows(
        url, "SELECT state, created_at, released_at FROM peer_reservations WHERE id = $1", part_id
    )
    return found


def _ledger_audit(federation: LocalFederation, region: str) -> dict[str, Any]:
    view: dict[str, Any] = get(federation, region, "/v1/ledger-audit")
    return view


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_auditors_release_orphaned_parts_after_the_grace_and_keep_live_ones(
    federation: LocalFederation,
) -> None:
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
    }
    live = submit(federation, "east", body)
    assert live["state"] == "placed", live
    live_parts = {
        name: [r["id"] for r in await unreleased(url)] for name, url in federation.databases.items()
    }
    assert live_parts["west"] and live_parts["national"], live_parts

    west, national = federation.databases["west"], federation.databases["national"]
    created = {
        "west": await _inject_part(west, "orphan-west", site=True),
        "national": await _inject_part(national, "orphan-national", site=False),
    }
    for url in federation.databases.values():
        await check_invariants(url)

    for name, part_id in (("west", "orphan-west"), ("national", "orphan-national")):
        url = federation.databases[name]

        async def released(url: str = url, part_id: str = part_id) -> dict[str, Any] | None:
            found = await _state(url, part_id)
            return found if found["state"] == "released" else None

        found = await until(released, f"{part_id} released", 30)
        assert found["released_at"] - created[name] >= timedelta(seconds=GRACE_S)
        entries = await rows(
            url,
            "SELECT actor, action, object_type, detail FROM audit_log WHERE object_id = $1",
            part_id,
        )
        assert [(e["actor"], e["action"], e["object_type"]) for e in entries] == [
            ("ledger-auditor", "part.release", "peer_reservation")
        ]
        assert "not live at its source east" in json.loads(entries[0]["detail"])["reason"]

    async def reported() -> dict[str, Any] | None:
        view = _ledger_audit(federation, "west")
        return view if view["repaired_total"].get("not_live_at_source") else None

    view = await until(reported, "the west's report of its repair")
    assert view["repaired_total"] == {"not_live_at_source": 1}
    assert view["grace_s"] == GRACE_S and view["audits"] >= 2

    async def clean() -> dict[str, Any] | None:
        view = _ledger_audit(federation, "west")
        return view if view["audited_at"] and not view["found"] else None

    await until(clean, "an audit of the west that finds nothing")

    for name, url in federation.databases.items():
        assert [r["id"] for r in await unreleased(url)] == live_parts[name], name
        await check_invariants(url)
    assert get(federation, "east", f"/v1/requests/{live['id']}")["state"] == "placed"

    assert cancel(federation, "east", live["id"])["state"] == "cancelled"
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


async def _add_delivery(url: str, part_id: str) -> None:
    """A delivery flow of 10 Mbps for part `part_id`, from an hour to two hours from now, on
    the first link of the database at `url`."""
    connection = await asyncpg.connect(libpq_url(url))
    now = datetime.now(UTC)
    try:
        async with connection.transaction():
            link_id = await connection.fetchval("SELECT id FROM links ORDER BY id LIMIT 1")
            await connection.execute(
                "INSERT INTO reservation_flows (id, reservation_id, kind, peer, mbps, start_at,"
                " end_at) VALUES ($1, $2, 'delivery', 'ZJ', 10, $3, $4)",
                f"{part_id}/0",
                part_id,
                now + timedelta(hours=1),
                now + timedelta(hours=2),
            )
            await connection.execute(
                "INSERT INTO reservation_flow_links (flow_id, position, link_id)"
                " VALUES ($1, 0, $2)",
                f"{part_id}/0",
                link_id,
            )
    finally:
        await connection.close()


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_part_of_a_request_that_completed_at_its_source_keeps_its_delivery(
    federation: LocalFederation,
) -> None:
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
    }
    done = submit(federation, "east", body)
    assert done["state"] == "placed", done
    west = federation.databases["west"]
    (part_id,) = [r["id"] for r in await unreleased(west)]
    await _add_delivery(west, part_id)
    # The job ended at the east, whose own end forgot the west's part.
    ended = await rows(
        federation.databases["east"],
        "UPDATE placement_requests SET state = 'completed' WHERE id = $1 RETURNING id",
        done["id"],
    )
    assert ended == [{"id": done["id"]}]

    async def released() -> dict[str, Any] | None:
        found = await _state(west, part_id)
        return found if found["state"] == "released" else None

    await until(released, f"{part_id} released", 30)
    flows = await rows(
        west, "SELECT kind FROM reservation_flows WHERE reservation_id = $1", part_id
    )
    assert flows == [{"kind": "delivery"}]
    await all_released_and_sound(federation.databases.values())


def test_the_ledger_audit_is_for_admins_only(federation: LocalFederation) -> None:
    url = federation.members["west"].url
    assert httpx.get(f"{url}/v1/ledger-audit", timeout=10).status_code == 401
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    user = httpx.post(
        f"{url}/v1/users", json={"name": "op", "role": "operator"}, headers=headers, timeout=10
    )
    assert user.status_code == 201, user.text
    created = httpx.post(
        f"{url}/v1/users/{user.json()['id']}/api-keys", headers=headers, timeout=10
    )
    assert created.status_code == 201, created.text
    key = created.json()["token"]
    assert httpx.get(f"{url}/v1/ledger-audit", headers=headers, timeout=10).status_code == 200
    answer = httpx.get(
        f"{url}/v1/ledger-audit", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert answer.status_code == 403, answer.text


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_part_whose_source_is_down_is_only_reported_until_the_source_answers(
    federation: LocalFederation,
) -> None:
    west = federation.databases["west"]
    federation.kill("east")
    try:
        created = await _inject_part(west, "orphan-east-down", site=True)

        async def unverified_long_after() -> dict[str, Any] | None:
            view = _ledger_audit(federation, "west")
            at = view["audited_at"]
            if at is None or datetime.fromisoformat(at) < created + timedelta(seconds=3 * GRACE_S):
                return None
            return view

        view = await until(unverified_long_after, "an audit of the west well after the grace")
        assert view["found"] == {"unverified": 1}, view
        assert view["repaired"] == {}
        assert "could not be asked" in view["findings"][0]["detail"]
        assert (await _state(west, "orphan-east-down"))["state"] == "held"
    finally:
        federation.start_member("east")

    async def released() -> dict[str, Any] | None:
        found = await _state(west, "orphan-east-down")
        return found if found["state"] == "released" else None

    await until(released, "the part released once the east answers", 60)
    await check_invariants(west)
