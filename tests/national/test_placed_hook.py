"""The national placer's `placed` hook (the metrics' count of placements) runs once the
answer is given: a hook that raises leaves the answer of the concurrent calls for the same
request whole, and its error is its own, not an error of the answer."""

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, cast

import pytest

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.national.orchestrator import CrossRegionPlacer
from cnbrain.national.settings import NationalSettings
from tests.federation.member_requests import GPU_REQUEST

pytestmark = pytest.mark.asyncio


class Kept:
    """The national ledger's reads, holding a committed decision for every request asked."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def held_decisions(self, request_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        self.asked.set()
        await self.answer.wait()
        return {rid: self.decision.model_dump(mode="json") for rid in request_ids}

    async def owners_of(self, reservation_id: str) -> list[str] | None:
        return None

    async def nationally_limited(self, tenant_ids: Iterable[str]) -> set[str]:
        return set()


async def test_a_hook_that_raises_leaves_the_shared_answer_whole() -> None:
    request = PlacementRequest.model_validate(GPU_REQUEST)
    decision = Decision(request_id=request.id, status=DecisionStatus.PLACED, policy="p")
    kept = Kept(decision)

    def placed(status: str) -> None:
        raise RuntimeError(f"the hook failed on {status}")

    placer = CrossRegionPlacer(
        settings=NationalSettings(),
        live_map=cast(Any, None),  # an earlier decision answers: the map is not read
        directory=cast(Any, None),
        coordinator=cast(Any, None),
        held=kept,
        placed=placed,
    )
    first = asyncio.create_task(placer.place(request, "east"))
    await kept.asked.wait()
    again = asyncio.create_task(placer.place(request, "east"))  # shares the first's answer
    await asyncio.sleep(0)
    kept.answer.set()
    assert await again == decision
    with pytest.raises(RuntimeError, match="the hook failed on placed"):
        await first
