"""The order of waiting work: class, then weighted DRF between tenants, then age."""

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork

CLASSES = PriorityClasses(
    [
        PriorityClass("critical", 100, False, 0),
        PriorityClass("standard", 10, True, 600),
        PriorityClass("batch", 0, True, 3600),
    ],
    default="standard",
)
CAPACITY = Resources.of(cpu_m=100_000, mem_mib=100_000)
CPU = Resources.of(cpu_m=1000)


def work(
    id: str, tenant: str, at: float, *, cls: str = "standard", demand: Resources = CPU
) -> QueuedWork:
    return QueuedWork(id=id, tenant=tenant, class_name=cls, demand=demand, submitted_at=at)


def ids(order: list[QueuedWork]) -> list[str]:
    return [one.id for one in order]


def test_a_higher_class_goes_first_whatever_its_tenant_holds_or_its_age() -> None:
    queued = [
        work("old-batch", "a", 0, cls="batch"),
        work("standard", "a", 5),
        work("critical", "b", 9, cls="critical"),
    ]
    heavy = {"b": Resources.of(cpu_m=90_000)}
    order = fair_order(queued, classes=CLASSES, usage=heavy, capacity=CAPACITY)
    assert ids(order) == ["critical", "standard", "old-batch"]


def test_within_a_class_the_tenant_of_the_lowest_share_goes_first() -> None:
    queued = [work("a-1", "a", 0), work("b-1", "b", 1)]
    usage = {"a": Resources.of(mem_mib=40_000), "b": Resources.of(cpu_m=10_000)}
    assert ids(fair_order(queued, classes=CLASSES, usage=usage, capacity=CAPACITY)) == [
        "b-1",
        "a-1",
    ]


def test_a_tenant_with_many_requests_does_not_take_every_slot() -> None:
    queued = [work(f"a-{i}", "a", i) for i in range(4)] + [work("b-0", "b", 10)]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY)
    assert ids(order) == ["a-0", "b-0", "a-1", "a-2", "a-3"]


def test_age_breaks_ties_of_equal_shares_then_the_id() -> None:
    queued = [work("b-1", "b", 5), work("a-1", "a", 7), work("c-1", "c", 5)]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY)
    assert ids(order) == ["b-1", "c-1", "a-1"]


def test_shares_equal_as_floats_are_still_ordered_exactly() -> None:
    big = 10**17
    capacity = Resources.of(cpu_m=big, mem_mib=big + 1)
    # 3/(10**17 + 1) < 3/10**17, though both are the same float.
    assert 3 / big == 3 / (big + 1)
    usage = {"a": Resources.of(cpu_m=3), "b": Resources.of(mem_mib=3)}
    queued = [work("a-1", "a", 0), work("b-1", "b", 5)]
    order = fair_order(queued, classes=CLASSES, usage=usage, capacity=capacity)
    assert ids(order) == ["b-1", "a-1"]


def test_a_tenants_own_requests_come_oldest_first() -> None:
    queued = [work("a-late", "a", 9), work("a-early", "a", 1), work("a-mid", "a", 5)]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY)
    assert ids(order) == ["a-early", "a-mid", "a-late"]


def test_weights_scale_the_share() -> None:
    usage = {"a": Resources.of(cpu_m=20_000), "b": Resources.of(cpu_m=15_000)}
    queued = [work("a-1", "a", 0), work("b-1", "b", 0)]
    assert ids(fair_order(queued, classes=CLASSES, usage=usage, capacity=CAPACITY)) == [
        "b-1",
        "a-1",
    ]
    weighted = fair_order(
        queued, classes=CLASSES, usage=usage, capacity=CAPACITY, weights={"a": 2.0}
    )
    assert ids(weighted) == ["a-1", "b-1"]


def test_usage_picked_in_a_higher_class_counts_in_the_lower_ones() -> None:
    queued = [
        work("a-critical", "a", 0, cls="critical", demand=Resources.of(cpu_m=50_000)),
        work("a-batch", "a", 0, cls="batch"),
        work("b-batch", "b", 1, cls="batch"),
    ]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY)
    assert ids(order) == ["a-critical", "b-batch", "a-batch"]


def test_the_order_does_not_change_the_callers_usage() -> None:
    usage = {"a": Resources.of(cpu_m=1)}
    fair_order([work("a-1", "a", 0)], classes=CLASSES, usage=usage, capacity=CAPACITY)
    assert usage == {"a": Resources.of(cpu_m=1)}


@settings(max_examples=40, deadline=None)
@given(
    picks=st.integers(min_value=1, max_value=120),
    ages=st.lists(st.integers(min_value=0, max_value=20), min_size=360, max_size=360),
)
def test_fair_shares_converge_to_the_weights(picks: int, ages: list[int]) -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 3.0}
    queued = [
        work(f"{tenant}-{i:03d}", tenant, ages[t * 120 + i])
        for t, tenant in enumerate(weights)
        for i in range(120)
    ]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY, weights=weights)
    counts = dict.fromkeys(weights, 0)
    for one in order[:picks]:
        counts[one.tenant] += 1
    total = sum(weights.values())
    for tenant, weight in weights.items():
        assert abs(counts[tenant] - picks * weight / total) <= 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["critical", "standard", "batch"]),
            st.integers(min_value=0, max_value=5_000),
            st.integers(min_value=0, max_value=100),
        ),
        max_size=40,
    )
)
def test_the_order_is_a_permutation_sorted_by_class(
    drawn: list[tuple[str, str, int, int]],
) -> None:
    queued = [
        work(f"q{i}", tenant, at, cls=cls, demand=Resources.of(cpu_m=cpu))
        for i, (tenant, cls, cpu, at) in enumerate(drawn)
    ]
    order = fair_order(queued, classes=CLASSES, usage={}, capacity=CAPACITY)
    assert sorted(ids(order)) == sorted(ids(queued))
    values = [CLASSES.get(one.class_name).value for one in order]
    assert values == sorted(values, reverse=True)
    assert order == fair_order(reversed(queued), classes=CLASSES, usage={}, capacity=CAPACITY)


def test_bad_input_is_invalid_naming_the_field() -> None:
    with pytest.raises(Invalid) as unknown:
        fair_order([work("q", "a", 0, cls="nightly")], classes=CLASSES, usage={}, capacity=CAPACITY)
    assert unknown.value.field == "priority_class"
    with pytest.raises(Invalid) as twice:
        fair_order(
            [work("q", "a", 0), work("q", "b", 0)], classes=CLASSES, usage={}, capacity=CAPACITY
        )
    assert twice.value.field == "queued[1].id"
    for weight in (0.0, -1.0, float("inf")):
        with pytest.raises(Invalid) as bad_weight:
            fair_order([], classes=CLASSES, usage={}, capacity=CAPACITY, weights={"a": weight})
        assert bad_weight.value.field == "weights.a"
    with pytest.raises(Invalid) as negative:
        work("q", "a", 0, demand=Resources.of(cpu_m=-1))
    assert negative.value.field == "demand"
