"""The regional brain's FastAPI application."""

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import Depends, FastAPI

from cnbrain import __version__
from cnbrain.heap import freeze_heap
from cnbrain.regional import openapi, problems
from cnbrain.regional.brain import Brain
from cnbrain.regional.dispatcher import Dispatcher
from cnbrain.regional.limits import BodyLimit, refuse_control_characters
from cnbrain.regional.routers import audit, health, jobs, operator, requests, tenants, usage
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.regional.use_cases.recover import RecoverPending

log = logging.getLogger("cnbrain.regional")

DESCRIPTION = """
The regional brain of cnbrain: tenants submit compute requests; the brain decides the site and
the three-segment network path, reserves compute and bandwidth atomically in its database,
and explains the decision. A request with a `job` is then run on the chosen site's cluster
scheduler (Slurm, or a simulator for sites without one) and followed to its end; its usage is
metered from the scheduler's accounting. Authenticate with an API key:
`Authorization: Bearer ck_...`.
Errors are problem details (RFC 9457) that name the field and the reason.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        brain = Brain(settings)
        await brain.start()
        app.state.brain = brain
        cases = RequestUseCases.of(brain)
        app.state.use_cases = cases
        recovery = await start_recovery(cases.recover)
        dispatcher = Dispatcher(
            sessions=brain.sessions,
            settings=brain.settings,
            credentials=brain.credentials,
            map=lambda: brain.placement.map,
            changes=brain.changes,
            decider=cases.decider,
            forget=brain.capacity_changed,
            national=brain.national,
        )
        brain.wake_dispatcher = dispatcher.wake
        app.state.dispatcher = dispatcher
        await dispatcher.start()
        freeze_heap()
        try:
            yield
        finally:
            if recovery is not None:
                recovery.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recovery
            await dispatcher.stop()
            await brain.stop()

    app = FastAPI(
        title="cnbrain regional brain",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # FastAPI's automatic OpenTelemetry asks the environment on every request whether a
        # provider is configured (about 5% of a submission's CPU time); this brain sets none.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        dependencies=[Depends(refuse_control_characters)],
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    problems.install(app)
    for module in (health, requests, jobs, usage, tenants, operator, audit):
        app.include_router(module.router)
    openapi.install(app)
    return app


RECOVERY_BACKOFF_S = (1.0, 60.0)
"""The first and the longest wait between passes over requests left pending by an outage."""


async def start_recovery(recover: RecoverPending) -> "asyncio.Task[None] | None":
    """Decide the requests an earlier stop left pending, before the brain serves. Those an
    outage keeps pending (the database, the national brain) are tried again in the background
    until none is left; the task is returned (None: nothing left). Never raises: no stored
    request stops a brain from starting."""
    started = datetime.now(UTC)
    try:
        left = await recover(created_before=started)
    except Exception:
        log.exception("could not recover the requests left pending; trying again later")
        left = 1
    if not left:
        return None
    log.warning("requests left pending by an earlier stop are decided in the background")
    return asyncio.create_task(_recover_later(recover, started), name="cnbrain-recovery")


async def _recover_later(recover: RecoverPending, started: datetime) -> None:
    wait, longest = RECOVERY_BACKOFF_S
    while True:
        await asyncio.sleep(wait * random.uniform(0.5, 1.0))
        try:
            if not await recover(created_before=started):
                log.info("every request left pending by an earlier stop is decided")
                return
        except Exception:
            log.warning("recovery of pending requests failed; trying again", exc_info=True)
        wait = min(wait * 2, longest)
