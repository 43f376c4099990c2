"""Preemption: the fewest victims on one site, of lower preemptible classes only; what an
option lacks on the links of its path is freed by the work holding them, wherever it runs."""

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.preemption import choose_victims, until_enough
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
    links: dict[str, int] | None = None,
) -> RunningWork:
    return RunningWork(
        id=id,
        tenant="t",
        class_value=class_value,
        preemptible=preemptible,
        started_at=started_at,
        demand=Resources.of(cpu_m=cpu_m, accelerators={"A100": accelerators}),
        site=site,
        bandwidth=Resources.bandwidth(links or {}),
    )


def link(mbps_by_link: dict[str, int], *, cpu_m: int = 0) -> Resources:
    """A need of bandwidth on links (and of compute on the option's site)."""
    return Resources.bandwidth(mbps_by_link) + Resources.of(cpu_m=cpu_m)


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


# --- links ------------------------------------------------------------------------------------


def test_a_need_on_a_link_takes_the_lowest_class_holders_of_it_on_any_site() -> None:
    work = [
        running("normal-l1", cpu_m=0, class_value=10, started_at=950, site="s2", links={"L1": 4}),
        running("low-old-l1", cpu_m=0, started_at=100, site="s2", links={"L1": 4}),
        running("low-new-l1", cpu_m=0, started_at=800, site="s3", links={"L1": 4}),
        # Newer still, but they free nothing the need lacks: passed over.
        running("low-s1-cpu", cpu_m=8_000, started_at=999, site="s1"),
        running("low-l2", cpu_m=1_000, started_at=999, site="s1", links={"L2": 8}),
    ]
    assert choose_victims(link({"L1": 4}), 10, work, now=NOW, site="s1") == ["low-new-l1"]
    assert choose_victims(link({"L1": 8}), 10, work, now=NOW, site="s1") == [
        "low-new-l1",
        "low-old-l1",
    ]
    # Never a same-class holder: class 10 may not take normal-l1; class 11 may, last.
    assert choose_victims(link({"L1": 12}), 10, work, now=NOW, site="s1") is None
    assert choose_victims(link({"L1": 12}), 11, work, now=NOW, site="s1") == [
        "low-new-l1",
        "low-old-l1",
        "normal-l1",
    ]
    # The holders run on s2 and s3, not on the option's site: the site does not matter.
    assert choose_victims(link({"L1": 4}), 10, work, now=NOW, site="s9") == ["low-new-l1"]


def test_compute_on_another_site_frees_nothing_for_the_option() -> None:
    work = [
        running("s2-big", cpu_m=64_000, started_at=900, site="s2", links={"L1": 4}),
        running("s1-small", cpu_m=4_000, started_at=100, site="s1"),
    ]
    need = link({"L1": 4}, cpu_m=4_000)
    # s2-big frees L1 only (its compute is on s2); s1-small frees the compute on s1.
    assert choose_victims(need, 10, work, now=NOW, site="s1") == ["s2-big", "s1-small"]
    assert choose_victims(need, 10, work[:1], now=NOW, site="s1") is None


def test_a_need_of_compute_and_a_link_is_covered_by_a_minimal_set() -> None:
    work = [
        running("s2-l1", cpu_m=0, started_at=950, site="s2", links={"L1": 4}),
        running("s1-cpu", cpu_m=2_000, started_at=900, site="s1"),
        running("s1-both", cpu_m=4_000, started_at=800, site="s1", links={"L1": 4}),
    ]
    need = link({"L1": 4}, cpu_m=4_000)
    # Taken in order s2-l1, s1-cpu, s1-both; s1-both alone covers it, the others are dropped.
    assert choose_victims(need, 10, work, now=NOW, site="s1") == ["s1-both"]
    # Without s1-both: the link by s2-l1, but 2_000 of the compute stays lacking.
    assert choose_victims(need, 10, work[:2], now=NOW, site="s1") is None


def test_without_a_site_the_best_site_is_chosen_for_a_need_with_links() -> None:
    work = [
        running("s1-cpu", cpu_m=4_000, started_at=900, site="s1"),
        running("s2-both", cpu_m=4_000, started_at=100, site="s2", links={"L1": 4}),
    ]
    need = link({"L1": 4}, cpu_m=4_000)
    # On s1 it takes two (s2-both for the link, s1-cpu for the compute), on s2 one.
    assert choose_victims(need, 10, work, now=NOW, site="s1") == ["s1-cpu", "s2-both"]
    assert choose_victims(need, 10, work, now=NOW) == ["s2-both"]


def test_bandwidth_must_name_links_and_compute_no_link() -> None:
    with pytest.raises(Invalid) as not_a_link:
        RunningWork("a", "t", 0, True, 0.0, Resources(), "s1", Resources.of(cpu_m=1))
    assert not_a_link.value.field == "bandwidth"
    with pytest.raises(Invalid) as negative:
        RunningWork("a", "t", 0, True, 0.0, Resources(), "s1", Resources.bandwidth({"L1": -1}))
    assert negative.value.field == "bandwidth"
    with pytest.raises(Invalid) as link_in_demand:
        RunningWork("a", "t", 0, True, 0.0, Resources.bandwidth({"L1": 1}), "s1")
    assert link_in_demand.value.field == "demand"
    with pytest.raises(Invalid) as bad_site:
        choose_victims(link({"L1": 1}), 10, [], now=NOW, site="")
    assert bad_site.value.field == "site"


def frees_all(works: list[RunningWork], site: str) -> Resources:
    return sum((one.frees(site) for one in works), Resources())


holders = st.builds(
    lambda i, cls, started, cpu, site, preemptible, links: running(
        f"w{i}",
        cpu_m=cpu,
        class_value=cls,
        started_at=started,
        site=site,
        preemptible=preemptible,
        links=links,
    ),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=20),
    st.integers(min_value=0, max_value=1_000),
    st.integers(min_value=0, max_value=8_000),
    st.sampled_from(["s1", "s2", "s3"]),
    st.booleans(),
    st.dictionaries(
        st.sampled_from(["L1", "L2", "L3"]), st.integers(min_value=0, max_value=100), max_size=3
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    work=st.lists(holders, max_size=10, unique_by=lambda one: one.id),
    preemptor=st.integers(min_value=0, max_value=20),
    site=st.sampled_from(["s1", "s2", "s3"]),
    cpu=st.integers(min_value=0, max_value=20_000),
    links=st.dictionaries(
        st.sampled_from(["L1", "L2", "L3"]), st.integers(min_value=0, max_value=200), max_size=3
    ),
)
def test_victims_for_an_option_cover_its_need_of_compute_and_links_minimally(
    work: list[RunningWork], preemptor: int, site: str, cpu: int, links: dict[str, int]
) -> None:
    need = link(links, cpu_m=cpu)
    victims = choose_victims(need, preemptor, work, now=NOW, site=site)
    eligible = [one for one in work if one.preemptible and one.class_value < preemptor]
    coverable = need.fits(frees_all(eligible, site))
    if victims is None:
        assert not coverable
        return
    assert coverable
    by_id = {one.id: one for one in work}
    chosen = [by_id[victim] for victim in victims]
    assert len(set(victims)) == len(victims)
    assert all(one.preemptible and one.class_value < preemptor for one in chosen)
    assert need.fits(frees_all(chosen, site))
    for size in range(len(chosen)):
        for subset in itertools.combinations(chosen, size):
            assert not need.fits(frees_all(list(subset), site))


def test_until_enough_adds_work_on_the_site_in_rule_order_and_keeps_only_what_is_needed() -> None:
    """The nodes are freed once `b` and `d` are gone (say, both on the node the gang needs)."""
    candidates = [
        running("a", cpu_m=1000, class_value=0, started_at=10.0),
        running("b", cpu_m=1000, class_value=0, started_at=30.0),
        running("c", cpu_m=1000, class_value=0, started_at=20.0),
        running("d", cpu_m=1000, class_value=1, started_at=50.0),
        running("elsewhere", cpu_m=1000, class_value=0, started_at=60.0, site="s2"),
    ]

    def enough(ids: frozenset[str]) -> bool:
        return {"b", "d"} <= ids

    # Taken b, c, a (class 0, most recent first), then d; c and a were not needed.
    assert until_enough([], candidates, "s1", enough) == ["b", "d"]
    # Victims chosen for the totals stay, needed or not.
    assert until_enough(["a"], candidates, "s1", enough) == ["a", "b", "d"]
    assert until_enough(["b", "d"], candidates, "s1", enough) == ["b", "d"]
    assert until_enough([], candidates, "s1", lambda ids: "elsewhere" in ids) is None
