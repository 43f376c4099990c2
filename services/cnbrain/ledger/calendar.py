"""Reservations over time: the free capacity of each resource as a step function of time.

A reservation holds an amount of a resource over a window `[start, end)` of integer seconds
(callers pass epoch seconds). For each resource (a site's millicores, MiB, GiB or accelerators
of one model, a link's Mbps) a `Profile` keeps a resource profile: the free amount from `now`
on, as a list of breakpoints where it changes. Taking a window lowers the step function over
it, giving raises it back; neither may leave `[0, capacity]` at any instant. A `Calendar`
holds one profile per named resource and takes a demand on several of them all or nothing;
`earliest` finds the first start at which a demand fits for its whole duration, and
`end_early` gives back the rest of a window at once.

Only `[now, infinity)` matters: `advance` drops what lies before `now`, a window is read or
changed only where it overlaps `[now, infinity)` (a window wholly before `now` holds nothing),
and no start is earlier than `now`. Every window ends, so after the last breakpoint the whole
capacity is free. Neither class is thread-safe: one owner drives a calendar.
"""

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, TypeVar

from cnbrain.domain.errors import Conflict, Invalid, NotFound

K = TypeVar("K", bound=Hashable)


class CalendarConflict(Conflict):
    """A take or give would leave a resource's free amount outside [0, capacity]."""


class UnknownResource(NotFound):
    """A demand names a resource the calendar does not hold."""


def _check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise Invalid(f"must be an integer, not {value!r}", field=name)
    if minimum is not None and value < minimum:
        raise Invalid(f"must be at least {minimum}, not {value}", field=name)
    return value


@dataclass(frozen=True, slots=True)
class Window:
    """The half-open interval `[start, end)` of integer seconds, with `start < end`."""

    start: int
    end: int

    def __post_init__(self) -> None:
        _check_int(self.start, "start")
        _check_int(self.end, "end")
        if self.start >= self.end:
            raise Invalid(f"a window needs start < end, not [{self.start}, {self.end})")

    @classmethod
    def of(cls, start: int, duration: int) -> "Window":
        """The window of `duration` seconds (at least 1) from `start`."""
        _check_int(duration, "duration", minimum=1)
        return cls(start, start + duration)

    @property
    def duration(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"[{self.start}, {self.end})"


def _last_below(values: list[int], lo: int, hi: int, amount: int) -> int:
    """The last index in `[lo, hi)` whose value is below `amount`, one being known to be:
    halves the range by the least value of its upper half (scanned in C) while it is long,
    then looks back one index at a time."""
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if min(values[mid:hi]) < amount:
            lo = mid
        else:
            hi = mid
    i = hi - 1
    while values[i] >= amount:
        i -= 1
    return i


class Profile:
    """The free amount of one resource, an integer in [0, capacity], from `now` on.

    Representation: `_times` strictly increasing with `_times[0] == now`, and `_free[i]` the
    free amount over `[_times[i], _times[i + 1])` (the last one to infinity, and always the
    whole capacity). Adjacent steps differ, so equal profiles have equal steps.

    `_floor` is at most the least free amount, and equal to it when `_floor_exact`: a take
    lowers it by its amount, and `fits_everywhere` makes it exact again (a scan of the
    steps) only when it is below an amount asked. An amount of at most `_floor` fits
    everywhere: checking or searching it costs O(1).

    `_no_start` remembers, per `(amount, duration)` searched, a time before which no window of
    that duration from now on has that amount free: where the last search that covered
    everything from now found its answer (after its deadline when it found none). A take
    only lowers free amounts, so it stays true, and the next search of the same amount and
    duration starts from there (the many requests that wait for one busy resource); a give or
    an advance forgets it all.

    With n breakpoints, `free_at` costs O(log n); a window over m steps costs O(log n + m)
    to read and O(n) to change (list insertions); `earliest` costs O(log n + k) for the k
    steps from `not_before` to the end of the answer.
    """

    __slots__ = ("_capacity", "_floor", "_floor_exact", "_free", "_no_start", "_times")

    def __init__(self, capacity: int, *, now: int) -> None:
        self._capacity = _check_int(capacity, "capacity", minimum=0)
        self._times = [_check_int(now, "now")]
        self._free = [capacity]
        self._floor, self._floor_exact = capacity, True
        self._no_start: dict[tuple[int, int], int] = {}

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def now(self) -> int:
        return self._times[0]

    def copy(self) -> "Profile":
        """An independent copy of this profile."""
        twin = Profile(self._capacity, now=self._times[0])
        twin._times, twin._free = list(self._times), list(self._free)
        twin._floor, twin._floor_exact = self._floor, self._floor_exact
        return twin

    def fits_everywhere(self, amount: int) -> bool:
        """Whether at least `amount` is free at every instant from now on."""
        if amount <= self._floor:
            return True
        if self._floor_exact:
            return False
        self._floor, self._floor_exact = min(self._free), True
        return amount <= self._floor

    def steps(self) -> tuple[tuple[int, int], ...]:
        """The breakpoints `(time, free from then on)`, the first at `now`."""
        return tuple(zip(self._times, self._free, strict=True))

    def free_at(self, t: int) -> int:
        """The free amount at instant `t`; Invalid if `t` is before `now`."""
        _check_int(t, "t")
        if t < self.now:
            raise Invalid(f"{t} is before now ({self.now})", field="t")
        return self._free[bisect_right(self._times, t) - 1]

    def min_free(self, window: Window) -> int:
        """The least free amount over `window` (the capacity if it lies wholly before now)."""
        return self.least_free(window.start, window.end)

    def least_free(self, start: int, end: int) -> int:
        """`min_free(Window(start, end))`, for callers that already hold checked integers
        with `start < end`: no window is built."""
        times = self._times
        start = max(start, times[0])
        if start >= end:
            return self._capacity
        first = bisect_right(times, start) - 1
        return min(self._free[first : bisect_left(times, end)], default=self._capacity)

    def first_short(self, window: Window, amount: int) -> int | None:
        """The first instant of `window` with less than `amount` free, or None if none."""
        _check_int(amount, "amount", minimum=0)
        if self.fits_everywhere(amount):
            return None
        first, stop = self._span(window)
        free = self._free
        if min(free[first:stop], default=amount) >= amount:
            return None
        for i in range(first, stop):
            if free[i] < amount:
                return max(self._times[i], window.start)
        return None

    def first_over(self, window: Window, amount: int) -> int | None:
        """The first instant of `window` where `amount` more would exceed capacity, or None."""
        _check_int(amount, "amount", minimum=0)
        first, stop = self._span(window)
        for i in range(first, stop):
            if self._free[i] + amount > self._capacity:
                return max(self._times[i], window.start)
        return None

    def take(self, window: Window, amount: int) -> None:
        """Lower the free amount by `amount` over `window`.

        Raises CalendarConflict, and takes nothing, if any instant would go below zero.
        """
        short = self.first_short(window, amount)
        if short is not None:
            raise CalendarConflict(
                f"{amount} does not fit over {window}: {self.free_at(short)} free at {short}"
            )
        self._add(window, -amount)

    def give(self, window: Window, amount: int) -> None:
        """Raise the free amount by `amount` over `window`, the inverse of `take`.

        Raises CalendarConflict, and gives nothing, if any instant would exceed capacity.
        """
        over = self.first_over(window, amount)
        if over is not None:
            raise CalendarConflict(
                f"giving {amount} over {window} exceeds the capacity {self._capacity}: "
                f"{self.free_at(over)} free at {over}"
            )
        self._add(window, amount)

    def earliest(self, amount: int, duration: int, *, not_before: int, deadline: int) -> int | None:
        """The earliest start `s` with `max(not_before, now) <= s <= deadline` such that at
        least `amount` is free over `[s, s + duration)`; None if there is none.

        `s` is `max(not_before, now)` or a breakpoint where the free amount rises to
        `amount` or more. Scans the steps once from `not_before`: O(log n + k).
        """
        _check_int(amount, "amount", minimum=0)
        _check_int(duration, "duration", minimum=1)
        _check_int(not_before, "not_before")
        _check_int(deadline, "deadline")
        return self._earliest(amount, duration, not_before, deadline)

    def _earliest(self, amount: int, duration: int, not_before: int, deadline: int) -> int | None:
        """`earliest` of checked integers."""
        start = max(not_before, self.now)
        if start > deadline or amount > self._capacity:
            return None
        if self.fits_everywhere(amount):
            return start
        asked = (amount, duration)
        known = self._no_start.get(asked, self._times[0])
        if start > known:
            return self._scan(amount, duration, start, deadline)
        if known > deadline:
            return None
        found = self._scan(amount, duration, known, deadline)
        self._no_start[asked] = deadline + 1 if found is None else found
        return found

    def _scan(self, amount: int, duration: int, start: int, deadline: int) -> int | None:
        """`earliest` from `start` (not before now), scanning the steps."""
        times, free = self._times, self._free
        i = bisect_right(times, start) - 1
        while True:
            # The last step is the whole capacity, so this stops before running off the end.
            while free[i] < amount:
                i += 1
                start = times[i]
            if start > deadline:
                return None
            stop = bisect_left(times, start + duration, i + 1)
            if stop == i + 1 or min(free[i + 1 : stop]) >= amount:
                return start
            # A step of the window is short. Every later start up to the last short one
            # holds that step too, so the next start to try is just after it.
            i = _last_below(free, i + 1, stop, amount) + 1
            start = times[i]

    def advance(self, now: int) -> None:
        """Forget everything before `now`; Invalid if `now` is earlier than the current one."""
        _check_int(now, "now")
        if now < self.now:
            raise Invalid(f"time does not go back: {now} is before now ({self.now})", field="now")
        first = bisect_right(self._times, now) - 1
        del self._times[:first]
        del self._free[:first]
        self._times[0] = now
        self._floor_exact = False
        self._no_start.clear()

    def _span(self, window: Window) -> tuple[int, int]:
        """The indices `[first, stop)` of the steps overlapping `window` from now on."""
        start = max(window.start, self.now)
        if start >= window.end:
            return 0, 0
        return bisect_right(self._times, start) - 1, bisect_left(self._times, window.end)

    def _add(self, window: Window, delta: int) -> None:
        """Add `delta` over `window` from now on, with no check, keeping the steps canonical."""
        start, end = max(window.start, self._times[0]), window.end
        if delta == 0 or start >= end:
            return
        self._floor, self._floor_exact = self._floor + min(delta, 0), False
        if delta > 0:
            self._no_start.clear()
        first = self._split(start, 0)
        stop = self._split(end, first)
        free = self._free
        free[first:stop] = [amount + delta for amount in free[first:stop]]
        # Only the two edges can now equal their neighbours; merge the later one first.
        if free[stop - 1] == free[stop]:
            del self._times[stop]
            del free[stop]
        if first > 0 and free[first - 1] == free[first]:
            del self._times[first]
            del free[first]

    def _split(self, t: int, lo: int) -> int:
        """Make `t` (not before now, nor before the breakpoint `lo`) a breakpoint and return
        its index."""
        times = self._times
        i = bisect_right(times, t, lo) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self._free.insert(i + 1, self._free[i])
        return i + 1


class Calendar(Generic[K]):
    """A profile per named resource; demands on several resources are taken all or nothing.

    A demand maps resource keys (e.g. `("site", 3, "cpu_m")`, `("link", 17)`) to amounts
    (integers, at least 0; 0 holds nothing). A key not in the calendar raises UnknownResource.
    """

    __slots__ = ("_now", "_profiles")

    def __init__(self, capacities: Mapping[K, int], *, now: int) -> None:
        self._now = _check_int(now, "now")
        self._profiles = {key: Profile(capacity, now=now) for key, capacity in capacities.items()}

    @property
    def now(self) -> int:
        return self._now

    def copy(self) -> "Calendar[K]":
        """An independent copy of this calendar: changing one leaves the other as it is."""
        twin: Calendar[K] = Calendar({}, now=self._now)
        twin._profiles = {key: profile.copy() for key, profile in self._profiles.items()}
        return twin

    def __contains__(self, key: object) -> bool:
        return key in self._profiles

    def __len__(self) -> int:
        return len(self._profiles)

    def profile(self, key: K) -> Profile:
        """The profile of `key`, to read (change it through the calendar only); UnknownResource
        if there is none."""
        profile = self._profiles.get(key)
        if profile is None:
            raise UnknownResource(f"the calendar holds no resource {key!r}")
        return profile

    def fits(self, demand: Mapping[K, int], window: Window) -> bool:
        """Whether every amount of `demand` is free over the whole of `window`."""
        return all(
            profile.first_short(window, amount) is None
            for _, profile, amount in self._resolve(demand)
        )

    def take(self, demand: Mapping[K, int], window: Window) -> None:
        """Take `demand` over `window` on every resource, or raise CalendarConflict (naming
        the first resource that does not fit) and take nothing."""
        resolved = self._resolve(demand)
        for key, profile, amount in resolved:
            short = profile.first_short(window, amount)
            if short is not None:
                raise CalendarConflict(
                    f"{key!r}: {amount} does not fit over {window}: "
                    f"{profile.free_at(short)} free at {short}"
                )
        for _, profile, amount in resolved:
            profile._add(window, -amount)  # checked above

    def take_what_is_free(self, demand: Mapping[K, int], window: Window) -> None:
        """Take over `window`, of each resource of `demand` the calendar holds, the amount
        asked or, when less is free all over the window, what is; a resource the calendar
        does not hold is left out. Never raises CalendarConflict."""
        for key, amount in demand.items():
            if key in self._profiles:
                profile = self._profiles[key]
                wanted = _check_int(amount, f"demand[{key!r}]", minimum=0)
                profile.take(window, min(wanted, profile.min_free(window)))

    def take_up_to(self, demand: Mapping[K, int], window: Window) -> None:
        """Take over `window`, of each resource of `demand` the calendar holds, at every
        instant the amount asked or what is free then, whichever is less (a resource the
        calendar does not hold is left out). Never raises CalendarConflict."""
        for key, amount in demand.items():
            if key in self._profiles:
                profile = self._profiles[key]
                wanted = _check_int(amount, f"demand[{key!r}]", minimum=0)
                inside = [t for t, _ in profile.steps() if window.start < t < window.end]
                bounds = [window.start, *inside, window.end]
                pieces = [
                    (Window(start, end), min(wanted, profile.free_at(max(start, profile.now))))
                    for start, end in pairwise(bounds)
                    if end > profile.now
                ]
                for piece, taken in pieces:
                    if taken:
                        profile.take(piece, taken)

    def give(self, demand: Mapping[K, int], window: Window) -> None:
        """Give `demand` back over `window` on every resource, or raise CalendarConflict
        (naming the first resource it would take above capacity) and give nothing."""
        resolved = self._resolve(demand)
        for key, profile, amount in resolved:
            over = profile.first_over(window, amount)
            if over is not None:
                raise CalendarConflict(
                    f"{key!r}: giving {amount} over {window} exceeds the capacity "
                    f"{profile.capacity}: {profile.free_at(over)} free at {over}"
                )
        for _, profile, amount in resolved:
            profile._add(window, amount)  # checked above

    def end_early(self, demand: Mapping[K, int], window: Window, at: int) -> Window:
        """End a reservation of `demand` over `window` at `at` (`start <= at < end`): give
        back `[at, end)` at once and return that window. Raises as `give` does."""
        _check_int(at, "at")
        if not window.start <= at < window.end:
            raise Invalid(f"{at} is not within {window}", field="at")
        rest = Window(at, window.end)
        self.give(demand, rest)
        return rest

    def earliest(
        self, demand: Mapping[K, int], duration: int, *, not_before: int, deadline: int
    ) -> int | None:
        """The earliest start `s` with `max(not_before, now) <= s <= deadline` at which every
        resource of `demand` fits over `[s, s + duration)`; None if there is none.

        Leapfrog over the resources that may be short somewhere (not `fits_everywhere`): each
        profile in turn moves the candidate start to its own earliest fit from there (a
        breakpoint where it rises), until all of them agree on one. Each move passes at least
        one step of one profile, so this ends.
        """
        _check_int(duration, "duration", minimum=1)
        _check_int(not_before, "not_before")
        _check_int(deadline, "deadline")
        resolved = [
            (profile, amount)
            for _, profile, amount in self._resolve(demand)
            if not profile.fits_everywhere(amount)
        ]
        start = max(not_before, self._now)
        if start > deadline:
            return None
        agreed = 0
        i = 0
        while agreed < len(resolved):
            profile, amount = resolved[i]
            fit = profile._earliest(amount, duration, start, deadline)  # checked above
            if fit is None:
                return None
            if fit == start:
                agreed += 1
            else:
                start = fit
                agreed = 1
            i = (i + 1) % len(resolved)
        return start

    def advance(self, now: int) -> None:
        """Forget everything before `now` on every resource; time does not go back."""
        _check_int(now, "now")
        if now < self._now:
            raise Invalid(f"time does not go back: {now} is before now ({self._now})", field="now")
        for profile in self._profiles.values():
            profile.advance(now)
        self._now = now

    def _resolve(self, demand: Mapping[K, int]) -> list[tuple[K, Profile, int]]:
        """Each key of `demand`, in its order, with its profile and its checked amount."""
        profiles = self._profiles
        resolved: list[tuple[K, Profile, int]] = []
        for key, amount in demand.items():
            profile = profiles.get(key)
            if profile is None:
                raise UnknownResource(f"the calendar holds no resource {key!r}")
            if type(amount) is not int or amount < 0:
                _check_int(amount, f"demand[{key!r}]", minimum=0)
            resolved.append((key, profile, amount))
        return resolved
