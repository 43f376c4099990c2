"""A quote: the decision a submission would get now, and its alternatives; nothing is
stored or reserved."""

from typing import Any

from cnbrain.cache.base import Caches
from cnbrain.regional.schemas import Quote
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.submit import too_many


class QuoteRequest:
    """A quote counts against the caller's tenant's rate limit (`limit_per_minute`), as a
    submission does."""

    def __init__(
        self, *, intake: Intake, decider: Decider, caches: Caches, limit_per_minute: int
    ) -> None:
        self._intake = intake
        self._decider = decider
        self._rate_limiter = caches.rate_limiter
        self._limit = limit_per_minute

    async def __call__(self, principal: Principal, body: dict[str, Any]) -> Quote:
        """Raises Exhausted over the rate limit, and what `Intake.checked` raises."""
        key = principal.tenant_id or principal.user_id
        verdict = await self._rate_limiter.hit(tenant_id=key, limit_per_minute=self._limit)
        if not verdict.allowed:
            raise too_many(self._limit, verdict.retry_after_s)
        request = await self._intake.checked(principal, body)
        _, [decision], _, _ = await self._decider.decide([request])
        chosen = decision.site
        alternatives = [
            c
            for c in (decision.explanation.candidates if decision.explanation else ())
            if c.site != chosen
        ]
        return Quote(decision=decision, alternatives=alternatives)
