"""For node pool filters' messages: a gang as a caller reads it."""

from cnbrain.domain.accelerators import MILLI
from cnbrain.ledger.nodes import Gang
from cnbrain.placement.filters.closest import amount


def described(gang: Gang) -> str:
    """ "2 nodes with 8 H800, 8 cores and 64 GiB each", or "0.25 of one T4 with ..."."""
    compute = f"{amount(gang.cpu_m / 1000)} cores and {amount(gang.mem_mib / 1024)} GiB"
    if gang.milli:
        return f"{amount(gang.milli / MILLI)} of one {gang.model} with {compute}"
    each = f"{gang.devices} {gang.model}, {compute}" if gang.devices else compute
    nodes = "1 node with" if gang.nodes == 1 else f"{gang.nodes} nodes with"
    return f"{nodes} {each}" + ("" if gang.nodes == 1 else " each")
