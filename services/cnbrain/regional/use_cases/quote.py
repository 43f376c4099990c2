"""A quote: the decision a submission would get now, and its alternatives; nothing is
stored or reserved.

A quote is decided as a submission is (`placing.Placer`): on the brain's snapshot, again on
a fresh one when rejected on a cached one, and, in a federation, by the national brain
(`NationalClient.quote`) whenever a submission would be escalated (`placing.needs_national`).
"""

from collections.abc import Callable
from typing import Any

from cnbrain.cache.base import Caches
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.regional.schemas import Quote
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.placing import needs_national
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.regional.use_cases.submit import too_many

BY_NATIONAL = "made by the national brain, across regions, as a submission here would be placed"
"""The quote's note when the national brain made it."""

NATIONAL_UNREACHABLE = (
    "the national brain could not be reached: a submission here would be rejected the same way"
)
"""The quote's note when it needed the national brain and could not reach it."""


class QuoteRequest:
    """A quote counts against the caller's tenant's rate limit (`limit_per_minute`), as a
    submission does. `forget()` drops the brain's cached snapshot; `national` is the national
    brain of a federated brain (None: standalone)."""

    def __init__(
        self,
        *,
        intake: Intake,
        decider: Decider,
        caches: Caches,
        limit_per_minute: int,
        forget: Callable[[], None],
        national: NationalClient | None = None,
    ) -> None:
        self._intake = intake
        self._decider = decider
        self._rate_limiter = caches.rate_limiter
        self._limit = limit_per_minute
        self._forget = forget
        self._national = national

    async def __call__(self, principal: Principal, body: dict[str, Any]) -> Quote:
        """Raises Exhausted over the rate limit, and what `Intake.checked` raises."""
        key = principal.tenant_id or principal.user_id
        verdict = await self._rate_limiter.hit(tenant_id=key, limit_per_minute=self._limit)
        if not verdict.allowed:
            raise too_many(self._limit, verdict.retry_after_s)
        request = await self._intake.checked(principal, body)
        if request.moves_data:
            raise Invalid(
                "a quote does not plan flows over time: submit the request, and the queue's "
                "plan gives its estimated start",
                field="flows",
            )
        decision, notes = await self._decide(request)
        chosen = decision.site
        alternatives = [
            c
            for c in (decision.explanation.candidates if decision.explanation else ())
            if c.site != chosen
        ]
        return Quote(decision=decision, alternatives=alternatives, notes=notes)

    async def _decide(self, request: PlacementRequest) -> tuple[Decision, list[str]]:
        """The decision a submission of `request` would get now, and the quote's notes."""
        national = self._national
        if national is not None and request.national_optimum:
            return await self._by_national(national, request)
        for attempt in range(2):
            _, [decision], _, fresh = await self._decider.decide([request])
            if national is not None and needs_national(request, decision, fresh):
                return await self._by_national(national, request)
            if fresh or attempt or decision.status is DecisionStatus.PLACED:
                break
            self._forget()  # a rejection on a cached snapshot is not final
        return decision, []

    @staticmethod
    async def _by_national(
        national: NationalClient, request: PlacementRequest
    ) -> tuple[Decision, list[str]]:
        answer = await national.quote(request)
        return answer.decision, [BY_NATIONAL if answer.reached else NATIONAL_UNREACHABLE]
