"""The numbers of a region's summary (`national_pb2.RegionSummary`), checked by the national
brain before it keeps them: the region choice and the console read them as they are."""

import math

from cnbrain.domain import bounds
from cnbrain.domain.accelerators import MILLI
from cnbrain.federation.codec import WireError
from cnbrain.v1 import national_pb2

MAX_ENTRIES = bounds.MAX_SITES
"""Entries one list of a summary may hold at most."""


def check_summary_numbers(summary: national_pb2.RegionSummary) -> None:
    """Raises WireError naming the first field at fault: a list longer than `MAX_ENTRIES`; an
    accelerator amount (thousandths) negative, above the map's bound, or free above total;
    a site kind's count or free amounts negative or beyond their bounds; a CPU price not
    finite within [0, MAX_PRICE_CNY], or its minimum above its maximum; a gateway's
    utilisation not finite within [0, 1]."""
    most_milli = bounds.MAX_SITES * bounds.MAX_ACCELERATORS * MILLI
    for name in ("accelerators", "site_kinds", "gateways"):
        if len(getattr(summary, name)) > MAX_ENTRIES:
            raise WireError(f"more than {MAX_ENTRIES} entries", field=f"summary.{name}")
    for i, accelerator in enumerate(summary.accelerators):
        field = f"summary.accelerators[{i}]"
        if not 0 <= accelerator.total <= most_milli:
            raise WireError(f"total must be within [0, {most_milli}]", field=f"{field}.total")
        if not 0 <= accelerator.free <= accelerator.total:
            raise WireError("free must be within [0, total]", field=f"{field}.free")
    for i, kind in enumerate(summary.site_kinds):
        field = f"summary.site_kinds[{i}]"
        limits = {
            "sites": bounds.MAX_SITES,
            "free_cpu_m": bounds.MAX_SITES * bounds.MAX_CPU_CORES * 1000,
            "free_mem_mib": bounds.MAX_SITES * bounds.MAX_MEMORY_GIB * 1024,
        }
        for name, most in limits.items():
            if not 0 <= getattr(kind, name) <= most:
                raise WireError(f"must be within [0, {most}]", field=f"{field}.{name}")
    for name in ("cpu_price_min", "cpu_price_max"):
        price = getattr(summary, name)
        if not (math.isfinite(price) and 0 <= price <= bounds.MAX_PRICE_CNY):
            raise WireError(
                f"must be finite within [0, {bounds.MAX_PRICE_CNY}], not {price!r}",
                field=f"summary.{name}",
            )
    if summary.cpu_price_min > summary.cpu_price_max:
        raise WireError("must not be above cpu_price_max", field="summary.cpu_price_min")
    for i, gateway in enumerate(summary.gateways):
        share = gateway.utilisation
        if not (math.isfinite(share) and 0 <= share <= 1):
            raise WireError(
                f"must be finite within [0, 1], not {share!r}",
                field=f"summary.gateways[{i}].utilisation",
            )
