"""The accelerator catalog: models the map and requests may name, with their board power and
device memory.

Board power is the vendor's published maximum (TDP / TBP) in watts; it feeds the energy
estimate. Device memory is the vendor's published memory of one device, in GiB; a request may
state a fraction of one device as memory (`memory_milli`). Where a model is sold in several
sizes, the catalog means the one its board power is published for (A100 and A800: 80 GB
SXM; V100: 32 GB SXM2; MLU370: the X8 card). A map may only list models named here, so that
a typo is an error and not an accelerator nobody can request.
"""

import math
from types import MappingProxyType
from typing import Final

ACCELERATOR_POWER_W: Final = MappingProxyType(
    {
        "A100": 400.0,
        "A800": 400.0,
        "H100": 700.0,
        "H800": 700.0,
        "H20": 400.0,
        "L40S": 350.0,
        "V100": 300.0,
        "T4": 70.0,
        "Ascend910B": 400.0,
        "Ascend310P": 72.0,
        "MLU370": 250.0,
        "MLU590": 350.0,
    }
)

ACCELERATOR_MODELS: Final[tuple[str, ...]] = tuple(ACCELERATOR_POWER_W)

ACCELERATOR_MEMORY_GIB: Final = MappingProxyType(
    {
        "A100": 80.0,
        "A800": 80.0,
        "H100": 80.0,
        "H800": 80.0,
        "H20": 96.0,
        "L40S": 48.0,
        "V100": 32.0,
        "T4": 16.0,
        "Ascend910B": 64.0,
        "Ascend310P": 24.0,
        "MLU370": 48.0,
        "MLU590": 80.0,
    }
)

MAX_DEVICE_MEMORY_GIB: Final = max(ACCELERATOR_MEMORY_GIB.values())
"""The most memory one device of the catalog has."""

MILLI: Final = 1000
"""Thousandths of an accelerator in one: the unit of a fraction of one, and the ledger's."""


def memory_milli(model: str, memory_gib: float) -> int:
    """The thousandths of one `model` device that hold `memory_gib` of its memory, rounded up
    (at least 1; `MILLI` or more when it is the whole device or more). Raises KeyError for a
    model outside the catalog."""
    share = round(memory_gib * MILLI / ACCELERATOR_MEMORY_GIB[model], 6)
    return max(1, math.ceil(share))


CPU_CORE_POWER_W: Final = 8.0
"""Average power drawn per busy CPU core, including its share of the socket."""

MEMORY_GIB_POWER_W: Final = 0.4
"""Average power drawn per GiB of allocated DRAM."""
