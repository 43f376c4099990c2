"""Operators' reports of links down on a brain without a data plane (`steering = off`): a
regional brain process on PostgreSQL, on the tiny map. New placements keep off a link
reported down, and a request that can reach its site only over links down is rejected; a
reservation held over a link reported down is re-routed (a `rerouted` event, a new
reservation on a path without it) or, with no other path, told why (`not_rerouted`); a
link reported down shows nothing free; one reported up again offers its bandwidth to new
placements, and the reservations held over links still down move onto it."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cnbrain.domain.decision import Decision
from tests.tiny_brain import submit_from_aa, tiny_brain

ACCESS_LINKS = {"AA-acc--AA-gw", "AA-acc--AA-agg1"}
"""AA's access node's two links: every path from AA's users starts on one of them."""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    """Staff's client of a regional brain on the tiny map that steers nothing."""
    with tiny_brain(
        tmp_path, prefix="cnbrain_link_reports", extra_env={"CNBRAIN_RESTEER_INTERVAL_S": "0.2"}
    ) as client:
        yield client


def submit(client: httpx.Client) -> dict[str, Any]:
    return submit_from_aa(client, gbps=1)


def links_of(decision: Decision) -> set[str]:
    assert decision.path is not None
    return {hop.link for segment in decision.path.segments for hop in segment.hops}


def report(client: httpx.Client, link: str, state: str) -> None:
    answer = client.put(f"/v1/links/{link}/state", json={"state": state, "reason": "test"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["kept_by"] == "standalone"


def wait_event(client: httpx.Client, request_id: str, kind: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        events = client.get(f"/v1/requests/{request_id}/events").json()["events"]
        found = [dict(e) for e in events if e["kind"] == kind]
        if found:
            return found[-1]
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event on {request_id}")


def wait_path(client: httpx.Client, request_id: str, link: str) -> None:
    """Wait until the request's path crosses `link` (it was re-routed onto it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        decision = client.get(f"/v1/requests/{request_id}").json()["decision"]
        if link in links_of(Decision.model_validate(decision)):
            return
        time.sleep(0.2)
    raise AssertionError(f"{request_id} was not re-routed onto {link}")


def free(client: httpx.Client) -> dict[str, float]:
    """Each AA access link's free bandwidth, in Gbps, as the brain's capacity view says."""
    answer = client.get("/v1/capacity/links")
    assert answer.status_code == 200, answer.text
    return {row["id"]: row["free_gbps"] for row in answer.json() if row["id"] in ACCESS_LINKS}


def test_links_reported_down_are_kept_off_by_new_placements_and_reroute_held_ones(
    client: httpx.Client,
) -> None:
    first = submit(client)
    assert first["state"] == "placed", first
    decision = Decision.model_validate(first["decision"])
    (taken,) = links_of(decision) & ACCESS_LINKS
    (other,) = ACCESS_LINKS - {taken}

    # The held reservation's access link is reported down: it moves to the other one.
    report(client, taken, "down")
    rerouted = wait_event(client, first["id"], "rerouted")
    moved = Decision.model_validate(client.get(f"/v1/requests/{first['id']}").json()["decision"])
    assert rerouted["detail"]["previous_reservation"] == decision.reservation_id
    assert moved.reservation_id == rerouted["detail"]["reservation"] != decision.reservation_id
    assert moved.site == decision.site
    assert other in links_of(moved) and taken not in links_of(moved)
    assert free(client) == {taken: 0.0, other: 99.0}

    # A new placement keeps off the link reported down.
    second = submit(client)
    assert second["state"] == "placed", second
    assert taken not in links_of(Decision.model_validate(second["decision"]))

    # Both access links down: the held reservations cannot move, and say why; a new
    # request cannot reach any site and is rejected.
    report(client, other, "down")
    for held in (first, second):
        told = wait_event(client, held["id"], "not_rerouted")
        assert other in told["detail"]["reason"], told
    third = submit(client)
    assert third["state"] == "rejected", third
    assert third["reason"], third
    assert "Gbps free" in third["reason"], third
    assert free(client) == {taken: 0.0, other: 0.0}

    # Reported up again: new placements may use it, and the held reservations move onto it.
    report(client, taken, "up")
    fourth = submit(client)
    assert fourth["state"] == "placed", fourth
    assert taken in links_of(Decision.model_validate(fourth["decision"]))
    for held in (first, second):
        wait_path(client, held["id"], taken)
    assert free(client) == {taken: 97.0, other: 0.0}
