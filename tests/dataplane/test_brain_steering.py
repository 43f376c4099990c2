"""A regional brain that steers (`steering = netlab`): what it places is steered on the
netlab, traffic follows the decision's hops; when a link of the path goes down in the netlab
the brain re-routes the reservation and the traffic follows the new path, or, when no path is
left (or the new path cannot be steered), says why on the request, once, and keeps its
reservation; a path whose link comes back up carries its traffic again; a request whose path
cannot be steered is rejected with a reason that names nothing of the data plane; a cancel
removes the steering. An operator's report of a link down (`PUT /v1/links/{id}/state`)
re-routes what crosses it as the data plane's link state does, though the netlab's link
stays up; a report of an unknown link, or by a tenant's key, is refused."""

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import LabPlan, plan_lab
from cnbrain.domain.decision import STEERING_REASON, Decision
from cnbrain.netmap.compute_map import ComputeNetworkMap
from tests.dataplane.conftest import lab_up
from tests.dataplane.paths import hops_of
from tests.dataplane.traffic import job_of
from tests.dataplane.traffic import traffic as traffic_from
from tests.tiny_brain import submit_from_aa, tiny_brain

pytestmark = pytest.mark.usefixtures("lab_tools")

LAB = "cnls"
USERS = f"{LAB}-AA-acc@users"


@pytest.fixture
def brain(tmp_path: Path, tiny_map: ComputeNetworkMap) -> Iterator[tuple[LabPlan, httpx.Client]]:
    """The tiny map's lab, and a regional brain on the tiny map that steers onto it."""
    steering = {
        "CNBRAIN_STEERING": "netlab",
        "CNBRAIN_NETLAB": LAB,
        "CNBRAIN_RESTEER_INTERVAL_S": "0.2",
    }
    with (
        lab_up(plan_lab(tiny_map, name=LAB)) as plan,
        tiny_brain(tmp_path, prefix="cnbrain_steering", extra_env=steering) as client,
    ):
        yield plan, client


def submit_body(client: httpx.Client) -> dict[str, Any]:
    return submit_from_aa(client, gbps=0.01)


def submit(client: httpx.Client) -> tuple[str, Decision]:
    body = submit_body(client)
    assert body["state"] == "placed", body
    return body["id"], Decision.model_validate(body["decision"])


def decision_of(client: httpx.Client, request_id: str) -> Decision:
    return Decision.model_validate(client.get(f"/v1/requests/{request_id}").json()["decision"])


def events_of(client: httpx.Client, request_id: str, kind: str) -> list[dict[str, Any]]:
    events = client.get(f"/v1/requests/{request_id}/events").json()["events"]
    return [dict(e) for e in events if e["kind"] == kind]


def wait_event(
    client: httpx.Client, request_id: str, kind: str, *, count: int = 1
) -> dict[str, Any]:
    """The last `kind` event of the request, once it has `count` of them."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = events_of(client, request_id, kind)
        if len(found) >= count:
            return found[-1]
        time.sleep(0.2)
    raise AssertionError(f"not {count} {kind} events on {request_id}: {found}")


def traffic(lab: LabPlan, decision: Decision, count: int) -> tuple[int, dict[Any, int]]:
    return traffic_from(lab, decision, USERS, count)


def first_link(decision: Decision) -> tuple[str, str]:
    assert decision.path is not None
    hop = decision.path.segments[0].hops[0]
    return hop.from_node, hop.to_node


def last_link(decision: Decision) -> tuple[str, str]:
    assert decision.path is not None
    hop = decision.path.segments[-1].hops[-1]
    return hop.from_node, hop.to_node


def drop_policers(namespace: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "delete", "table", "ip6", linux.TABLE],
        check=True,
    )


def restore_policers(namespace: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=linux.POLICERS, text=True
    ).check_returncode()


def routed(lab: LabPlan, job: str) -> set[str | None]:
    """The reservations whose routes to `job` the lab's routers hold."""
    routes = linux.Headends()
    try:
        return {routes.installed(h.namespace, job) for h in lab.host_of.values()} - {None}
    finally:
        routes.close()


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
    assert routed(lab, job_of(lab, decision)) == set()


def test_a_reroute_whose_new_path_cannot_be_steered_keeps_its_reservation(
    brain: tuple[LabPlan, httpx.Client],
) -> None:
    lab, client = brain
    request_id, decision = submit(client)
    headend = lab.host_of[first_link(decision)[0]].namespace
    # The headend's router can take no policer: nothing new can be steered there.
    drop_policers(headend)

    refused = submit_body(client)
    assert refused["state"] == "rejected", refused
    assert refused["reason"] == STEERING_REASON

    cut = last_link(decision)
    linux.set_link(lab, *cut, up=False)
    told = wait_event(client, request_id, "not_rerouted")
    assert told["detail"]["reason"] == (
        f"link {lab.wire(*cut).link} went down; the new path could not be established"
    )
    assert events_of(client, request_id, "rerouted") == []
    assert decision_of(client, request_id).reservation_id == decision.reservation_id
    assert routed(lab, job_of(lab, decision)) == {decision.reservation_id}

    # Once the router takes policers again, the brain re-routes the reservation.
    restore_policers(headend)
    rerouted = wait_event(client, request_id, "rerouted")
    moved = decision_of(client, request_id)
    assert rerouted["detail"]["previous_reservation"] == decision.reservation_id
    assert moved.reservation_id == rerouted["detail"]["reservation"]
    got, hops = traffic(lab, moved, 100)
    assert got == 100
    assert hops == dict.fromkeys(hops_of(moved), 100)
    assert len(events_of(client, request_id, "not_rerouted")) == 1


def test_a_path_whose_first_link_comes_back_up_carries_its_traffic_again(
    brain: tuple[LabPlan, httpx.Client],
) -> None:
    lab, client = brain
    request_id, decision = submit(client)

    # The access router's link on the path goes down: the path moves to its other link.
    linux.set_link(lab, *first_link(decision), up=False)
    wait_event(client, request_id, "rerouted")
    moved = decision_of(client, request_id)
    assert first_link(moved) != first_link(decision)

    # Its other link goes down too: no path is left, and the kernel drops the headend's
    # route over that link.
    linux.set_link(lab, *first_link(moved), up=False)
    wait_event(client, request_id, "not_rerouted")
    assert routed(lab, job_of(lab, moved)) == set()

    # That link comes back up: the brain installs the headend again, and the traffic flows
    # (a burst sent while the route goes back in arrives only in part).
    linux.set_link(lab, *first_link(moved), up=True)
    deadline = time.monotonic() + 30
    got, hops = traffic(lab, moved, 20)
    while got < 20 and time.monotonic() < deadline:
        got, hops = traffic(lab, moved, 20)
    assert got == 20
    assert hops == dict.fromkeys(hops_of(moved), 20)
    assert len(events_of(client, request_id, "not_rerouted")) == 1

    # Down again: the request is told again.
    linux.set_link(lab, *first_link(moved), up=False)
    wait_event(client, request_id, "not_rerouted", count=2)

    cancelled = client.post(f"/v1/requests/{request_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert routed(lab, job_of(lab, moved)) == set()


def tenant_key(client: httpx.Client) -> str:
    """The API key of a new user of tenant acme."""
    user = client.post("/v1/users", json={"name": "ann", "role": "tenant-user", "tenant": "acme"})
    assert user.status_code == 201, user.text
    key = client.post(f"/v1/users/{user.json()['id']}/api-keys")
    assert key.status_code == 201, key.text
    token: str = key.json()["token"]
    return token


def test_an_operators_report_of_a_link_down_reroutes_what_crosses_it(
    brain: tuple[LabPlan, httpx.Client],
) -> None:
    lab, client = brain
    request_id, decision = submit(client)
    cut = lab.wire(*last_link(decision)).link
    assert cut is not None

    reported = client.put(
        f"/v1/links/{cut}/state", json={"state": "down", "reason": "the site's uplink is cut"}
    )
    assert reported.status_code == 200, reported.text
    assert reported.json() | {"reported_at": None} == {
        "link": cut,
        "owner": "east",
        "state": "down",
        "reason": "the site's uplink is cut",
        "kept_by": "standalone",
        "reported_at": None,
    }
    rerouted = wait_event(client, request_id, "rerouted")
    moved = decision_of(client, request_id)

    # The netlab's link is up: the report alone moved the path off it.
    assert linux.links_down(lab, [cut]) == set()
    assert rerouted["detail"]["reason"] == f"link {cut} went down"
    assert rerouted["detail"]["previous_reservation"] == decision.reservation_id
    assert moved.reservation_id == rerouted["detail"]["reservation"]
    assert moved.site == decision.site
    assert cut not in {link for _, link in hops_of(moved)}
    got, hops = traffic(lab, moved, 100)
    assert got == 100
    assert hops == dict.fromkeys(hops_of(moved), 100)
    audit = client.get("/v1/audit", params={"limit": 20}).json()["items"]
    assert any(
        e["action"] == "link.state_reported"
        and e["object_id"] == cut
        and e["detail"] == {"state": "down", "reason": "the site's uplink is cut"}
        for e in audit
    ), audit

    # Reported up again: the path stays where it was moved.
    again = client.put(f"/v1/links/{cut}/state", json={"state": "up"})
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "up"
    assert decision_of(client, request_id).reservation_id == moved.reservation_id
    assert len(events_of(client, request_id, "rerouted")) == 1


def test_a_report_of_a_links_state_is_refused_for_an_unknown_link_or_a_tenant(
    brain: tuple[LabPlan, httpx.Client],
) -> None:
    lab, client = brain
    link = lab.wire("AA-acc", "AA-gw").link
    body = {"state": "down", "reason": "maintenance"}

    unknown = client.put("/v1/links/AA-acc--nowhere/state", json=body)
    assert unknown.status_code == 404, unknown.text
    assert "AA-acc--nowhere" in unknown.json()["detail"]
    tenant = client.put(
        f"/v1/links/{link}/state",
        json=body,
        headers={"Authorization": f"Bearer {tenant_key(client)}"},
    )
    assert tenant.status_code == 403, tenant.text
    for wrong in ({"state": "sideways"}, {"state": "down", "reason": "x" * 501}, {"down": True}):
        refused = client.put(f"/v1/links/{link}/state", json=wrong)
        assert refused.status_code == 422, (wrong, refused.text)
    audit = client.get("/v1/audit", params={"limit": 50}).json()["items"]
    assert not [e for e in audit if e["action"] == "link.state_reported"]
