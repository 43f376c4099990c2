"""The congestion price: a resource's share times (64^u - 1) / 63 at its load u once held,
over the part's length in runs, read against the job's compute share; compute held before
the run (from the start of its staging) costs more, not less."""

import pytest

from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.timed_demand import Part, TimedDemand
from cnbrain.scheduling import congestion

RUN = 100


def _f(load: float) -> float:
    return float((64.0**load - 1) / 63)


def test_each_part_is_priced_at_its_load_over_its_window() -> None:
    calendar = Calendar({"cpu": 10, "link": 10}, now=0)
    calendar.take({"link": 3}, Window(0, 50))
    demand = TimedDemand([Part("cpu", 5, 0, RUN), Part("link", 5, 0, 50)])
    # cpu: share 0.5 at load 0.5 over one run; link: share 0.5 at load 0.8 over half a run;
    # read against the compute share, 0.5.
    expected = (0.5 * _f(0.5) + 0.5 * _f(0.8) * 0.5) / 0.5
    assert congestion.price(calendar, demand, {"cpu"}, 0, duration=RUN) == pytest.approx(expected)
    # No compute: the parts' prices alone.
    links = TimedDemand([Part("link", 5, 0, 50)])
    assert congestion.price(calendar, links, set(), 0, duration=RUN) == pytest.approx(
        0.5 * _f(0.8) * 0.5
    )


def test_compute_held_from_the_staging_costs_more_than_over_the_run() -> None:
    calendar = Calendar({"cpu": 10, "link": 10}, now=0)
    staging = Part("link", 5, -50, 50)
    over_run = TimedDemand([Part("cpu", 5, 0, RUN), staging])
    from_staging = TimedDemand([Part("cpu", 5, -50, RUN + 50), staging])
    run_price = congestion.price(calendar, over_run, {"cpu"}, 50, duration=RUN)
    held_price = congestion.price(calendar, from_staging, {"cpu"}, 50, duration=RUN)
    assert run_price == pytest.approx((0.5 * _f(0.5) + 0.5 * _f(0.5) * 0.5) / 0.5)
    assert held_price == pytest.approx((0.5 * _f(0.5) * 1.5 + 0.5 * _f(0.5) * 0.5) / 0.5)
    assert held_price > run_price


def test_the_score_adds_the_objective_and_the_delay_in_runs() -> None:
    calendar = Calendar({"cpu": 10}, now=0)
    demand = TimedDemand([Part("cpu", 10, 0, RUN)])
    score = congestion.score(
        calendar, demand, {"cpu"}, 150, first_start=100, duration=RUN, objective=0.25
    )
    assert score == pytest.approx(0.25 + 1.0 + 0.5)  # full: its whole share; half a run late
