"""The accelerator catalog: models the map and requests may name, with their board power.

Board power is the vendor's published maximum (TDP / TBP) in watts; it feeds the energy
estimate. A map may only list models named here, so that a typo is an error and not an
accelerator nobody can request.
"""

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

MILLI: Final = 1000
"""Thousandths of an accelerator in one: the unit of a fraction of one, and the ledger's."""

CPU_CORE_POWER_W: Final = 8.0
"""Average power drawn per busy CPU core, including its share of the socket."""

MEMORY_GIB_POWER_W: Final = 0.4
"""Average power drawn per GiB of allocated DRAM."""
