"""A regional brain that steers (`steering = netlab`): what it places is steered on the
netlab, traffic follows the decision's hops; when a link of the path goes down in the netlab
the brain re-routes the reservation and the traffic follows the new path, or, when no path is
left, says why on the request; a cancel removes the steering."""

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import LabPlan, job_address, plan_lab
from cnbrain.domain.decision import Decision
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.dataplane.conftest import lab_up
from tests.dataplane.paths import grown, hops_of
from tests.dataplane.traffic import Receiver, send, settle
from tests.processes import brain_processes
from tests.tiny_map import tiny_map_raw

LAB = "cnls"
USERS = f"{LAB}-AA-acc@users"


@pytest.fixture
def brain(tmp_path: Path, tiny_map: ComputeNetworkMap) -> Iterator[tuple[LabPlan, httpx.Client]]:
    """The tiny map's lab, and a regional brain on the tiny map that steers onto it."""
    map_file = tmp_path / "tiny.yaml"
    write_map_document(MapDocument.model_validate(tiny_map_raw()), map_file)
    token = f"ck_{secrets.token_hex(8)}.{secrets.token_urlsafe(32)}"
    database = asyncio.run(create_postgres_database("cnbrain_steering"))
    try:
        with (
            lab_up(plan_lab(tiny_map, name=LAB)) as plan,
            brain_processes(
                1,
                database_url=database,
                redis_url=asyncio.run(require_redis()),
                map_spec=str(map_file),
                admin_token=token,
                workdir=tmp_path,
                extra_env={
                    "CNBRAIN_STEERING": "netlab",
                    "CNBRAIN_NETLAB": LAB,
                    "CNBRAIN_RESTEER_INTERVAL_S": "0.2",
                },
            ) as [url],
            httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            ) as client,
        ):
            made = client.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
            assert made.status_code == 201, made.text
            yield plan, client
    finally:
        asyncio.run(drop_postgres_database(database))


def submit(client: httpx.Client) -> tuple[str, Decision]:
    answer = client.post(
        "/v1/requests",
        json={
            "tenant": "acme",
            "source_province": "AA",
            "resources": {"cpu": 1, "memory_gib": 1},
            "duration_hours": 1,
            "constraints": {"min_bandwidth_gbps": 0.01},
        },
    )
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["state"] == "placed", body
    return body["id"], Decision.model_validate(body["decision"])


def decision_of(client: httpx.Client, request_id: str) -> Decision:
    return Decision.model_validate(client.get(f"/v1/requests/{request_id}").json()["decision"])


def wait_event(client: httpx.Client, request_id: str, kind: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = client.get(f"/v1/requests/{request_id}/events").json()["events"]
        found = [e for e in events if e["kind"] == kind]
        if found:
            return dict(found[-1])
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event on {request_id}: {events}")


def traffic(lab: LabPlan, decision: Decision, count: int) -> tuple[int, dict[Any, int]]:
    site = lab.host_of[str(decision.site)]
    assert site.sid is not None
    job = job_address(site.sid, decision.request_id)
    before = linux.hop_counts(lab)
    receiver = Receiver(site.namespace, job)
    send(USERS, job, count=count)
    got = receiver.result().packets
    settle()
    return got, grown(before, linux.hop_counts(lab))


def last_link(decision: Decision) -> tuple[str, str]:
    assert decision.path is not None
    hop = decision.path.segments[-1].hops[-1]
    return hop.from_node, hop.to_node


def test_a_brain_steers_what_it_places_and_reroutes_it_when_a_link_goes_down(
    brain: tuple[LabPlan, httpx.Client],
) -> None:
    lab, client = brain
    request_id, decision = submit(client)
    got, hops = traffic(lab, decision, 100)
    assert got == 100
    assert hops == dict.fromkeys(hops_of(decision), 100)

    # The link that attaches the site on the path goes down in the netlab.
    cut = last_link(decision)
    linux.set_link(lab, *cut, up=False)
    rerouted = wait_event(client, request_id, "rerouted")
    moved = decision_of(client, request_id)

    assert rerouted["detail"]["previous_reservation"] == decision.reservation_id
    assert moved.reservation_id == rerouted["detail"]["reservation"] != decision.reservation_id
    assert moved.site == decision.site
    assert lab.wire(*cut).link not in {link for _, link in hops_of(moved)}
    got, hops = traffic(lab, moved, 100)
    assert got == 100
    assert hops == dict.fromkeys(hops_of(moved), 100)

    # Then the site's other link goes down too: no path is left, and the request says so.
    linux.set_link(lab, *last_link(moved), up=False)
    refused = wait_event(client, request_id, "not_rerouted")
    assert f"no other path to {decision.site}" in refused["detail"]["reason"]
    assert decision_of(client, request_id).reservation_id == moved.reservation_id

    cancelled = client.post(f"/v1/requests/{request_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    routes = linux.Headends()
    try:
        site = lab.host_of[str(decision.site)]
        assert site.sid is not None
        job = job_address(site.sid, request_id)
        assert all(routes.installed(h.namespace, job) is None for h in lab.host_of.values())
    finally:
        routes.close()
