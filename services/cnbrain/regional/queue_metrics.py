"""The admission queue's series of a regional brain, by priority class, read from the
database for the scrapes (`QueueCollector.read`), never counted per request:

- `cnbrain_queue_length{class}`: requests waiting in the queue;
- `cnbrain_queue_oldest_wait_seconds{class}`: how long the longest-waiting of them has
  waited since it was queued (`storage.requests.QUEUED_AT`, the `queued_at` of
  `GET /v1/queue`: submitted to wait, or last preempted back into the queue); 0 for an
  empty class;
- `cnbrain_queue_wait_objective_seconds{class}`: the class's wait objective, its
  `default_max_wait_s`: a request that names no max wait waits that long at most before it
  may preempt (or is rejected).

A request is counted under its class as the admission round classes it: the class it names,
or the default class when it names none or a class since deleted. Every class of the set
has its series; a class deleted since the last read has none. While the database does not
answer, the last read stands (the waits still grow).
"""

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.storage import priority_classes, queue_stats
from cnbrain.storage.queue_stats import QueuedGroup


@dataclass(frozen=True, slots=True)
class ClassQueue:
    """Class `name`'s part of the queue: `length` requests, the longest waiting since epoch
    second `since_s` (None: none waits), and the class's objective."""

    name: str
    length: int
    since_s: float | None
    objective_s: float


def by_class(groups: Sequence[QueuedGroup], classes: PriorityClasses) -> list[ClassQueue]:
    """Every class of `classes` with its part of the queued `groups`, highest class first."""
    length: dict[str, int] = {}
    since: dict[str, datetime] = {}
    for group in groups:
        name = classes.named_or_default(group.class_name).name
        length[name] = length.get(name, 0) + group.count
        if name not in since or group.since < since[name]:
            since[name] = group.since
    return [
        ClassQueue(
            name=one.name,
            length=length.get(one.name, 0),
            since_s=since[one.name].timestamp() if one.name in since else None,
            objective_s=one.default_max_wait_s,
        )
        for one in classes
    ]


class QueueCollector(Collector):
    """The queue's series (module docstring) as of the last `read`; `clock` gives now."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._queue: list[ClassQueue] = []

    async def read(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Read the queue and the classes (one transaction). Raises what the database
        raises; the last read then stands."""
        async with sessions() as session, session.begin():
            groups = await queue_stats.queued_by_class(session)
            classes = await priority_classes.list_classes(session)
        self._queue = by_class(groups, classes) if classes is not None else []

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        length = GaugeMetricFamily(
            "cnbrain_queue_length",
            "Requests waiting in the admission queue, by priority class.",
            labels=["class"],
        )
        oldest = GaugeMetricFamily(
            "cnbrain_queue_oldest_wait_seconds",
            "How long the longest-waiting request of a priority class has waited in the queue.",
            labels=["class"],
        )
        objective = GaugeMetricFamily(
            "cnbrain_queue_wait_objective_seconds",
            "A priority class's wait objective: its default max wait.",
            labels=["class"],
        )
        for one in self._queue:
            length.add_metric([one.name], one.length)
            waited = 0.0 if one.since_s is None else max(now - one.since_s, 0.0)
            oldest.add_metric([one.name], waited)
            objective.add_metric([one.name], one.objective_s)
        yield from (length, oldest, objective)
