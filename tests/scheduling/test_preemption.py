"""Preemption: the fewest victims on one site, of lower preemptible classes only."""

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.preemption import choose_victims
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import RunningWork, total_demand

NOW = 1_000.0


def running(
    id: str,
    *,
    cpu_m: int,
    class_value: int = 0,
    started_at: float = 0.0,
    site: str = "s1",
    preemptible: bool = True,
    accelerators: int = 0,
) -> RunningWork:
    return RunningWork(
        id=id,
        tenant="t",
        class_value=class_value,
        preemptible=preemptible,
        started_at=started_at,
        demand=Resources.of(cpu_m=cpu_m, accelerators={"A100": accelerators}),
        site=site,
    )


def test_the_lowest_class_goes_first_then_the_most_recent() -> None:
    work = [
        running("standard-new", cpu_m=4_000, class_value=10, started_at=900),
        running("batch-old", cpu_m=4_000, class_value=0, started_at=100),
        running("batch-new", cpu_m=4_000, class_value=0, started_at=800),
    ]
    need = Resources.of(cpu_m=4_000)
    assert choose_victims(need, 100, work, now=NOW) == ["batch-new"]
    assert choose_victims(Resources.of(cpu_m=8_000), 100, work, now=NOW) == [
        "batch-new",
        "batch-old",
    ]


def test_the_smallest_goes_first_among_equals_and_unneeded_victims_are_dropped() -> None:
    work = [
        running("small", cpu_m=1_000, started_at=500),
        running("big", cpu_m=4_000, started_at=500),
    ]
    # small is taken first, then big covers the need alone: small is dropped.
    assert choose_victims(Resources.of(cpu_m=4_000), 10, work, now=NOW) == ["big"]
    assert choose_victims(Resources.of(cpu_m=1_000), 10, work, now=NOW) == ["small"]


def test_never_a_peer_a_higher_class_or_non_preemptible_work() -> None:
    work = [
        running("peer", cpu_m=8_000, class_value=10),
        running("higher", cpu_m=8_000, class_value=50),
        running("protected", cpu_m=8_000, class_value=0, preemptible=False),
    ]
    assert choose_victims(Resources.of(cpu_m=1_000), 10, work, now=NOW) is None


def test_the_need_is_met_on_one_site_with_the_fewest_victims() -> None:
    work = [
        running("s1-a", cpu_m=2_000, site="s1", started_at=990),
        running("s1-b", cpu_m=2_000, site="s1", started_at=980),
        running("s2-a", cpu_m=4_000, site="s2", started_at=10),
        running("s3-a", cpu_m=3_000, site="s3", started_at=999),
    ]
    need = Resources.of(cpu_m=4_000)
    assert choose_victims(need, 10, work, now=NOW) == ["s2-a"]
    # Not across sites: s1 and s3 each fall short of 6000, s2 has one victim of 4000.
    assert choose_victims(Resources.of(cpu_m=6_000), 10, work, now=NOW) is None


def test_equal_counts_go_to_the_least_work_lost_then_the_site_id() -> None:
    work = [
        running("s1-old", cpu_m=4_000, site="s1", started_at=100),
        running("s2-new", cpu_m=4_000, site="s2", started_at=900),
        running("s3-new", cpu_m=4_000, site="s3", started_at=900),
    ]
    assert choose_victims(Resources.of(cpu_m=4_000), 10, work, now=NOW) == ["s2-new"]


def test_every_dimension_of_the_need_is_covered_and_others_do_not_count() -> None:
    work = [
        running("cpu-only", cpu_m=64_000, started_at=999),
        running("gpus", cpu_m=1_000, accelerators=4, started_at=10),
        running("more-gpus", cpu_m=1_000, accelerators=4, started_at=5),
    ]
    need = Resources.of(cpu_m=2_000, accelerators={"A100": 8})
    assert choose_victims(need, 10, work, now=NOW) == ["gpus", "more-gpus"]
    assert choose_victims(Resources.of(accelerators={"A100": 4}), 10, work, now=NOW) == ["gpus"]


def test_a_need_of_nothing_takes_nothing_and_bad_input_is_invalid() -> None:
    work = [running("a", cpu_m=1_000)]
    assert choose_victims(Resources(), 10, work, now=NOW) == []
    assert choose_victims(Resources({"cpu_m": -5}), 10, work, now=NOW) == []
    with pytest.raises(Invalid) as bad_class:
        choose_victims(Resources.of(cpu_m=1), True, work, now=NOW)
    assert bad_class.value.field == "preemptor_class_value"
    with pytest.raises(Invalid) as bad_now:
        choose_victims(Resources.of(cpu_m=1), 10, work, now=float("nan"))
    assert bad_now.value.field == "now"


candidates = st.builds(
    lambda i, cls, started, cpu, gpus, site, preemptible: running(
        f"w{i}",
        cpu_m=cpu,
        class_value=cls,
        started_at=started,
        site=site,
        preemptible=preemptible,
        accelerators=gpus,
    ),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=20),
    st.integers(min_value=0, max_value=1_000),
    st.integers(min_value=0, max_value=8_000),
    st.integers(min_value=0, max_value=4),
    st.sampled_from(["s1", "s2", "s3"]),
    st.booleans(),
)


def covers(works: list[RunningWork], need: Resources) -> bool:
    return need.fits(total_demand(works))


@settings(max_examples=300, deadline=None)
@given(
    work=st.lists(candidates, max_size=10, unique_by=lambda one: one.id),
    preemptor=st.integers(min_value=0, max_value=20),
    cpu=st.integers(min_value=0, max_value=20_000),
    gpus=st.integers(min_value=0, max_value=8),
)
def test_victims_are_minimal_eligible_and_on_one_site(
    work: list[RunningWork], preemptor: int, cpu: int, gpus: int
) -> None:
    need = Resources.of(cpu_m=cpu, accelerators={"A100": gpus})
    victims = choose_victims(need, preemptor, work, now=NOW)
    eligible = [one for one in work if one.preemptible and one.class_value < preemptor]
    sites = {one.site for one in eligible}
    coverable = need.is_zero() or any(
        covers([one for one in eligible if one.site == site], need) for site in sites
    )
    if victims is None:
        assert not coverable
        return
    assert coverable
    by_id = {one.id: one for one in work}
    chosen = [by_id[victim] for victim in victims]
    assert len(set(victims)) == len(victims)
    assert all(one.preemptible and one.class_value < preemptor for one in chosen)
    assert len({one.site for one in chosen}) <= 1
    assert covers(chosen, need)
    for size in range(len(chosen)):
        for subset in itertools.combinations(chosen, size):
            assert not covers(list(subset), need)
