"""End to end on separate processes: a federation (the national brain, the east and the west
on the tiny map, each steering onto the netlab) places a request from AA on CC-hub; each of
the three brains installs its own segment as its part commits, the traffic follows the
decision's hops across them, and a cancel releases every part and its steering."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import LabPlan, job_address, plan_lab
from cnbrain.domain.decision import Decision
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.dataplane.conftest import lab_up
from tests.dataplane.paths import grown, hops_of
from tests.dataplane.traffic import Receiver, send, settle
from tests.federation.member_requests import cancel, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.tiny_map import ascend_body, tiny_map_raw

LAB = "cnlf"


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
