"""End to end on separate processes and PostgreSQL: the metrics of every brain move with the
federation's work. The national brain serves `GET /metrics` on its HTTP listener, each
regional brain on its metrics listener (its REST port has none); after two
cross-region submissions on the east (placed at a western hub: parts in the east, the
national brain and the west), one submission forwarded from the east to the west, and the
cancels, the national brain's two-phase commits, gRPC calls, forwarded calls, placements
and regions moved, and so did the regional brains' decisions, escalations, ledger-service
parts, reservations and gRPC calls."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cnbrain import __version__
from tests.federation.member_requests import GPU_REQUEST
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until
from tests.processes import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

NATIONAL = "cnbrain.v1.NationalBrainService"
REGIONAL = "cnbrain.v1.RegionalBrainService"
LEDGER = "cnbrain.v1.LedgerService"
WEST_CPU: dict[str, Any] = {
    "source_province": "NX",
    "resources": {"cpu": 2, "memory_gib": 4},
    "duration_hours": 1,
}
"""A small job from a province of the west, which the east forwards there."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("metrics"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedmetrics",
        national_env={"CNBRAIN_HTTP_PORT": str(free_port())},
        shared_env={"CNBRAIN_TENANCY_INTERVAL_S": "0.5", "CNBRAIN_METRICS_MAX_AGE_S": "0"},
    )


def _metrics_url(federation: LocalFederation, name: str) -> str:
    member = federation.members[name]
    if member.rest_port is not None:
        assert httpx.get(f"{member.url}/metrics", timeout=10).status_code == 404
        return f"http://127.0.0.1:{member.metrics_port}/metrics"
    return f"http://127.0.0.1:{member.env['CNBRAIN_HTTP_PORT']}/metrics"


def _scrape(federation: LocalFederation, name: str) -> Samples:
    answer = httpx.get(_metrics_url(federation, name), timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted(labels.items())))


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = _key(name, **labels)
    return after.get(key, 0.0) - before.get(key, 0.0)


def _tenant_key(federation: LocalFederation) -> dict[str, str]:
    """The key of a tenant user made on the east, through the federation's tenancy."""
    url, admin = (
        federation.members["east"].url,
        {"Authorization": f"Bearer {federation.admin_token}"},
    )
    made = httpx.post(f"{url}/v1/tenants", json={"id": "gauged", "name": "g"}, headers=admin)
    assert made.status_code == 201, made.text
    user = httpx.post(
        f"{url}/v1/users",
        json={"name": "gauged-user", "role": "tenant-user", "tenant": "gauged"},
        headers=admin,
    )
    assert user.status_code == 201, user.text
    key = httpx.post(f"{url}/v1/users/{user.json()['id']}/api-keys", headers=admin)
    assert key.status_code == 201, key.text
    return {"Authorization": f"Bearer {key.json()['token']}"}


def _submit(federation: LocalFederation, key: dict[str, str], body: dict[str, Any]) -> str:
    """Submit `body` on the east; the id of the request placed."""
    answer = httpx.post(
        f"{federation.members['east'].url}/v1/requests",
        json={k: v for k, v in body.items() if k != "id"},
        headers=key,
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["state"] == "placed", answer.text
    request_id: str = answer.json()["id"]
    return request_id


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_national_and_regional_series_move_with_cross_region_work(
    federation: LocalFederation,
) -> None:
    key = _tenant_key(federation)
    east = federation.members["east"].url

    async def west_knows_the_key() -> bool | None:  # a forwarded read: 404 once it does
        answer = httpx.get(f"{east}/v1/requests/none-such", headers=key, timeout=10)
        return True if answer.status_code == 404 else None

    await until(west_knows_the_key, "the west taking the tenant's key")
    names = ("national", "east", "west")
    before = {name: _scrape(federation, name) for name in names}

    placed = [_submit(federation, key, GPU_REQUEST) for _ in range(2)]
    forwarded = _submit(federation, key, WEST_CPU)
    after = {name: _scrape(federation, name) for name in names}

    def moved(name: str, metric: str, **labels: str) -> float:
        return _moved(before[name], after[name], metric, **labels)

    # The national brain: two placements, three owners' parts each, prepared and committed.
    assert moved("national", "cnbrain_cross_region_placements_total", outcome="placed") == 2
    for step in ("prepare", "commit"):
        assert moved("national", "cnbrain_two_phase_parts_total", step=step, outcome="ok") == 6
        for failed in ("refused", "unavailable"):
            assert (
                moved("national", "cnbrain_two_phase_parts_total", step=step, outcome=failed) == 0
            )
    place = {"service": NATIONAL, "method": "PlaceCrossRegion"}
    assert moved("national", "cnbrain_grpc_server_started_total", **place) == 2
    assert moved("national", "cnbrain_grpc_server_handled_total", **place, code="OK") == 2
    assert moved("national", "cnbrain_grpc_server_handling_seconds_count", **place) == 2
    assert moved("national", "cnbrain_grpc_server_handling_seconds_sum", **place) > 0
    submit = {"operation": "submit", "outcome": "2xx"}
    assert moved("national", "cnbrain_forwarded_calls_total", **submit) == 1
    assert moved("national", "cnbrain_reservations", kind="part", state="held") == 2
    national = after["national"]
    assert national[_key("cnbrain_regions_known")] == 2
    assert national[_key("cnbrain_regions_up")] == 2
    assert national[_key("cnbrain_region_up", region="east")] == 1
    assert national[_key("cnbrain_two_phase_releases_owed")] == 0
    assert (
        national[_key("cnbrain_brain_info", brain="national", region="", version=__version__)] == 1
    )

    # The east decided its two cross-region requests through the national brain; the one it
    # forwarded is the west's decision.
    across = {"outcome": "placed", "reason": "across_provinces"}
    assert moved("east", "cnbrain_decisions_total", **across) == 2
    assert moved("east", "cnbrain_escalations_total", outcome="placed") == 2
    assert moved("west", "cnbrain_decisions_total", outcome="placed", reason="local") == 1
    assert (
        sum(
            moved("east", "cnbrain_decisions_total", **dict(labels))
            for metric, labels in after["east"]
            if metric == "cnbrain_decisions_total"
        )
        == 2
    )
    for region in ("east", "west"):
        for step in ("prepare", "commit"):
            parts = {"step": step, "outcome": "ok"}
            assert moved(region, "cnbrain_ledger_parts_total", **parts) == 2
        assert moved(region, "cnbrain_reservations", kind="part", state="held") == 2
        prepare = {"service": LEDGER, "method": "Prepare", "code": "OK"}
        assert moved(region, "cnbrain_grpc_server_handled_total", **prepare) >= 1
    serve = {"service": REGIONAL, "method": "ServeForwarded", "code": "OK"}
    assert moved("west", "cnbrain_grpc_server_handled_total", **serve) == 1
    candidates = {"service": REGIONAL, "method": "GetCandidates", "code": "OK"}
    assert moved("west", "cnbrain_grpc_server_handled_total", **candidates) >= 1
    assert moved("west", "cnbrain_reservations", kind="local", state="held") == 1

    # Cancelling releases every part: three owners' of each of the two.
    for request_id in (*placed, forwarded):
        answer = httpx.post(f"{east}/v1/requests/{request_id}/cancel", headers=key, timeout=30)
        assert answer.status_code == 200, answer.text
    released = _scrape(federation, "national")
    release = {"step": "release", "outcome": "ok"}
    assert _moved(after["national"], released, "cnbrain_two_phase_parts_total", **release) == 6
    assert released[_key("cnbrain_reservations", kind="part", state="held")] == 0
    forwarded_cancel = {"operation": "cancel", "outcome": "2xx"}
    assert (
        _moved(after["national"], released, "cnbrain_forwarded_calls_total", **forwarded_cancel)
        == 1
    )
    health = httpx.get(_metrics_url(federation, "national").replace("/metrics", "/healthz"))
    assert health.status_code == 200 and health.json()["status"] == "ok"
