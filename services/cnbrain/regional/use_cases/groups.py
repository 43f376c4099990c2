"""Submitting a group of related requests: placed together (one site or one province) or
spread (each on a site of its own), all of them or none.

The members are checked like any request, then decided together on the brain's snapshot
(`cnbrain.placement.groups`), and one unit of work stores them, takes every reservation and
writes every outcome: a crash before it commits leaves nothing (the caller had no answer), so
no member is ever stored without the others, and none is placed without the others. A
conflict with a concurrent writer decides the group again on a fresh snapshot, up to the
brain's `placement_attempts`; then, or when the group does not fit, every member is stored
rejected with the group's reason.

A group is decided in this region: each member must start now, move no data and not ask for
the national optimum, and in a federation a group whose members would leave the region's
provinces is rejected (a group of another region's provinces is forwarded to it before it
gets here: `regional.forwarding`).
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.cache.base import Caches
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.netmap.arrays import MapArrays
from cnbrain.regional.schemas import RequestGroupBody, RequestGroupView
from cnbrain.regional.security import Principal
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.new_requests import Submission
from cnbrain.regional.use_cases.outcomes import Outcome
from cnbrain.regional.use_cases.placing import Placer, needs_national
from cnbrain.regional.use_cases.submit import Decided, too_many
from cnbrain.storage import ledger_store, requests

OUTSIDE_REGION = "a group is placed within this region's provinces, and this one would leave them"


class SubmitGroup:
    """`federated`: the brain is a member of a federation (its groups stay in its region);
    `forget()` drops the cached snapshot; `decided` is told of every member decided."""

    def __init__(
        self,
        *,
        settings: Settings,
        caches: Caches,
        sessions: async_sessionmaker[AsyncSession],
        intake: Intake,
        decider: Decider,
        placer: Placer,
        forget: Callable[[], None],
        federated: bool,
        decided: Decided | None = None,
    ) -> None:
        self._settings = settings
        self._caches = caches
        self._sessions = sessions
        self._intake = intake
        self._decider = decider
        self._placer = placer
        self._forget = forget
        self._federated = federated
        self._decided = decided

    async def __call__(self, principal: Principal, body: RequestGroupBody) -> RequestGroupView:
        """Check, decide, store and reserve the group (module docstring). Raises Exhausted
        (rate limit), Forbidden or Invalid (naming `requests.<i>.<field>`), and stores nothing
        then."""
        started = time.perf_counter()
        group = await self._submit(principal, body)
        if self._decided is not None:
            seconds = time.perf_counter() - started
            for member in group.requests:
                self._decided(member.state, member.decision, seconds)
        return group

    async def _submit(self, principal: Principal, body: RequestGroupBody) -> RequestGroupView:
        settings = self._settings
        rate = await self._caches.gate.admit(
            rate_key=principal.tenant_id or principal.user_id,
            limit_per_minute=settings.rate_limit_per_minute,
            tenant_id="",
            idempotency_key=None,
            ttl_s=settings.idempotency_ttl_s,
        )
        if not rate.rate.allowed:
            raise too_many(settings.rate_limit_per_minute, rate.rate.retry_after_s)
        members = [await self._member(principal, i, raw) for i, raw in enumerate(body.requests)]
        for i, member in enumerate(members):
            if member.tenant != members[0].tenant:
                raise Invalid("a group's members are of one tenant", field=f"requests.{i}.tenant")
        new = [
            Submission(
                request=member,
                user_id=principal.user_id,
                idempotency_key=None,
                body=requests.JsonText(member.model_dump_json()),
            )
            for member in members
        ]
        arrays = None
        for _ in range(max(1, settings.placement_attempts)):
            arrays, decisions, reservations, fresh = await self._decider.decide_group(
                members, placement=body.placement, scope=body.scope, group_id=body.id
            )
            if self._federated and any(
                needs_national(m, d, fresh)
                for m, d in zip(members, decisions, strict=True)
                if d.status is DecisionStatus.PLACED
            ):
                decisions, reservations = _rejected(decisions, OUTSIDE_REGION), [None] * len(new)
            placed = all(d.status is DecisionStatus.PLACED for d in decisions)
            if not placed and not fresh:
                self._forget()
                continue
            outcomes = [
                Outcome.of(m, d, principal.user_id, r)
                for m, d, r in zip(members, decisions, reservations, strict=True)
            ]
            try:
                async with self._sessions() as session:
                    at = await self._placer.commit_new(
                        session, arrays, new, list(zip(outcomes, reservations, strict=True))
                    )
            except (ledger_store.CapacityConflict, ledger_store.QuotaExceeded) as short:
                if isinstance(short, ledger_store.QuotaExceeded):
                    return await self._reject(body, arrays, new, principal, short.refusal)
                self._forget()
                continue
            return _view(body, [replace(o, at=at) for o in outcomes])
        return await self._reject(
            body, arrays, new, principal, "capacity kept changing while the group was decided"
        )

    async def _member(self, principal: Principal, i: int, raw: dict[str, Any]) -> PlacementRequest:
        """Member `i` as a checked request; Invalid names its field under `requests.<i>`."""
        try:
            member = await self._intake.checked(principal, raw)
        except Invalid as exc:
            message = str(exc).removeprefix(f"{exc.field}: ") if exc.field else str(exc)
            field = f"requests.{i}" + (f".{exc.field}" if exc.field else "")
            raise Invalid(message, field=field) from None
        for name, wrong, why in (
            ("start", member.start != "now", 'a member of a group starts "now"'),
            ("flows", member.moves_data, "a member of a group moves no data"),
            (
                "national_optimum",
                member.national_optimum and self._federated,
                "a group is placed within this region",
            ),
        ):
            if wrong:
                raise Invalid(why, field=f"requests.{i}.{name}")
        return member

    async def _reject(
        self,
        body: RequestGroupBody,
        arrays: MapArrays | None,
        new: Sequence[Submission],
        principal: Principal,
        reason: str,
    ) -> RequestGroupView:
        """Store every member rejected for `reason` (naming the group)."""
        assert arrays is not None
        why = f"group {body.id!r}: {reason}"
        outcomes = [
            Outcome(s.request, None, RequestState.REJECTED, why, principal.user_id) for s in new
        ]
        async with self._sessions() as session:
            at = await self._placer.commit_new(session, arrays, new, [(o, None) for o in outcomes])
        return _view(body, [replace(o, at=at) for o in outcomes])


def _rejected(decisions: Sequence[Decision], reason: str) -> list[Decision]:
    return [
        d.model_copy(update={"status": DecisionStatus.REJECTED, "reason": reason, "site": None})
        for d in decisions
    ]


def _view(body: RequestGroupBody, outcomes: Sequence[Outcome]) -> RequestGroupView:
    views = []
    for outcome in outcomes:
        assert outcome.at is not None
        views.append(outcome.as_of(outcome.at))
    placed = all(o.state == RequestState.PLACED for o in outcomes)
    return RequestGroupView(
        id=body.id,
        placement=body.placement,
        scope=body.scope,
        state="placed" if placed else "rejected",
        reason=None if placed else outcomes[0].reason,
        requests=views,
    )
