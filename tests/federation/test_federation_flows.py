"""End to end on separate processes and PostgreSQL, every site on a fast simulator (an hour a
second): a request whose data crosses the backbone is placed by the national brain, its job
is handed to its site's scheduler only once its staging is done, and when the job completes
every owner releases its part but keeps the delivery of the results, which holds its links
until its window ends."""

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.netmap.china import china_document
from cnbrain.netmap.files import write_map_document
from tests.federation.ledgers import check_invariants, rows
from tests.federation.member_requests import get, link_down, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

ROUND_TRIP = {
    "source_province": "SH",
    "resources": {"cpu": 4, "memory_gib": 8, "accelerator": {"model": "Ascend910B", "count": 8}},
    "duration_hours": 1,
    "start": "queue",
    "constraints": {"regions_allowed": ["west"]},
    "job": {"command": "true", "max_attempts": 1},
    "flows": {
        "staging": [{"source": {"site": "SH-dc-1"}, "volume_gb": 5, "max_rate_gbps": 10}],
        "delivery": [{"destination": {"site": "SH-dc-1"}, "volume_gb": 5, "max_rate_gbps": 10}],
    },
}
"""8 Ascend910B in the west for an hour (a second on the simulator), from Shanghai: 5 GB
staged from SH-dc-1 before it starts, 5 GB of results back there after it ends."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    workdir = tmp_path_factory.mktemp("flows")
    document = china_document()
    fast = BackendRef.model_validate({"kind": "simulator", "time_scale": 3600})
    sites = tuple(s.model_copy(update={"execution": fast}) for s in document.sites)
    map_file = workdir / "china-simulated.json"
    write_map_document(document.model_copy(update={"sites": sites}), map_file)
    yield from local_federation(
        workdir,
        database_prefix="cnbrain_fedflows",
        shared_env={"CNBRAIN_MAP": str(map_file), "CNBRAIN_EXECUTION_POLL_S": "0.2"},
    )


async def _flows(url: str, reservation_id: str) -> list[str]:
    found = await rows(
        url, "SELECT kind FROM reservation_flows WHERE reservation_id = $1", reservation_id
    )
    return sorted(r["kind"] for r in found)


async def _part_state(url: str, reservation_id: str) -> str | None:
    found = await rows(url, "SELECT state FROM peer_reservations WHERE id = $1", reservation_id)
    return found[0]["state"] if found else None


@pytest.mark.asyncio
async def test_a_completed_job_runs_after_its_staging_and_its_delivery_outlives_it(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    view = submit(federation, "east", ROUND_TRIP)

    async def ended() -> dict[str, Any] | None:
        now: dict[str, Any] = get(federation, "east", f"/v1/requests/{view['id']}")
        return now if now["state"] in {"completed", "failed", "rejected", "cancelled"} else None

    done = await until(ended, "the request ending", 60)
    assert done["state"] == "completed", done
    decision = done["decision"]
    starts_at = datetime.fromisoformat(decision["starts_at"])
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    events = httpx.get(
        f"{federation.members['east'].url}/v1/requests/{view['id']}/events",
        headers=headers,
        timeout=30,
    ).json()["events"]
    [handed] = [e for e in events if e["kind"] == "job_submitted"]
    assert datetime.fromisoformat(handed["at"]) >= starts_at, (handed, decision)
    reservation = decision["reservation_id"]

    async def released() -> bool | None:
        for url in databases.values():
            if await _part_state(url, reservation) not in {None, "released"}:
                return None
        return True

    await until(released, "every part released", 30)
    for owner in ("east", "national", "west"):
        assert await _part_state(databases[owner], reservation) == "released", owner
        assert await _flows(databases[owner], reservation) == ["delivery"], owner
    for url in databases.values():
        await check_invariants(url)


async def _flow_links(url: str, reservation_id: str, kind: str) -> list[str]:
    found = await rows(
        url,
        "SELECT l.link_id FROM reservation_flow_links AS l"
        " JOIN reservation_flows AS f ON f.id = l.flow_id"
        " WHERE f.reservation_id = $1 AND f.kind = $2 ORDER BY l.position",
        reservation_id,
        kind,
    )
    return [r["link_id"] for r in found]


@pytest.mark.asyncio
async def test_a_flow_is_routed_around_a_link_its_owner_has_down(
    federation: LocalFederation,
) -> None:
    """The west's operator reports down the first link of the best path from its gateway to
    Qingyang. The national brain asks the west for its segment of the flows' routes, and the
    west answers around that link: the request is placed there, its flows over the other
    path. On the national brain's own copy of the map the route crossed the link down, which
    has nothing free on the west's calendar: the request could not be planned there."""
    down, around = "GS-gw--GS-agg-1", "GS-gw--GS-agg-2"
    with link_down(federation, "west", down):
        view = submit(
            federation, "east", {**ROUND_TRIP, "constraints": {"regions_allowed": ["GS"]}}
        )

        async def ended() -> dict[str, Any] | None:
            now: dict[str, Any] = get(federation, "east", f"/v1/requests/{view['id']}")
            return now if now["state"] in {"completed", "failed", "rejected", "cancelled"} else None

        done = await until(ended, "the request ending", 60)
        assert done["state"] == "completed", done
        assert done["decision"]["site"] == "GS-hub-qingyang"
        reservation = done["decision"]["reservation_id"]
        links = await _flow_links(federation.databases["west"], reservation, "delivery")
        assert around in links and down not in links, links
