"""Groups of related requests: together on one site or province, spread over distinct sites,
all of them placed or none."""

from typing import Any

from cnbrain.domain.decision import DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.groups import place_group
from tests.tiny_map import request


def a100(n: int, count: int, **extra: Any) -> PlacementRequest:
    return request(
        id=f"m{n}",
        resources={"cpu": 2, "memory_gib": 8, "accelerator": {"model": "A100", "count": count}},
        **extra,
    )


def cpu(n: int, **extra: Any) -> PlacementRequest:
    return request(id=f"r{n}", **extra)


def placed_sites(decisions: list[Any]) -> list[str | None]:
    assert all(d.status is DecisionStatus.PLACED for d in decisions), [d.reason for d in decisions]
    return [d.site for d in decisions]


def test_together_puts_every_member_on_one_site_that_holds_them_all(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    members = [a100(0, 3), a100(1, 3)]
    alone = engine.place_batch(members, reserve=False)
    # Without the group they split: one in AA (4 A100), the other on a hub; together they
    # need 6, which only a hub has.
    assert {d.site for d in alone} in ({"AA-dc", "BB-hub"}, {"AA-dc", "CC-hub"})
    snapshot = engine.ledger.snapshot()
    sites = placed_sites(
        place_group(engine, members, placement="together", snapshot=snapshot, group_id="g")
    )
    assert len(set(sites)) == 1 and sites[0] in {"BB-hub", "CC-hub"}


def test_together_in_a_province_keeps_the_members_there(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    members = [
        cpu(0, resources={"cpu": 60, "memory_gib": 8}),
        cpu(1, resources={"cpu": 100, "memory_gib": 8}),
    ]
    decisions = place_group(
        engine,
        members,
        placement="together",
        scope="province",
        snapshot=engine.ledger.snapshot(),
        group_id="g",
    )
    provinces = {d.province for d in decisions if d.status is DecisionStatus.PLACED}
    assert len(placed_sites(decisions)) == 2 and len(provinces) == 1


def test_a_group_that_does_not_fit_together_is_rejected_whole(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    members = [a100(0, 20, national_optimum=True), a100(1, 20, national_optimum=True)]
    decisions = place_group(
        engine, members, placement="together", snapshot=engine.ledger.snapshot(), group_id="big"
    )
    assert [d.status for d in decisions] == [DecisionStatus.REJECTED] * 2
    assert all(d.reason and d.reason.startswith("group 'big': ") for d in decisions)


def test_spread_gives_every_replica_a_site_of_its_own(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    replicas = [cpu(n, national_optimum=True) for n in range(4)]
    snapshot = engine.ledger.snapshot()
    sites = placed_sites(
        place_group(engine, replicas, placement="spread", snapshot=snapshot, group_id="svc")
    )
    assert len(set(sites)) == 4
    assert engine.ledger.snapshot().version == snapshot.version  # nothing reserved


def test_spread_over_more_replicas_than_sites_is_rejected_whole(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    only_aa = {"regions_allowed": ["AA"], "labels": {}}
    replicas = [cpu(n, constraints=only_aa) for n in range(3)]
    decisions = place_group(
        engine,
        replicas,
        placement="spread",
        snapshot=Snapshot.empty(engine.arrays),
        group_id="svc",
    )
    assert [d.status for d in decisions] == [DecisionStatus.REJECTED] * 3
    assert "has no site of its own" in (decisions[0].reason or "")
