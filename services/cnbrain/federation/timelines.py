"""Wire forms of calendar profiles (`cnbrain.v1.Timeline`) and back.

A brain sends the free amount over time of its own resources, named by site or link id
(indices differ between brains' maps); the receiver reads them into a calendar of its own
map's keys (`ledger.keys`). A site's resource is `cpu_m`, `mem_mib`, `storage_gib` or
`acc:<model>`.
"""

from collections.abc import Sequence
from itertools import pairwise

from cnbrain.domain.bounds import MAX_EPOCH_S
from cnbrain.federation.codec import WireError
from cnbrain.ledger.calendar import Calendar, Profile, Window
from cnbrain.ledger.keys import SITE_COMPUTE, ResourceKey, accelerator_key, link_key, site_key
from cnbrain.netmap.arrays import MapArrays
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
