"""The netlab's plan and the SRv6 encapsulation, pure: names, addresses, headends, bytes."""

import ipaddress
import struct

import pytest

from cnbrain.dataplane.encaps import MAX_SIDS, encapsulation, headend_program
from cnbrain.dataplane.plan import (
    HostKind,
    PlanError,
    headends,
    interface_name,
    job_address,
    parse_part,
    plan_lab,
)
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.srv6 import SidPlan
from tests.tiny_map import request


def test_every_node_and_site_is_a_namespace_with_its_sid_and_every_link_a_wire(
    tiny_map: ComputeNetworkMap,
) -> None:
    lab = plan_lab(tiny_map, name="cnlt")
    sids = SidPlan(tiny_map)
    assert {h.node for h in lab.hosts if h.kind is not HostKind.USERS} == {
        *tiny_map.nodes,
        *(s.id for s in tiny_map.sites),
    }
    assert all(h.sid == sids.sid(h.node) for h in lab.host_of.values())
    assert {w.link for w in lab.wires if w.link} == {link.id for link in tiny_map.links}
    assert set(lab.users_of) == {"AA-acc", "BB-acc", "CC-acc"}
    assert all(len(w.a_interface) <= 15 for w in lab.wires)
    site = lab.host_of["CC-hub"]
    assert site.sid is not None and site.job_prefix is not None
    job = job_address(site.sid, "req-1")
    assert ipaddress.IPv6Address(job) in ipaddress.IPv6Network(site.job_prefix)
    assert job != job_address(site.sid, "req-2")


def test_a_part_has_its_provinces_and_the_whole_backbone(tiny_map: ComputeNetworkMap) -> None:
    lab = plan_lab(tiny_map, name="cnlt", provinces=parse_part("provinces=AA,BB"))
    assert "CC-gw" in lab.host_of  # a gateway: on the backbone
    assert "CC-agg1" not in lab.host_of and "CC-hub" not in lab.host_of
    assert "AA-gw--CC-gw" in lab.wire_of
    assert set(lab.users_of) == {"AA-acc", "BB-acc"}
    with pytest.raises(PlanError, match="no province 'ZZ'"):
        plan_lab(tiny_map, name="cnlt", provinces=["ZZ"])
    with pytest.raises(PlanError, match="provinces=CODE"):
        parse_part("AA,BB")
    with pytest.raises(PlanError, match="lab name"):
        plan_lab(tiny_map, name="Lab-1")


def test_each_owner_gets_a_headend_per_segment_with_that_segments_sids(
    tiny_map: ComputeNetworkMap,
) -> None:
    body = {
        "resources": {
            "cpu": 1,
            "memory_gib": 1,
            "accelerator": {"model": "Ascend910B", "count": 1},
        },
        "constraints": {"min_bandwidth_gbps": 0.008},
    }
    [decision] = PlacementEngine(tiny_map).place_batch([request(**body)], reserve=True)
    lab = plan_lab(tiny_map, name="cnlt")
    assert decision.path is not None
    planned = {owner: headends(lab, decision, owner=owner) for owner in ("east", "national")}
    planned["west"] = headends(lab, decision, owner="west")
    every = headends(lab, decision, owner=None)

    assert [h for owner in ("east", "national", "west") for h in planned[owner]] == list(every)
    assert [h.node for h in every] == ["AA-acc", "AA-gw", "CC-gw"]
    assert tuple(s for h in every for s in h.sids) == decision.path.srv6_segment_list
    assert {h.rate_bytes_s for h in every} == {1_000_000}
    assert len({h.job for h in every}) == 1
    assert headends(lab, decision, owner="north") == ()
    wrong = decision.path.model_copy(update={"srv6_segment_list": ("fc00::1",)})
    with pytest.raises(PlanError, match="1 SIDs for 5 hops"):
        headends(lab, decision.model_copy(update={"path": wrong}), owner="east")
    part = plan_lab(tiny_map, name="cnlt", provinces=["AA", "BB"])
    with pytest.raises(PlanError, match="no site 'CC-hub'"):
        headends(part, decision, owner="east")


def test_the_encapsulation_is_an_ipv6_header_and_a_segment_routing_header() -> None:
    sids = ["fc00:0:0:4::", "fc00:0:0:8::", "fc00:2:0:9::"]
    header = encapsulation("fc00:1:0:3::", sids)
    assert len(header) == 40 + 8 + 16 * 3
    version, payload, next_header, hops = struct.unpack("!IHBB", header[:8])
    assert (version >> 28, payload, next_header, hops) == (6, 0, 43, 64)
    assert ipaddress.IPv6Address(header[24:40]) == ipaddress.IPv6Address(sids[0])
    nxt, length, kind, left, last = struct.unpack("!BBBBB", header[40:45])
    assert (nxt, length, kind, left, last) == (41, 6, 4, 2, 2)
    listed = [ipaddress.IPv6Address(header[48 + 16 * i : 64 + 16 * i]) for i in range(3)]
    assert listed == [ipaddress.IPv6Address(s) for s in reversed(sids)]
    assert len(headend_program(header)) % 8 == 0
    six = encapsulation("fc00::1", ["fc00::2"] * 6)
    assert len(headend_program(six)) // 8 == 70  # 34 instructions, and 6 per SID
    with pytest.raises(ValueError, match="1 to 13 SIDs"):
        encapsulation("fc00::1", ["fc00::2"] * (MAX_SIDS + 1))


def test_interface_names_fit_linux() -> None:
    assert len(interface_name("a" * 128 + "--" + "b" * 128)) <= 15
