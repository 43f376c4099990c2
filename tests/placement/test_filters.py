"""Each filter plugin on the tiny map: which sites it keeps, and its code."""

from typing import Any

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.filters.accelerator_model import AcceleratorModelFilter
from cnbrain.placement.filters.capacity import CapacityFilter
from cnbrain.placement.filters.cpu_arch import CpuArchFilter
from cnbrain.placement.filters.hub_across_provinces import HubAcrossProvincesFilter
from cnbrain.placement.filters.idle_in_province import IdleInProvinceFilter
from cnbrain.placement.filters.interconnect import InterconnectFilter
from cnbrain.placement.filters.labels import LabelsFilter
from cnbrain.placement.filters.latency_bound import LatencyBoundFilter
from cnbrain.placement.filters.regions import RegionsFilter
from cnbrain.placement.framework import Code, FilterPlugin
from cnbrain.placement.registry import FILTERS
from tests.tiny_map import cycle_state, request, site_ids

ALL = {"AA-dc", "AA-idle", "BB-hub", "BB-dc", "CC-hub"}


def kept(cmap: ComputeNetworkMap, plugin: FilterPlugin, **overrides: Any) -> set[str]:
    state = cycle_state(cmap, [request(**overrides)])
    mask = plugin.filter(state)
    assert mask.shape == (1, len(cmap.sites))
    return site_ids(cmap, mask[0])


def test_every_registered_filter_has_a_reason_and_a_code() -> None:
    for name, factory in FILTERS.items():
        plugin = factory()
        assert plugin.name == name
        assert plugin.reason
        assert plugin.code in set(Code)


def test_regions_allow_and_deny(tiny_map: ComputeNetworkMap) -> None:
    f = RegionsFilter()
    assert kept(tiny_map, f) == ALL
    assert kept(tiny_map, f, constraints={"regions_allowed": ["west"]}) == {"CC-hub"}
    assert kept(tiny_map, f, constraints={"regions_allowed": ["AA", "west"]}) == {
        "AA-dc",
        "AA-idle",
        "CC-hub",
    }
    assert kept(tiny_map, f, constraints={"regions_denied": ["BB"]}) == {
        "AA-dc",
        "AA-idle",
        "CC-hub",
    }
    assert kept(
        tiny_map, f, constraints={"regions_allowed": ["east"], "regions_denied": ["AA"]}
    ) == {
        "BB-hub",
        "BB-dc",
    }


def test_idle_sites_serve_only_their_own_province(tiny_map: ComputeNetworkMap) -> None:
    f = IdleInProvinceFilter()
    assert "AA-idle" in kept(tiny_map, f, source_province="AA")
    assert kept(tiny_map, f, source_province="BB") == ALL - {"AA-idle"}


def test_only_hubs_across_provinces(tiny_map: ComputeNetworkMap) -> None:
    f = HubAcrossProvincesFilter()
    assert kept(tiny_map, f, source_province="AA") == {"AA-dc", "AA-idle", "BB-hub", "CC-hub"}
    assert kept(tiny_map, f, source_province="BB") == {"BB-hub", "BB-dc", "CC-hub"}
    assert f.code is Code.UNRESOLVABLE


def test_cpu_arch(tiny_map: ComputeNetworkMap) -> None:
    f = CpuArchFilter()
    assert kept(tiny_map, f) == ALL
    assert kept(tiny_map, f, constraints={"cpu_arch": "aarch64"}) == {"CC-hub"}
    assert kept(tiny_map, f, constraints={"cpu_arch": "x86_64"}) == ALL - {"CC-hub"}


def test_interconnect_is_a_minimum(tiny_map: ComputeNetworkMap) -> None:
    f = InterconnectFilter()
    assert kept(tiny_map, f, constraints={"interconnect": "ethernet"}) == ALL
    assert kept(tiny_map, f, constraints={"interconnect": "roce"}) == {"BB-hub", "CC-hub"}
    assert kept(tiny_map, f, constraints={"interconnect": "ib"}) == {"BB-hub", "CC-hub"}


def test_labels(tiny_map: ComputeNetworkMap) -> None:
    f = LabelsFilter()
    assert kept(tiny_map, f, constraints={"labels": {"tier": "gold"}}) == {"AA-dc"}
    assert kept(tiny_map, f, constraints={"labels": {"tier": "silver"}}) == set()


def test_accelerator_model(tiny_map: ComputeNetworkMap) -> None:
    f = AcceleratorModelFilter()
    assert kept(tiny_map, f) == ALL
    a100 = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 1}}
    assert kept(tiny_map, f, resources=a100) == {"AA-dc", "BB-hub", "BB-dc", "CC-hub"}
    ascend = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "Ascend910B", "count": 1}}
    assert kept(tiny_map, f, resources=ascend) == {"CC-hub"}
    absent = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "MLU370", "count": 1}}
    assert kept(tiny_map, f, resources=absent) == set()


def test_capacity_counts_every_dimension(tiny_map: ComputeNetworkMap) -> None:
    f = CapacityFilter()
    assert f.code is Code.UNSCHEDULABLE
    assert kept(tiny_map, f, resources={"cpu": 100, "memory_gib": 1}) == {
        "BB-hub",
        "BB-dc",
        "CC-hub",
    }
    assert kept(tiny_map, f, resources={"cpu": 1, "memory_gib": 2000}) == {"BB-hub", "CC-hub"}
    big_gpu = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 10}}
    assert kept(tiny_map, f, resources=big_gpu) == {"BB-hub", "CC-hub"}
    assert kept(tiny_map, f, resources={"cpu": 1, "memory_gib": 1, "storage_gib": 20000}) == set()
    fractional = {"cpu": 31.9995, "memory_gib": 1}
    assert "AA-idle" in kept(tiny_map, f, resources=fractional)
    assert "AA-idle" not in kept(tiny_map, f, resources={"cpu": 32.001, "memory_gib": 1})


def test_latency_bound_uses_the_best_possible_path(tiny_map: ComputeNetworkMap) -> None:
    f = LatencyBoundFilter()
    assert kept(tiny_map, f) == ALL
    # AA-acc -> AA-gw 0.3, -> BB-gw 2.0, -> BB-agg1 0.5, -> site 0.2: 3.0 ms to BB sites.
    assert kept(tiny_map, f, constraints={"max_latency_ms": 3.0}) == {
        "AA-dc",
        "AA-idle",
        "BB-hub",
        "BB-dc",
    }
    assert kept(tiny_map, f, constraints={"max_latency_ms": 2.99}) == {"AA-dc", "AA-idle"}
    # AA-acc -> AA-agg1 0.6 -> site 0.2: 0.8 ms locally.
    assert kept(tiny_map, f, constraints={"max_latency_ms": 0.8}) == {"AA-dc", "AA-idle"}
    assert kept(tiny_map, f, constraints={"max_latency_ms": 0.79}) == set()
