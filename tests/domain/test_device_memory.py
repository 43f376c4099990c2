"""A fraction of one accelerator stated as device memory becomes thousandths of the device."""

import pytest

from cnbrain.domain.accelerators import (
    ACCELERATOR_MEMORY_GIB,
    ACCELERATOR_MODELS,
    MILLI,
    memory_milli,
)
from cnbrain.domain.request import AcceleratorDemand, ResourceDemand


def test_every_model_of_the_catalog_has_its_device_memory() -> None:
    assert set(ACCELERATOR_MEMORY_GIB) == set(ACCELERATOR_MODELS)
    assert all(0 < gib <= 1024 for gib in ACCELERATOR_MEMORY_GIB.values())


@pytest.mark.parametrize(
    ("model", "gib", "milli"),
    [
        ("A100", 20.0, 250),
        ("A100", 20.001, 251),
        ("T4", 10.0, 625),
        ("H20", 24.0, 250),
        ("L40S", 0.001, 1),
        ("V100", 31.9, 997),
        ("A100", 80.0, MILLI),
    ],
)
def test_memory_is_the_share_of_the_device_rounded_up(model: str, gib: float, milli: int) -> None:
    assert memory_milli(model, gib) == milli


def test_a_request_for_device_memory_holds_that_share_of_one_device() -> None:
    demand = ResourceDemand.model_validate(
        {"cpu": 2, "memory_gib": 8, "accelerator": {"model": "A100", "memory_gib": 20}}
    )
    accelerator = demand.accelerator
    assert accelerator is not None
    assert accelerator.milli is None
    assert accelerator.fraction_milli == 250
    assert accelerator.per_node_milli == 250
    assert demand.total_accelerator_milli == 250
    assert demand.total_accelerators == 0.25


def test_whole_accelerators_have_no_fraction() -> None:
    whole = AcceleratorDemand.model_validate({"model": "A100", "count": 2})
    assert whole.fraction_milli is None
    assert whole.per_node_milli == 2 * MILLI
