"""End to end on separate processes: a federation (the national brain, the east and the west
on the tiny map, each steering onto the netlab) places a request from AA on CC-hub; each of
the three brains installs its own segment as its part commits, the traffic follows the
decision's hops across them, and a cancel releases every part and its steering.

When a link of the path goes down (in the netlab, or in an operator's report), the owner of
its segment alone re-routes that segment between the same two nodes, under the same
reservation: its part moves to the new links, no other owner's part changes, the request at
its source region gets a `rerouted` event naming the segment and its decision takes the new
hops, and the traffic follows them."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import LabPlan, job_address, plan_lab
from cnbrain.domain.decision import Decision
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.dataplane.conftest import lab_up
from tests.dataplane.paths import grown, hops_of
from tests.dataplane.traffic import Receiver, job_of, send, settle
from tests.dataplane.traffic import traffic as traffic_from
from tests.federation.member_requests import cancel, submit
from tests.federation.rerouted_paths import (
    decision_at_source,
    links_of,
    part_links,
    placed,
    wait_events,
    wait_rerouted,
)
from tests.federation_processes import LocalFederation, local_federation
from tests.tiny_map import ascend_body, tiny_map_raw

pytestmark = pytest.mark.usefixtures("lab_tools")

LAB = "cnlf"
USERS = f"{LAB}-AA-acc@users"


@pytest.fixture
def federation(
    tmp_path: Path, tiny_map: ComputeNetworkMap
) -> Iterator[tuple[LabPlan, LocalFederation]]:
    map_file = tmp_path / "tiny.yaml"
    write_map_document(MapDocument.model_validate(tiny_map_raw()), map_file)
    with lab_up(plan_lab(tiny_map, name=LAB)) as plan:
        for federation in local_federation(
            tmp_path,
            regions=["east", "west"],
            database_prefix="cnbrain_steer_fed",
            shared_env={
                "CNBRAIN_MAP": str(map_file),
                "CNBRAIN_STEERING": "netlab",
                "CNBRAIN_NETLAB": LAB,
                "CNBRAIN_RESTEER_INTERVAL_S": "0.2",
            },
        ):
            yield plan, federation


def routed(lab: LabPlan, job: str) -> dict[str, str | None]:
    """The reservation whose route to `job` each router holds (None: none)."""
    routes = linux.Headends()
    try:
        return {h.node: routes.installed(h.namespace, job) for h in lab.host_of.values()}
    finally:
        routes.close()


def test_three_brains_steer_their_segments_of_a_cross_region_path(
    federation: tuple[LabPlan, LocalFederation],
) -> None:
    lab, brains = federation
    view = submit(brains, "east", ascend_body(1, constraints={"min_bandwidth_gbps": 0.01}))
    assert view["state"] == "placed", view
    decision = Decision.model_validate(view["decision"])
    assert decision.path is not None
    assert [s.owner for s in decision.path.segments] == ["east", "national", "west"]
    site = lab.host_of["CC-hub"]
    assert site.sid is not None
    job = job_address(site.sid, decision.request_id)
    heads = {node for node, rid in routed(lab, job).items() if rid is not None}
    assert heads == {"AA-acc", "AA-gw", "CC-gw"}

    before = linux.hop_counts(lab)
    receiver = Receiver(site.namespace, job)
    send(f"{LAB}-AA-acc@users", job, count=200)
    got = receiver.result().packets
    settle()

    assert got == 200
    assert grown(before, linux.hop_counts(lab)) == dict.fromkeys(hops_of(decision), 200)

    cancelled: dict[str, Any] = cancel(brains, "east", decision.request_id)
    assert cancelled["state"] == "cancelled"
    assert set(routed(lab, job).values()) == {None}


def check_follows(lab: LabPlan, brains: LocalFederation, before: Decision, cut: str) -> Decision:
    """The decision at the source region once it moved off link `cut`: the same reservation,
    site and segment ends, every owner's part on its segment's links, and the traffic on its
    hops."""
    moved = decision_at_source(brains, before.request_id)
    assert moved.path is not None and before.path is not None
    assert (moved.reservation_id, moved.site) == (before.reservation_id, before.site)
    assert cut not in {hop.link for s in moved.path.segments for hop in s.hops}
    for old, new in zip(before.path.segments, moved.path.segments, strict=True):
        assert (new.kind, new.owner) == (old.kind, old.owner)
        assert new.hops[0].from_node == old.hops[0].from_node
        assert new.hops[-1].to_node == old.hops[-1].to_node
    assert len(moved.path.srv6_segment_list) == sum(len(s.hops) for s in moved.path.segments)
    assert part_links(brains, str(moved.reservation_id)) == {
        segment.owner: links_of(segment.hops) for segment in moved.path.segments
    }
    got, hops = traffic_from(lab, moved, USERS, 200)
    assert got == 200
    assert hops == dict.fromkeys(hops_of(moved), 200)
    return moved


def test_a_backbone_link_down_reroutes_the_backbone_segment_alone(
    federation: tuple[LabPlan, LocalFederation],
) -> None:
    lab, brains = federation
    decision = placed(brains)
    assert decision.path is not None
    source, backbone, destination = decision.path.segments
    cut = backbone.hops[0]

    linux.set_link(lab, cut.from_node, cut.to_node, up=False)
    [rerouted] = wait_rerouted(brains, decision.request_id, 1)
    moved = check_follows(lab, brains, decision, cut.link)

    assert moved.path is not None
    assert moved.path.segments[0] == source
    assert moved.path.segments[2] == destination
    new = moved.path.segments[1]
    assert rerouted["detail"] == {
        "reason": f"link {cut.link} went down",
        "segment": "backbone",
        "owner": "national",
        "reservation": decision.reservation_id,
        "route": " > ".join([new.hops[0].from_node, *(hop.to_node for hop in new.hops)]),
        "links": ", ".join(hop.link for hop in new.hops),
    }

    cancelled = cancel(brains, "east", decision.request_id)
    assert cancelled["state"] == "cancelled"
    assert set(routed(lab, job_of(lab, decision)).values()) == {None}


def test_each_region_reroutes_its_own_segment_of_a_cross_region_path(
    federation: tuple[LabPlan, LocalFederation],
) -> None:
    lab, brains = federation
    decision = placed(brains)
    assert decision.path is not None

    # The destination region's segment: west re-routes it, and tells east through the
    # national brain.
    site_link = decision.path.segments[2].hops[-1]
    linux.set_link(lab, site_link.from_node, site_link.to_node, up=False)
    [first] = wait_rerouted(brains, decision.request_id, 1)
    assert (first["detail"]["segment"], first["detail"]["owner"]) == ("destination", "west")
    moved = check_follows(lab, brains, decision, site_link.link)
    assert moved.path is not None
    assert moved.path.segments[:2] == decision.path.segments[:2]

    # The source region's own segment: east re-routes it and tells its request itself.
    access_link = decision.path.segments[0].hops[0]
    linux.set_link(lab, access_link.from_node, access_link.to_node, up=False)
    second = wait_rerouted(brains, decision.request_id, 2)[-1]
    assert (second["detail"]["segment"], second["detail"]["owner"]) == ("source", "east")
    again = check_follows(lab, brains, moved, access_link.link)
    assert again.path is not None
    assert again.path.segments[1:] == moved.path.segments[1:]

    # The site's other link goes down too: west has no path left, and the request says why.
    other = again.path.segments[2].hops[-1]
    linux.set_link(lab, other.from_node, other.to_node, up=False)
    told = wait_events(brains, decision.request_id, "not_rerouted", 1)[0]
    assert told["detail"] == {
        "reason": f"link {other.link} went down; no other path from CC-gw to CC-hub has "
        "0.01 Gbps free on every link",
        "segment": "destination",
        "owner": "west",
        "reservation": decision.reservation_id,
    }
    assert decision_at_source(brains, decision.request_id) == again
    assert part_links(brains, str(decision.reservation_id)) == {
        segment.owner: links_of(segment.hops) for segment in again.path.segments
    }


def test_an_operators_report_of_a_backbone_link_down_goes_to_the_national_brain(
    federation: tuple[LabPlan, LocalFederation],
) -> None:
    lab, brains = federation
    decision = placed(brains)
    assert decision.path is not None
    cut = decision.path.segments[1].hops[0].link
    east = httpx.Client(
        base_url=brains.members["east"].url,
        headers={"Authorization": f"Bearer {brains.admin_token}"},
        timeout=30,
    )
    with east:
        reported = east.put(
            f"/v1/links/{cut}/state", json={"state": "down", "reason": "backbone maintenance"}
        )
        assert reported.status_code == 200, reported.text
        assert (reported.json()["owner"], reported.json()["kept_by"]) == ("national", "national")
        wait_rerouted(brains, decision.request_id, 1)
        assert linux.links_down(lab, [cut]) == set()
        check_follows(lab, brains, decision, cut)

        west_link = decision.path.segments[2].hops[0].link
        elsewhere = east.put(f"/v1/links/{west_link}/state", json={"state": "down"})
        assert elsewhere.status_code == 422, elsewhere.text
        assert east.put("/v1/links/AA-gw--nowhere/state", json={"state": "down"}).status_code == 404
