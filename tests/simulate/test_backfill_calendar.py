"""The simulator's calendar of running jobs, kept through a run: at every round it holds what
a calendar built afresh from the running jobs would."""

import math
import random
from collections.abc import Callable, Sequence

from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import EngineConfig
from cnbrain.scheduling.admission import Round
from cnbrain.scheduling.classes import BUILT_IN
from cnbrain.scheduling.options import sites_capacity
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork, RunningWork
from cnbrain.simulate.admission import Admission
from cnbrain.simulate.backfill_round import BackfillPlanner, Held, row_id
from cnbrain.simulate.classes import DEFAULT_SHARES, draw_classes
from cnbrain.simulate.simulation import _Run
from tests.simulate.test_preemption import CLASSES, two_low_and_one_high
from tests.simulate.test_simulation import mixed_jobs


def rebuilt(planner: BackfillPlanner, now: float) -> Calendar[int]:
    """A calendar built at `now` from the planner's running jobs, each held from now to its
    departure."""
    at = math.floor(now)
    calendar: Calendar[int] = Calendar(planner.capacities, now=at)
    for held in planner.running():
        calendar.take(held.demand, Window(at, max(at + 1, math.ceil(held.departs))))
    return calendar


def steps(calendar: Calendar[int], keys: list[int]) -> dict[int, tuple[tuple[int, int], ...]]:
    return {key: calendar.profile(key).steps() for key in keys}


def planner_of(tiny_map: ComputeNetworkMap, count: int) -> BackfillPlanner:
    engine = PlacementEngine(tiny_map)
    requests = [job.to_request() for job in mixed_jobs(count, seed=3)]
    return BackfillPlanner(
        engine,
        requests,
        durations=[60.0] * count,
        deadlines=[1e6] * count,
        top_n=3,
        classes=BUILT_IN,
        capacity=sites_capacity(engine.arrays),
    )


def test_starts_and_stops_keep_the_calendar_a_fresh_one_would_be(
    tiny_map: ComputeNetworkMap,
) -> None:
    """Random starts (at fractional times, some ending within the second) and stops, some
    before the departure (preemption), some of rows that hold nothing: after each, from the
    calendar's now on, the kept calendar equals the rebuilt one, on every resource."""
    count = 60
    planner = planner_of(tiny_map, count)
    keys = list(planner.capacities)
    rng = random.Random(7)
    now = 0.0
    running: dict[int, float] = {}
    checked = 0
    for _ in range(400):
        now += rng.choice([0.0, 0.3, 0.7, 1.0, 5.5, 40.0])
        for row in [r for r, departs in running.items() if departs <= now]:
            planner.stop(row, now)
            del running[row]
        row = rng.randrange(count)
        if row in running:
            if rng.random() < 0.5:
                planner.stop(row, now)  # preempted before its departure
                del running[row]
        elif planner.options[row]:
            demand = dict(planner.options[row][0].demand)
            kept = planner.calendar.copy()
            kept.advance(max(kept.now, math.floor(now)))
            if not kept.fits(demand, Window(kept.now, kept.now + 1000)):
                continue
            departs = now + rng.choice([0.2, 1.0, 30.0, 300.5])
            work = RunningWork(
                id=row_id(row),
                tenant="t",
                class_value=0,
                preemptible=True,
                started_at=now,
                demand=Resources(),
                site="s",
            )
            planner.start(row, Held(work, demand, departs), now)
            running[row] = departs
        else:
            planner.stop(row, now)  # holds nothing: no change
        mine = planner.calendar.copy()
        mine.advance(max(mine.now, math.floor(now)))
        assert steps(mine, keys) == steps(rebuilt(planner, now), keys)
        checked += bool(running)
    assert checked > 100
    assert set(running) == {int(h.work.id) for h in planner.running()}


def test_every_round_of_a_run_sees_the_calendar_of_its_running_jobs(
    tiny_map: ComputeNetworkMap,
) -> None:
    """A busy run with classes and preemption: at each admission round the planner's
    calendar, moved on to the round's now, equals one built afresh from the jobs running
    in the ledger then."""
    jobs = [*two_low_and_one_high(), *mixed_jobs(150, seed=5)]
    classes = [*CLASSES, *draw_classes(150, DEFAULT_SHARES, 1)]
    run = _Run(
        tiny_map,
        jobs,
        policy="greedy",
        load=3.0,
        seed=1,
        queue_limit_s=1800,
        retry_every_s=60,
        round_gap_s=0,
        batch_window_s=0,
        config=EngineConfig(seed=1),
        admission=Admission.BACKFILL,
        priority_classes=classes,
    )
    planner = run.backfill
    assert planner is not None
    keys = list(planner.capacities)
    admission = planner.admission
    rounds = []

    def checked(
        queued: Sequence[QueuedWork],
        now: float,
        free_now: Callable[[str], Resources] | None = None,
        free_bandwidth_now: Callable[[str], int] | None = None,
    ) -> Round:
        assert {int(h.work.id) for h in planner.running()} == set(run.running)
        mine = planner.calendar.copy()
        mine.advance(max(mine.now, math.floor(now)))
        assert steps(mine, keys) == steps(rebuilt(planner, now), keys)
        rounds.append(now)
        return admission(queued, now, free_now, free_bandwidth_now)

    planner.admission = checked  # type: ignore[method-assign]
    result = run.run(horizon_s=None, samples=10)
    assert result.finished and len(rounds) > 20
    assert sum(o.preemptions for o in result.jobs) > 0
