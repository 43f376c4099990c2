"""Claims for tests: every amount a test does not name is nothing."""

from typing import Any

from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim
from tests.ledger.windows import HOUR

NOTHING: dict[str, Any] = {
    "cpu_m": 0,
    "mem_mib": 0,
    "storage_gib": 0,
    "accelerator_model": None,
    "accelerator_milli": 0,
    "link_ids": (),
    "mbps": 0,
}


def claim(
    reservation_id: str,
    request_id: str,
    tenant_id: str,
    *,
    site_id: str | None = None,
    window: Window = HOUR,
    **named: Any,
) -> Claim:
    """Reservation `reservation_id`'s claim for `request_id` of `tenant_id` on `site_id` over
    `window`: the amounts and flags `named` (as `Claim` names them), nothing else."""
    return Claim(
        reservation_id=reservation_id,
        request_id=request_id,
        tenant_id=tenant_id,
        site_id=site_id,
        window=window,
        **{**NOTHING, **named},
    )
