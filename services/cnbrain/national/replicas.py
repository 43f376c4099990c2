"""The national brain's replicas on one database: each keeps its own lease while it lives,
releases what replicas that stopped left under way, and one of them at a time does the
duties that need doing once (retrying releases owed, auditing the ledger).

Leases (`storage.leases`): replica R renews `replica:R` every third of `lease_s`; once a
replica stops renewing (kill -9), its lease lapses after `lease_s` and every live replica
releases its placements under way at its next look (`recover_forever`, every half of
`lease_s`; `Coordinator.recover`). Releasing is idempotent in every owner, so two replicas
releasing the same placement do no harm. The duties' lease `national-duties` is held the same
way: its holder runs the duties, and another replica takes them over once it lapses. A
replica that stops cleanly lets both leases go, so the others take over at once; a renewal
under way when it stops is finished first, never cut in the middle of its transaction.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.background import finished, stop_task
from cnbrain.national.coordinator import Coordinator
from cnbrain.storage import leases
from cnbrain.storage.clock import utcnow
from cnbrain.storage.inflight_placements import replica_lease

log = logging.getLogger("cnbrain.national")

DUTIES_LEASE = "national-duties"
"""The lease of the duties one replica does at a time."""

Duty = tuple[str, Callable[[], Awaitable[None]]]
"""A duty: its name, and the loop that does it until cancelled."""


class Replica:
    """Replica `name` of the national brain, on the database of `sessions`."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, name: str, lease_s: float
    ) -> None:
        self._sessions = sessions
        self._name = name
        self._lease_s = lease_s

    async def hold(self, lease: str) -> bool:
        """Take or renew `lease` for this replica for `lease_s`; whether it holds it."""
        now = utcnow()
        async with self._sessions.begin() as session:
            return await leases.hold(
                session,
                name=lease,
                owner=self._name,
                until=now + timedelta(seconds=self._lease_s),
                now=now,
            )

    async def let_go(self, lease: str) -> None:
        """End this replica's `lease` now (nothing when another holds it)."""
        async with self._sessions.begin() as session:
            await leases.let_go(session, name=lease, owner=self._name, now=utcnow())

    async def live_forever(self) -> None:
        """Renew this replica's own lease every third of `lease_s` until cancelled, then let
        it go. A renewal that fails is logged and tried at the next turn."""
        own = replica_lease(self._name)
        try:
            while True:
                try:
                    await finished(self.hold(own))
                except Exception:
                    log.warning("replica %s: its lease was not renewed", self._name, exc_info=True)
                await asyncio.sleep(self._lease_s / 3)
        finally:
            with contextlib.suppress(Exception):
                await self.let_go(own)

    async def recover_forever(self, coordinator: Coordinator) -> None:
        """Every half of `lease_s`, release the placements under way of the replicas that
        stopped (`Coordinator.recover`), until cancelled; a look that fails is logged."""
        while True:
            await asyncio.sleep(self._lease_s / 2)
            try:
                released = await coordinator.recover()
            except Exception:
                log.warning("the placements of stopped replicas were not looked at", exc_info=True)
                continue
            if released:
                log.warning("released the parts of %d placements a replica left", released)

    async def duties_forever(self, duties: Sequence[Duty]) -> None:
        """Run `duties` while this replica holds the duties' lease, renewed every third of
        `lease_s`; stop them when it loses it, until cancelled (then let it go)."""
        running: list[asyncio.Task[None]] = []
        try:
            while True:
                try:
                    holding = await finished(self.hold(DUTIES_LEASE))
                except Exception:
                    log.warning("replica %s: the duties' lease was not renewed", self._name)
                    holding = False
                if holding and not running:
                    log.info("replica %s: takes on the duties", self._name)
                    running = [
                        asyncio.create_task(_logged(name, loop), name=f"cnbrain-{name}")
                        for name, loop in duties
                    ]
                elif not holding and running:
                    log.warning("replica %s: lost the duties' lease", self._name)
                    for task in running:
                        await stop_task(task)
                    running = []
                await asyncio.sleep(self._lease_s / 3)
        finally:
            for task in running:
                await stop_task(task)
            if running:
                with contextlib.suppress(Exception):
                    await self.let_go(DUTIES_LEASE)


async def _logged(name: str, loop: Callable[[], Awaitable[None]]) -> None:
    """`loop()`, its unexpected end logged (a duty runs until cancelled)."""
    try:
        await loop()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the duty %s ended", name)
