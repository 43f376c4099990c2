"""A quote: the decision a submission would get now, and its alternatives; nothing is
stored or reserved."""

from typing import Any

from cnbrain.regional.schemas import Quote
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.intake import Intake


class QuoteRequest:
    def __init__(self, *, intake: Intake, decider: Decider) -> None:
        self._intake = intake
        self._decider = decider

    async def __call__(self, principal: Principal, body: dict[str, Any]) -> Quote:
        request = await self._intake.checked(principal, body)
        _, [decision], _, _ = await self._decider.decide([request])
        chosen = decision.site
        alternatives = [
            c
            for c in (decision.explanation.candidates if decision.explanation else ())
            if c.site != chosen
        ]
        return Quote(decision=decision, alternatives=alternatives)
