"""Wire forms of calendar profiles (`cnbrain.v1.Timeline`) and back, and of the gangs the
national brain planned on a region's sites (`cnbrain.v1.PlannedGang`).

A brain sends the free amount over time of its own resources, named by site or link id
(indices differ between brains' maps); the receiver reads them into a calendar of its own
map's keys (`ledger.keys`). A site's resource is `cpu_m`, `mem_mib`, `storage_gib` or
`acc:<model>`.
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import pairwise

from cnbrain.domain.bounds import MAX_EPOCH_S, MAX_NODES
from cnbrain.domain.errors import Invalid
from cnbrain.federation.codec import WireError
from cnbrain.ledger.calendar import Calendar, Profile, Window
from cnbrain.ledger.keys import SITE_COMPUTE, ResourceKey, accelerator_key, link_key, site_key
from cnbrain.ledger.nodes import Gang
from cnbrain.netmap.arrays import MapArrays
from cnbrain.scheduling.checks import checked_name
from cnbrain.v1 import regional_pb2

MAX_STEPS = 4096
"""Breakpoints of one timeline at most; a longer profile is cut there (its tail is taken as
free, which only makes a plan earlier, never a reservation)."""

MAX_AMOUNT = 2**53
"""The largest amount a timeline may carry."""

ACCELERATOR_PREFIX = "acc:"


def timeline_message(
    key: ResourceKey, profile: Profile, *, arrays: MapArrays
) -> regional_pb2.Timeline:
    """`profile` (the calendar's profile of `key`) as a message naming it by id."""
    steps = profile.steps()[:MAX_STEPS]
    message = regional_pb2.Timeline(
        capacity=profile.capacity,
        at_s=[t for t, _ in steps],
        free=[free for _, free in steps],
    )
    if key[0] == "link":
        message.link_id = arrays.map.links[key[1]].id
    else:
        _, site, *names = key
        message.site_id = arrays.map.sites[site].id
        message.resource = ACCELERATOR_PREFIX + names[-1] if len(names) == 2 else names[0]
    return message


def key_of(message: regional_pb2.Timeline, *, arrays: MapArrays) -> ResourceKey:
    """The key of this map that `message` names. Raises WireError for an unknown site, link
    or resource."""
    if message.link_id:
        j = arrays.link_index.get(message.link_id)
        if j is None or message.site_id:
            raise WireError(f"a timeline names unknown link {message.link_id!r}")
        return link_key(j)
    site = arrays.map.site_index.get(message.site_id)
    if site is None:
        raise WireError(f"a timeline names unknown site {message.site_id!r}")
    resource = message.resource
    if resource in SITE_COMPUTE:
        return site_key(site, resource)
    model = resource.removeprefix(ACCELERATOR_PREFIX)
    if resource.startswith(ACCELERATOR_PREFIX) and model in arrays.accelerator_column:
        return accelerator_key(site, model)
    raise WireError(f"a timeline names unknown resource {resource!r} of {message.site_id!r}")


def steps_of(message: regional_pb2.Timeline, *, now: int) -> tuple[int, list[tuple[int, int]]]:
    """The capacity and the steps of `message`, checked: times strictly increasing, the first
    at `now`, every amount in [0, capacity]. Raises WireError."""
    capacity = message.capacity
    times, free = list(message.at_s), list(message.free)
    if not 0 <= capacity <= MAX_AMOUNT:
        raise WireError(f"a timeline's capacity {capacity} is out of bounds")
    if not times or len(times) != len(free) or len(times) > MAX_STEPS:
        raise WireError("a timeline's times and amounts do not match")
    if times[0] != now or times[-1] > MAX_EPOCH_S:
        raise WireError("a timeline does not start at its answer's now")
    if any(b <= a for a, b in pairwise(times)):
        raise WireError("a timeline's times do not increase")
    if any(not 0 <= amount <= capacity for amount in free):
        raise WireError("a timeline's amount is outside [0, capacity]")
    return capacity, list(zip(times, free, strict=True))


def load(
    calendar: Calendar[ResourceKey], key: ResourceKey, steps: Sequence[tuple[int, int]]
) -> None:
    """Take from `calendar`'s (whole, free) profile of `key` what `steps` do not have free:
    its capacity less each step's amount over that step; after the last breakpoint all of
    it is free."""
    profile = calendar.profile(key)
    ends = [t for t, _ in steps[1:]]
    for (start, free), end in zip(steps, ends, strict=False):
        used = profile.capacity - free
        if used > 0:
            profile.take(Window(start, end), used)


MAX_PLANNED_GANGS = 256
"""Planned gangs one call of `GetTimelines` may carry."""


@dataclass(frozen=True, slots=True)
class PlannedGang:
    """Another waiting request's `gang`, planned on site `site_id` over `window`."""

    site_id: str
    gang: Gang
    window: Window


def planned_gang_messages(
    plans: Sequence[tuple[Sequence[tuple[Sequence[str], int]], int, int, int]],
    site_ids: Collection[str],
) -> list[regional_pb2.PlannedGang]:
    """The gangs of `plans` (each its demand named by id, its nodes, and the epoch seconds
    its window starts and ends) on the sites of `site_ids`: a plan's compute there with its
    nodes, over its window; the first `MAX_PLANNED_GANGS`, in the order of `plans`."""
    out: list[regional_pb2.PlannedGang] = []
    for demand, nodes, start_s, end_s in plans:
        on: dict[str, regional_pb2.PlannedGang] = {}
        for key, amount in demand:
            if len(key) < 3 or key[0] != "site" or key[1] not in site_ids:
                continue
            gang = on.setdefault(
                key[1],
                regional_pb2.PlannedGang(site_id=key[1], nodes=nodes, start_s=start_s, end_s=end_s),
            )
            if key[2] == "cpu_m":
                gang.cpu_m = amount
            elif key[2] == "mem_mib":
                gang.mem_mib = amount
            elif key[2] == "acc" and len(key) == 4:
                gang.accelerator_model, gang.accelerator_milli = key[3], amount
        out += on.values()
    return out[:MAX_PLANNED_GANGS]


def planned_gangs_of(messages: Sequence[regional_pb2.PlannedGang]) -> list[PlannedGang]:
    """The gangs `messages` carry, checked. Raises Invalid naming the field
    (`planned_gangs.<i>.<field>`) out of bounds, or a gang whose amounts do not split evenly
    over its nodes."""
    if len(messages) > MAX_PLANNED_GANGS:
        raise Invalid(f"at most {MAX_PLANNED_GANGS}, not {len(messages)}", field="planned_gangs")
    out: list[PlannedGang] = []
    for i, one in enumerate(messages):
        field = f"planned_gangs.{i}"
        checked_name(one.site_id, field=f"{field}.site_id")
        if not 1 <= one.nodes <= MAX_NODES:
            raise Invalid(f"must be within [1, {MAX_NODES}]", field=f"{field}.nodes")
        for name in ("cpu_m", "mem_mib", "accelerator_milli"):
            if not 0 <= getattr(one, name) <= MAX_AMOUNT:
                raise Invalid(f"must be within [0, {MAX_AMOUNT}]", field=f"{field}.{name}")
        if not 0 <= one.start_s < one.end_s <= MAX_EPOCH_S:
            raise Invalid(f"needs 0 <= start_s < end_s <= {MAX_EPOCH_S}", field=f"{field}.start_s")
        model = one.accelerator_model or None
        if model is not None:
            checked_name(model, field=f"{field}.accelerator_model")
        if (model is None) != (one.accelerator_milli == 0):
            raise Invalid(
                "accelerators need a model, and a model accelerators",
                field=f"{field}.accelerator_model",
            )
        try:
            gang = Gang.of_amounts(
                nodes=one.nodes,
                cpu_m=one.cpu_m,
                mem_mib=one.mem_mib,
                model=model,
                acc_milli=one.accelerator_milli,
            )
        except Invalid as wrong:
            raise Invalid(wrong.message, field=field) from None
        out.append(PlannedGang(one.site_id, gang, Window(one.start_s, one.end_s)))
    return out
