"""The data plane's tests that build a lab need root, nft, network namespaces, the kernel's
SRv6 endpoint processing and eBPF programs for routes: their modules use the fixture
`lab_tools`, so where one is missing each of their tests fails saying which (they are never
skipped); the pure ones (`test_plan`) need none. Every lab a test builds is removed after
it, failed or not."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cnbrain.dataplane import linux, manifest
from cnbrain.dataplane.plan import LabPlan, plan_lab
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from tests.tiny_map import tiny_map_raw

TINY_LAB = "cnlt"


@pytest.fixture(scope="session")
def lab_tools() -> None:
    """Fails the test, naming what is missing, where the netlab cannot run."""
    try:
        linux.require_lab_tools()
    except linux.LabError as error:
        pytest.fail(f"the netlab cannot run on this machine: {error}", pytrace=False)


@pytest.fixture
def tiny_map() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(MapDocument.model_validate(tiny_map_raw()))


@pytest.fixture
def tiny_lab(tiny_map: ComputeNetworkMap) -> Iterator[LabPlan]:
    """The tiny map's whole lab, up (its manifest written) for the test."""
    with lab_up(plan_lab(tiny_map, name=TINY_LAB)) as plan:
        yield plan


@contextmanager
def lab_up(plan: LabPlan) -> Iterator[LabPlan]:
    """`plan`'s lab built and its manifest written; removed afterwards, whatever happened."""
    linux.destroy(plan.name)
    linux.build(plan)
    manifest.write(plan)
    try:
        yield plan
    finally:
        linux.destroy(plan.name)
        manifest.remove(plan.name)
