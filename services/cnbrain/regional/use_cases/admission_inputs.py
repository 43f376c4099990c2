"""What an admission round reads, as the scheduling core weighs it: the queued requests with
their classes and deadlines, the work holding capacity, the room left to requests of other
regions, and what this brain owns."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.keys import ResourceKey, accelerator_key, link_key, site_key
from cnbrain.netmap.arrays import MapArrays
from cnbrain.regional.stored_requests import stored_request
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.scheduling.work import MAX_TIME_S, RunningWork
from cnbrain.storage import requests
from cnbrain.storage.ledger_store import HeldWindow
from cnbrain.storage.room_holds import RoomHold
from cnbrain.storage.running_work import HeldWork


@dataclass(frozen=True, slots=True)
class Queued:
    """A queued request as a round weighs it: its class (`class_name`) and the latest epoch
    second it may start (`deadline`)."""

    request: PlacementRequest
    created_at: datetime
    deadline: int
    class_name: str


def readable(
    stored: Sequence[requests.StoredRequest], classes: PriorityClasses
) -> tuple[list[Queued], list[tuple[requests.StoredRequest, str]]]:
    """The queued requests as the round plans them (their class: the one they name, or the
    default when they name none or a class since deleted; their deadline: when they entered
    the queue, their last change of state, plus their max wait, or their class's default), and
    those whose stored form no longer reads."""
    found: list[Queued] = []
    unreadable: list[tuple[requests.StoredRequest, str]] = []
    for record in stored:
        request, problem = stored_request(record.body)
        if request is None:
            unreadable.append((record, problem))
            continue
        one = classes.named_or_default(request.priority_class)
        wait = request.max_wait_s if request.max_wait_s is not None else one.default_max_wait_s
        entered = record.updated_at.timestamp()  # queued again after a preemption
        found.append(Queued(request, record.created_at, math.floor(entered + wait), one.name))
    return found, unreadable


def waited_out(q: Queued) -> str:
    """The reason of a request rejected when its max wait passed."""
    wait = q.request.max_wait_s
    waited = "its class's max wait" if wait is None else f"its max wait of {wait:g} s"
    return f"no start within {waited}"


def running_work(held: Sequence[HeldWork], classes: PriorityClasses) -> list[RunningWork]:
    """The held work as the round weighs it (usage, preemption candidates): its compute on
    its site and its bandwidth on its links."""
    running = []
    for work in held:
        name = work.body.get("priority_class")
        one = classes.named_or_default(name)
        running.append(
            RunningWork(
                id=work.request_id,
                tenant=work.tenant_id,
                class_value=one.value,
                preemptible=one.preemptible,
                started_at=min(work.start_at.timestamp(), MAX_TIME_S),
                demand=work.demand,
                site=work.site_id,
                bandwidth=work.bandwidth,
            )
        )
    return running


def unusable_links(calendar: Calendar[ResourceKey], links: Any) -> frozenset[int]:
    """The links (indices) that `links` marks as this brain's and that have no capacity on
    `calendar`: reported down, retired, or used up from outside."""
    return frozenset(
        j
        for j, own in enumerate(links)
        if own and link_key(j) in calendar and calendar.profile(link_key(j)).capacity == 0
    )


def owned(option: PlanOption[ResourceKey], sites: Any, links: Any) -> bool:
    """Whether every resource of `option` is this brain's own."""
    for key in option.demand:
        kind, index = key[0], key[1]
        if not (sites[index] if kind == "site" else links[index]):
            return False
    return True


def rooms_left(holds: Sequence[RoomHold], holdings: Sequence[HeldWindow]) -> list[RoomHold]:
    """The room holds a round leaves to their requests: those whose request holds nothing in
    this brain yet."""
    holding = {held.request_id for held in holdings}
    return [hold for hold in holds if hold.request_id not in holding]


def leave_held_rooms(
    calendar: Calendar[ResourceKey],
    holds: Sequence[RoomHold],
    holdings: Sequence[HeldWindow],
    arrays: MapArrays,
) -> None:
    """Take from `calendar`, from its now until each hold's end, the compute of every room
    hold whose request holds nothing in this brain yet (as much of it as is free), so the
    round leaves that room to it."""
    now = calendar.now
    for hold in rooms_left(holds, holdings):
        site = arrays.map.site_index.get(hold.site_id)
        end = math.ceil(hold.until.timestamp())
        if site is None or end <= now:
            continue
        demand: dict[ResourceKey, int] = {
            site_key(site, "cpu_m"): hold.cpu_m,
            site_key(site, "mem_mib"): hold.mem_mib,
            site_key(site, "storage_gib"): hold.storage_gib,
        }
        if hold.accelerator_model and hold.accelerator_milli:
            demand[accelerator_key(site, hold.accelerator_model)] = hold.accelerator_milli
        calendar.take_what_is_free(demand, Window(now, end))
