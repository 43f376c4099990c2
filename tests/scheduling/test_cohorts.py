"""Quotas over time: nominal quotas, borrowing within a cohort's limits, and reclaim."""

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from cnbrain.domain.errors import Invalid, NotFound
from cnbrain.scheduling.cohorts import Cohort, TenantQuota
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import RunningWork, total_demand, usage_by_tenant


def cpu(amount: int) -> Resources:
    return Resources.of(cpu_m=amount)


def cohort() -> Cohort:
    return Cohort(
        "research",
        {
            "a": TenantQuota(nominal=cpu(10_000), borrowing_limit=cpu(5_000)),
            "b": TenantQuota(nominal=cpu(10_000)),
            "c": TenantQuota(nominal=cpu(10_000), borrowing_limit=cpu(20_000)),
        },
    )


def running(id: str, tenant: str, started_at: float, cpu_m: int) -> RunningWork:
    return RunningWork(
        id=id,
        tenant=tenant,
        class_value=0,
        preemptible=True,
        started_at=started_at,
        demand=cpu(cpu_m),
        site="s1",
    )


def test_within_its_nominal_a_tenant_is_admitted_on_it() -> None:
    admission = cohort().can_admit("a", cpu(2_000), {"a": cpu(8_000), "b": cpu(10_000)})
    assert admission.verdict == "nominal"
    assert admission.admitted
    assert admission.borrowed.is_zero()


def test_beyond_its_nominal_a_tenant_borrows_the_idle_quota_of_others() -> None:
    usage = {"a": cpu(10_000), "b": cpu(2_000), "c": cpu(10_000)}
    admission = cohort().can_admit("a", cpu(3_000), usage)
    assert admission.verdict == "borrowing"
    assert admission.borrowed == cpu(3_000)


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    usage = {"a": cpu(10_000), "b": cpu(0), "c": cpu(0)}
    admission = cohort().can_admit("a", cpu(6_000), usage)
    assert admission.verdict == "refused"
    assert not admission.admitted
    assert admission.reason == (
        "cpu_m: tenant 'a' would hold 16000, 6000 beyond its nominal 10000, "
        "but may borrow at most 5000"
    )
    refused = cohort().can_admit("b", cpu(10_001), {})
    assert refused.reason is not None
    assert "may borrow at most 0" in refused.reason


def test_borrowing_stops_at_what_the_others_leave_unused() -> None:
    usage = {"a": cpu(12_000), "b": cpu(4_000), "c": cpu(10_000)}
    admission = cohort().can_admit("c", cpu(5_000), usage)
    assert admission.reason == (
        "cpu_m: tenant 'c' would hold 15000, 5000 beyond its nominal 10000, "
        "but the cohort's other members leave 4000 unused"
    )


def test_a_dimension_without_quota_is_refused_by_name() -> None:
    admission = cohort().can_admit("c", Resources.of(accelerators={"A100": 1}), {})
    assert admission.reason is not None
    assert admission.reason.startswith("accelerator:A100: tenant 'c' would hold 1")


def test_borrowed_is_the_use_beyond_the_nominal() -> None:
    assert cohort().borrowed("a", cpu(13_000)) == cpu(3_000)
    assert cohort().borrowed("a", cpu(9_000)).is_zero()


def test_reclaim_takes_the_borrowers_most_recent_work_back_for_the_lender() -> None:
    work = [
        running("a-base", "a", 0, 10_000),
        running("a-old", "a", 1, 2_000),
        running("a-new", "a", 5, 1_000),
        running("b-1", "b", 2, 2_000),
        running("c-1", "c", 9, 10_000),  # c is within its nominal: not borrowed
    ]
    victims = cohort().reclaim("b", cpu(8_000), work)
    assert victims == ["a-new", "a-old"]
    left = [one for one in work if one.id not in victims]
    assert cohort().can_admit("b", cpu(8_000), usage_by_tenant(left)).verdict == "nominal"
    total = total_demand(left) + cpu(8_000)
    assert total.fits(cpu(30_000))


def test_reclaim_drops_a_victim_that_is_not_needed() -> None:
    work = [
        running("a-base", "a", 0, 10_000),
        running("a-big", "a", 1, 3_000),
        running("a-small", "a", 5, 1_000),
        running("c-1", "c", 0, 10_000),
    ]
    # b holds nothing; the cohort leaves 6000 unused: b wanting 9000 is 3000 short, and
    # a-big alone covers that once a-small is taken first.
    assert cohort().reclaim("b", cpu(9_000), work) == ["a-big"]
    assert cohort().reclaim("b", cpu(7_000), work) == ["a-small"]
    assert cohort().reclaim("b", cpu(10_000), work) == ["a-small", "a-big"]


def test_reclaim_takes_the_most_recent_borrowers_work_whoever_the_borrower() -> None:
    work = [
        running("a-base", "a", 0, 10_000),
        running("a-borrowed", "a", 1, 4_000),
        running("c-1", "c", 2, 13_000),
    ]
    assert cohort().reclaim("b", cpu(7_000), work) == ["c-1"]


def test_reclaim_needs_nothing_when_the_unused_quota_covers_the_need() -> None:
    work = [running("a-1", "a", 0, 12_000)]
    assert cohort().reclaim("b", cpu(8_000), work) == []


def test_reclaim_refuses_a_need_beyond_the_lenders_unused_nominal() -> None:
    work = [running("a-1", "a", 0, 12_000), running("c-1", "c", 0, 9_000)]
    with pytest.raises(Invalid) as beyond:
        cohort().reclaim("c", cpu(2_000), work)
    assert beyond.value.field == "need"
    assert cohort().reclaim("c", cpu(1_000), work) == []


def test_reclaim_preempts_borrowed_work_even_when_partly_within_its_nominal() -> None:
    quotas = {"a": TenantQuota(cpu(10_000), cpu(10_000)), "b": TenantQuota(cpu(10_000))}
    shrunk = Cohort("pair", quotas)
    assert shrunk.reclaim("b", cpu(10_000), [running("a-1", "a", 0, 20_000)]) == ["a-1"]
    assert shrunk.reclaim("b", cpu(10_000), [running("a-1", "a", 0, 10_000)]) == []


def test_members_and_bad_quotas() -> None:
    with pytest.raises(NotFound):
        cohort().can_admit("z", cpu(1), {})
    with pytest.raises(NotFound):
        cohort().reclaim("z", cpu(1), [])
    with pytest.raises(Invalid) as negative_demand:
        cohort().can_admit("a", cpu(-1), {})
    assert negative_demand.value.field == "demand"
    with pytest.raises(Invalid) as negative:
        TenantQuota(nominal=cpu(-1))
    assert negative.value.field == "nominal"
    with pytest.raises(Invalid):
        Cohort("empty", {})
    assert cohort().members == ("a", "b", "c")


usages = st.integers(min_value=0, max_value=30_000)


@settings(max_examples=200, deadline=None)
@given(
    tenant=st.sampled_from(["a", "b", "c"]),
    demand=st.integers(min_value=0, max_value=30_000),
    held=st.tuples(usages, usages, usages),
)
def test_admission_keeps_borrowing_within_the_limit_and_the_cohort(
    tenant: str, demand: int, held: tuple[int, int, int]
) -> None:
    group = cohort()
    usage = {name: cpu(amount) for name, amount in zip("abc", held, strict=True)}
    quota = group.quota(tenant)
    after = usage[tenant] + cpu(demand)
    others = sum((group.quota(m).nominal - usage[m] for m in "abc" if m != tenant), Resources())
    admission = group.can_admit(tenant, cpu(demand), usage)
    excess = (after - quota.nominal).positive_part()
    within = excess.fits(quota.borrowing_limit) and excess.fits(others)
    if excess.is_zero():
        assert admission.verdict == "nominal"
    elif within:
        assert admission.verdict == "borrowing"
        assert admission.borrowed == excess
    else:
        assert admission.verdict == "refused"
        assert admission.reason is not None
        assert admission.reason.startswith("cpu_m: ")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "c"]),
            st.integers(min_value=1, max_value=6_000),
            st.integers(min_value=0, max_value=100),
        ),
        max_size=12,
    ),
    st.integers(min_value=0, max_value=10_000),
)
def test_reclaim_returns_the_lenders_nominal_with_minimal_victims(
    drawn: list[tuple[str, int, int]], need: int
) -> None:
    group = cohort()
    work = [running(f"w{i}", tenant, at, amount) for i, (tenant, amount, at) in enumerate(drawn)]
    victims = group.reclaim("b", cpu(need), work)
    by_id = {one.id: one for one in work}
    assert len(set(victims)) == len(victims)
    left = [one for one in work if one.id not in victims]

    def lender_fits(rest: list[RunningWork]) -> bool:
        return (total_demand(rest) + cpu(need)).fits(cpu(30_000))

    if not need:  # nothing to reclaim, even where the others hold more than the cohort's whole
        assert victims == []
        return
    assert lender_fits(left)
    held = usage_by_tenant(work)
    for victim in victims:
        tenant = by_id[victim].tenant
        assert tenant != "b"
        assert held[tenant]["cpu_m"] > group.quota(tenant).nominal["cpu_m"]
        assert not lender_fits([*left, by_id[victim]])
