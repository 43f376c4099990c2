"""Steering decisions of the engine onto the tiny map's netlab: every owner installs its own
segments, and real UDP traffic from a users' host follows exactly the decision's hops, at no
more than its reserved rate."""

import asyncio
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import HostKind, LabPlan, headends
from cnbrain.dataplane.steering import NetlabSteering, SteeringError
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from tests.dataplane.conftest import TINY_LAB
from tests.dataplane.paths import hops_of
from tests.dataplane.traffic import Receiver, blast, job_of, traffic
from tests.tiny_map import request

pytestmark = pytest.mark.usefixtures("lab_tools")

OWNERS = ("east", "national", "west")
USERS = f"{TINY_LAB}-AA-acc@users"


def ascend(gbps: float, **extra: Any) -> dict[str, Any]:
    """A request from AA for an Ascend910B, which only CC-hub (region west) has: its path
    crosses the east, the backbone and the west."""
    return {
        "resources": {
            "cpu": 1,
            "memory_gib": 1,
            "accelerator": {"model": "Ascend910B", "count": 1},
        },
        "constraints": {"min_bandwidth_gbps": gbps},
        **extra,
    }


def placed(cmap: ComputeNetworkMap, *bodies: dict[str, Any]) -> list[Decision]:
    decisions = PlacementEngine(cmap).place_batch([request(**b) for b in bodies], reserve=True)
    assert all(d.status is DecisionStatus.PLACED for d in decisions), decisions
    return decisions


def steer(decisions: Sequence[Decision], owners: Sequence[str] = OWNERS) -> None:
    async def install() -> None:
        for owner in owners:
            steering = NetlabSteering(lab=TINY_LAB, owner=owner)
            try:
                await steering.install(decisions)
            finally:
                steering.close()

    asyncio.run(install())


def unsteer(decisions: Sequence[Decision], owners: Sequence[str] = OWNERS) -> None:
    async def remove() -> None:
        for owner in owners:
            steering = NetlabSteering(lab=TINY_LAB, owner=owner)
            try:
                await steering.remove(decisions)
            finally:
                steering.close()

    asyncio.run(remove())


def test_traffic_follows_exactly_the_hops_of_a_path_steered_by_its_three_owners(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    [decision] = placed(tiny_map, ascend(0.01))
    assert decision.site == "CC-hub"
    assert decision.path is not None
    assert [s.owner for s in decision.path.segments] == list(OWNERS)
    steer([decision])

    got, hops = traffic(tiny_lab, decision, USERS, 300)

    assert got == 300
    assert hops == dict.fromkeys(hops_of(decision), 300)


def test_each_owner_installs_only_its_own_segments(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    [decision] = placed(tiny_map, ascend(0.01))
    steer([decision], owners=["east"])
    job = job_of(tiny_lab, decision)
    routes = linux.Headends()
    try:
        installed = {
            host.node
            for host in tiny_lab.host_of.values()
            if routes.installed(host.namespace, job) == decision.reservation_id
        }
    finally:
        routes.close()

    assert installed == {"AA-acc"}
    got, hops = traffic(tiny_lab, decision, USERS, 50)
    assert got == 0  # the backbone's and the west's segments are not steered
    assert hops == {("AA-acc", "users"): 50, ("AA-gw", "AA-acc--AA-gw"): 50}


def test_traffic_goes_at_no_more_than_the_reserved_rate(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    gbps = 0.008  # 1,000,000 bytes/s
    rate = 1_000_000
    [decision] = placed(tiny_map, ascend(gbps))
    steer([decision])
    job = job_of(tiny_lab, decision)
    receiver = Receiver(tiny_lab.host_of["CC-hub"].namespace, job, steady_s=1.5)

    offered = blast(USERS, job, seconds=4.0)
    got = receiver.result()

    # The sender offered far more than the reservation, and the site got it at its rate:
    # the policers' token bucket (one second of the rate and a tenth more) lets a first
    # burst through, and after it the rate holds.
    assert offered > 8 * rate * 4.0
    assert got.bytes <= rate * (4.0 + 1.1) * 1.02
    steady_rate = got.steady_bytes / (got.span_s - 1.5)
    assert 0.5 * rate < steady_rate <= rate * 1.05


def test_two_decisions_to_one_site_on_different_paths_are_steered_apart(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    # 60 Gbps each: the second no longer fits on the first one's 100 Gbps links.
    first, second = placed(tiny_map, ascend(60), ascend(60))
    assert first.site == second.site == "CC-hub"
    assert hops_of(first) != hops_of(second)
    steer([first, second])

    got_first, hops_first = traffic(tiny_lab, first, USERS, 100)
    got_second, hops_second = traffic(tiny_lab, second, USERS, 100)

    assert (got_first, got_second) == (100, 100)
    assert hops_first == dict.fromkeys(hops_of(first), 100)
    assert hops_second == dict.fromkeys(hops_of(second), 100)


def test_installing_twice_is_once_and_removing_leaves_nothing(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    [decision] = placed(tiny_map, ascend(0.01))
    steer([decision])
    steer([decision])
    expected = {
        (h.node, h.job) for owner in OWNERS for h in headends(tiny_lab, decision, owner=owner)
    }
    assert len(expected) == 3
    assert _steering_state(tiny_lab) == expected
    got, _ = traffic(tiny_lab, decision, USERS, 20)
    assert got == 20

    unsteer([decision])
    unsteer([decision])  # nothing left to remove: nothing done

    assert _steering_state(tiny_lab) == set()
    got, hops = traffic(tiny_lab, decision, USERS, 20)
    assert got == 0
    assert hops == {("AA-acc", "users"): 20}


def test_a_path_that_cannot_be_steered_whole_leaves_nothing_installed(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    # An InfiniBand A100 from AA within the east: BB-hub, on a path whose source and
    # destination segments are both the east's.
    [decision] = placed(
        tiny_map,
        {
            "resources": {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 1}},
            "constraints": {
                "interconnect": "ib",
                "regions_allowed": ["AA", "BB"],
                "min_bandwidth_gbps": 1,
            },
        },
    )
    assert decision.site == "BB-hub"
    assert decision.path is not None
    assert [s.owner for s in decision.path.segments] == ["east", "national", "east"]
    # The destination segment's headend, at BB-gw, cannot take a policer any more.
    _drop_policers(f"{TINY_LAB}-BB-gw")

    with pytest.raises(SteeringError, match=r"segment 2 \(east\).*BB-gw"):
        steer([decision], owners=["east"])

    assert _steering_state(tiny_lab) == set()


def test_a_failed_install_puts_back_the_path_it_was_replacing(
    tiny_lab: LabPlan, tiny_map: ComputeNetworkMap
) -> None:
    # Two paths to CC-hub (60 Gbps each: the second does not fit on the first one's links);
    # the second is taken as a new path of the first one's request, as a re-route makes.
    first, other = placed(tiny_map, ascend(60), ascend(60))
    second = other.model_copy(
        update={"request_id": first.request_id, "reservation_id": "rsv-second"}
    )
    assert hops_of(first) != hops_of(second)
    job = job_of(tiny_lab, first)
    steering = NetlabSteering(lab=TINY_LAB, owner=None)
    try:
        asyncio.run(steering.install([first]))
        # The second path's last headend cannot take its policer: the install fails there,
        # after the first headends replaced the first path's routes.
        last = headends(tiny_lab, second, owner=None)[-1]
        _drop_policers(last.namespace)
        with pytest.raises(SteeringError, match=rf"rsv-second.*{last.node}"):
            asyncio.run(steering.install([second]))
    finally:
        steering.close()

    assert _routes_to(tiny_lab, job) == {
        h.node: first.reservation_id for h in headends(tiny_lab, first, owner=None)
    }
    got, hops = traffic(tiny_lab, first, USERS, 100)
    assert got == 100
    assert hops == dict.fromkeys(hops_of(first), 100)


def _drop_policers(namespace: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "delete", "table", "ip6", linux.TABLE],
        check=True,
    )


def _routes_to(lab: LabPlan, job: str) -> dict[str, str]:
    """The reservation whose route to `job` each router holds, of those that hold one."""
    routes = linux.Headends()
    try:
        found = {h.node: routes.installed(h.namespace, job) for h in lab.host_of.values()}
    finally:
        routes.close()
    return {node: rid for node, rid in found.items() if rid is not None}


def _steering_state(lab: LabPlan) -> set[tuple[str, str]]:
    """(node, job) of every route to a job and every policer installed in the lab's routers
    (a router without its policers' table has none)."""
    found: set[tuple[str, str]] = set()
    for host in lab.host_of.values():
        if host.kind is not HostKind.ROUTER:
            continue
        if _policed(host.namespace):
            found |= {(host.node, job) for job in linux.policers(host.namespace).of_job}
        found |= {(host.node, job) for job in _routed_jobs(host.namespace)}
    return found


def _policed(namespace: str) -> bool:
    listed = subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "list", "tables"], capture_output=True, text=True
    )
    return "ip6 cnbrain\n" in listed.stdout + "\n"


def _routed_jobs(namespace: str) -> set[str]:
    listed = subprocess.run(
        ["ip", "-n", namespace, "-6", "route", "show", "root", linux.JOBS],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split()[0] for line in listed.stdout.splitlines() if "encap bpf" in line}
