"""Reading a running federation's cross-region paths as they are re-routed: the request placed
from AA on CC-hub, its decision and events at its source region (east), and the links every
owner's ledger holds for its part."""

import asyncio
import time
from typing import Any

from sqlalchemy import text

from cnbrain.domain.decision import Decision, Hop
from cnbrain.storage.database import create_engine
from tests.federation.member_requests import get, submit
from tests.federation_processes import LocalFederation
from tests.tiny_map import ascend_body


def placed(brains: LocalFederation) -> Decision:
    """A request from AA placed on CC-hub by the federation, over three segments."""
    view = submit(brains, "east", ascend_body(1, constraints={"min_bandwidth_gbps": 0.01}))
    assert view["state"] == "placed", view
    decision = Decision.model_validate(view["decision"])
    assert decision.path is not None
    assert [s.owner for s in decision.path.segments] == ["east", "national", "west"]
    return decision


def decision_at_source(brains: LocalFederation, request_id: str) -> Decision:
    return Decision.model_validate(get(brains, "east", f"/v1/requests/{request_id}")["decision"])


def wait_events(
    brains: LocalFederation, request_id: str, kind: str, count: int, *, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """The request's `kind` events at its source region, once it has `count`."""
    deadline = time.monotonic() + timeout_s
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        events = get(brains, "east", f"/v1/requests/{request_id}/events")["events"]
        found = [e for e in events if e["kind"] == kind]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not {count} {kind} events on {request_id}: {found}")


def wait_rerouted(brains: LocalFederation, request_id: str, count: int) -> list[dict[str, Any]]:
    return wait_events(brains, request_id, "rerouted", count)


def read_rows(url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of `query` in the database at `url`."""

    async def read() -> list[tuple[Any, ...]]:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                return [tuple(row) for row in await connection.execute(text(query), params)]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def part_links(brains: LocalFederation, reservation_id: str) -> dict[str, set[str]]:
    """The links each owner's ledger holds for its part of the reservation."""
    return {
        name: {
            str(link)
            for (link,) in read_rows(
                url,
                "SELECT link_id FROM peer_reservation_links WHERE reservation_id = :reservation",
                reservation=reservation_id,
            )
        }
        for name, url in brains.databases.items()
    }


def links_of(hops: tuple[Hop, ...]) -> set[str]:
    return {hop.link for hop in hops}
