"""The loop that runs a brain's ledger auditor every `interval_s`, until cancelled."""

import asyncio
import logging

from cnbrain.federation.auditor import LedgerAuditor

log = logging.getLogger("cnbrain.audit")


async def audit_forever(auditor: LedgerAuditor, *, interval_s: float) -> None:
    """Wait `interval_s`, audit, and again, until cancelled; an audit that fails is logged
    and the next one comes after the interval."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await auditor.audit()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the ledger audit failed; auditing again in %.1f s", interval_s)
