"""What an admission round stores for the queue's view: each waiting request's plan (its
position, estimated start and site, and what blocks it on its top candidates) and its
`planned` event when its estimate moved (`storage.queue_plans`, `GET /v1/requests/{id}`)."""

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.ledger.calendar import Calendar
from cnbrain.ledger.claim import duration_seconds
from cnbrain.ledger.keys import ResourceKey
from cnbrain.regional.use_cases.admission_inputs import Queued
from cnbrain.regional.use_cases.ports import NationalPlan
from cnbrain.scheduling.admission import Round
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.blockers import Holding, option_blockers
from cnbrain.storage import ledger_store
from cnbrain.storage.queue_plans import QueuePlan

PLAN_MOVED_S = 60
"""A `planned` event is written when a request's estimated start moves by at least this."""

BLOCKERS_SHOWN = 200
"""What blocks a waiting request is stored for the first this many of the order."""

BLOCKER_OPTIONS = 3
"""... on the first this many of its candidate sites."""


def plans_of(
    result: Round,
    *,
    deferred: Mapping[str, str],
    elsewhere: Sequence[Queued],
    national_plans: Mapping[str, NationalPlan],
    earlier: dict[str, QueuePlan],
    by_id: dict[str, Queued],
    options: dict[str, tuple[PlanOption[ResourceKey], ...]],
    blockers: "Blockers",
    at: datetime,
    pushed: Mapping[tuple[str, str], int] | None = None,
) -> tuple[list[QueuePlan], list[RequestEvent]]:
    """Every waiting request's plan after `result` (with what blocks it, for the first
    `BLOCKERS_SHOWN` of the order), as of `at`, and a `planned` event for each whose estimate
    moved from its `earlier` plan (a gang planned for when its nodes free says so); a request
    planned to start now that was not admitted has no estimated start and says why
    (`deferred`, by id); `elsewhere` are those only the national brain can place, planned as
    its last `national_plans` says. A gang whose nodes hold it only from its planned start,
    around the gangs planned before it (`pushed`: `NodeWaits.pushed`), says so too."""
    now_s = blockers.now

    def blocked(request_id: str) -> list[dict[str, Any]]:
        if position[request_id] >= BLOCKERS_SHOWN:
            return []
        q = by_id[request_id]
        duration = duration_seconds(q.request.duration_hours)
        return blockers.of(_first_per_site(options[request_id])[:BLOCKER_OPTIONS], duration)

    position = result.position
    plans: list[QueuePlan] = []
    events: list[RequestEvent] = []
    for planned in result.later:
        start = datetime.fromtimestamp(planned.start, UTC)
        option = options[planned.id][planned.option]
        site = option.label
        reason = f"planned on {site} from {start.isoformat()}"
        lead = 0 if option.timed is None else option.timed.lead
        if now_s < option.nodes_free_at == planned.start - lead:
            nodes = datetime.fromtimestamp(option.nodes_free_at, UTC).isoformat()
            reason += f"; the nodes it needs on {site} free at {nodes}"
        elif (pushed or {}).get((planned.id, site)) == planned.start:
            reason += (
                f"; the nodes it needs on {site} hold it then, around the gangs planned before it"
            )
        plans.append(
            QueuePlan(
                planned.id,
                position[planned.id],
                start,
                at,
                {"site": site, "reason": reason, "blockers": blocked(planned.id)},
            )
        )
        if _moved(earlier.get(planned.id), start):
            events.append(
                RequestEvent.of(
                    planned.id, RequestEventKind.PLANNED, at, site=site, start=start.isoformat()
                )
            )
    for planned in result.admit:
        why = deferred.get(planned.id)
        if why is None:
            continue
        site = options[planned.id][planned.option].label
        plans.append(
            QueuePlan(
                planned.id,
                position[planned.id],
                None,
                at,
                {
                    "site": site,
                    "reason": f"planned to start now on {site}, not admitted: {why}",
                    "blockers": blocked(planned.id),
                },
            )
        )
    for stuck in result.stuck:
        plans.append(
            QueuePlan(
                stuck.id,
                position[stuck.id],
                None,
                at,
                {"reason": stuck.reason, "blockers": blocked(stuck.id)},
            )
        )
    for over in result.over_quota:
        plans.append(
            QueuePlan(
                over.id,
                position[over.id],
                None,
                at,
                {"reason": f"waits for its quota: {over.reason}", "blockers": []},
            )
        )
    offset = len(result.order)
    for index, q in enumerate(elsewhere):
        if q.deadline < now_s:
            continue
        plan = national_plans.get(q.request.id)
        if plan is None or plan.start_s is None or plan.site_id is None:
            reason = "waits for the national brain to find room across regions"
            detail = {"reason": f"{reason}: {plan.reason}" if plan else reason}
            plans.append(QueuePlan(q.request.id, offset + index, None, at, detail))
            continue
        start = datetime.fromtimestamp(plan.start_s, UTC)
        plans.append(
            QueuePlan(
                q.request.id,
                offset + index,
                start,
                at,
                {"site": plan.site_id, "reason": plan.reason, "blockers": []},
            )
        )
        if _moved(earlier.get(q.request.id), start):
            events.append(
                RequestEvent.of(
                    q.request.id,
                    RequestEventKind.PLANNED,
                    at,
                    site=plan.site_id,
                    start=start.isoformat(),
                )
            )
    return plans, events


def _moved(before: QueuePlan | None, start: datetime) -> bool:
    """Whether a plan's estimated start moved from `before` (by `PLAN_MOVED_S` at least)."""
    return (
        before is None
        or before.estimated_start is None
        or abs((before.estimated_start - start).total_seconds()) >= PLAN_MOVED_S
    )


def _first_per_site(options: Sequence[PlanOption[ResourceKey]]) -> list[PlanOption[ResourceKey]]:
    """The first option of each site, in order (a request with flows has one per rate)."""
    seen: set[str] = set()
    first = []
    for option in options:
        if option.label not in seen:
            seen.add(option.label)
            first.append(option)
    return first


class Blockers:
    """What blocks an option on the calendar as it stood before the round planned it: the
    running and admitted work only (`scheduling.blockers`); `link_ids` names the map's links
    by index."""

    def __init__(
        self,
        calendar: Calendar[ResourceKey],
        held: Sequence[ledger_store.HeldWindow],
        link_ids: Sequence[str],
    ) -> None:
        self._calendar = calendar
        self.now = calendar.now
        self._link_ids = link_ids
        self._by_key: dict[ResourceKey, list[Holding[ResourceKey]]] = {}
        for one in held:
            holding = Holding(one.request_id, one.window, one.demand)
            for key in one.demand:
                self._by_key.setdefault(key, []).append(holding)

    def of(self, options: Sequence[PlanOption[ResourceKey]], duration: int) -> list[dict[str, Any]]:
        """The blockers of `options`, as stored in a plan's detail."""
        out: list[dict[str, Any]] = []
        for option in options:
            holdings = list(
                {id(h): h for key in option.demand for h in self._by_key.get(key, ())}.values()
            )
            found = option_blockers(
                self._calendar, holdings, option, duration=duration, describe=self._describe
            )
            for blocker in found.blockers:
                until = blocker.until
                out.append(
                    {
                        "site": found.site,
                        "resource": blocker.name,
                        "wants": blocker.wants,
                        "free": blocker.free_now,
                        "until": None
                        if until is None
                        else datetime.fromtimestamp(until, UTC).isoformat(),
                        "held_by": blocker.held_by,
                        "text": f"{found.site}: {blocker.text()}",
                    }
                )
        return out

    def _describe(self, key: ResourceKey) -> str:
        if key[0] == "link":
            return f"Mbps on link {self._link_ids[key[1]]}"
        if len(key) == 4:
            return f"milli-accelerators {key[-1]}"
        return {"cpu_m": "CPU millicores", "mem_mib": "MiB of memory"}.get(
            str(key[-1]), "GiB of storage"
        )
