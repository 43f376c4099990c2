"""Liveness and readiness. The metrics are on a listener of their own
(`regional.metrics_listener`), not on the REST port."""

import asyncio
import logging
from collections.abc import Awaitable

from fastapi import APIRouter
from sqlalchemy import text

from cnbrain.regional.composition import RegionalBrain
from cnbrain.regional.deps import BrainDep
from cnbrain.regional.problems import Dependency, responses, unavailable
from cnbrain.regional.schemas import Health

router = APIRouter(tags=["health"])
log = logging.getLogger("cnbrain.regional")

CHECK_TIMEOUT_S = 3.0
"""A server that has not answered a readiness check within this time counts as down."""


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz(brain: BrainDep) -> Health:
    """200 while the process serves HTTP, whatever its database and cache do; no key needed."""
    return Health(status="ok", instance=brain.settings.instance_id)


@router.get(
    "/readyz",
    response_model=Health,
    responses=responses({503: "The database or the cache does not answer (`unavailable`)."}),
    summary="The database and cache answer and the map is loaded",
)
async def readyz(brain: BrainDep) -> Health:
    """200 when ready; else 503 with `Retry-After`, naming in `unavailable` and in the detail
    each server that does not answer (`database`, `cache`)."""
    database, cache = await asyncio.gather(_database_answers(brain), _cache_answers(brain))
    down: list[Dependency] = []
    if not database:
        down.append("database")
    if not cache:
        down.append("cache")
    if down:
        names = " and the ".join(down)
        raise unavailable(
            f"not ready: the {names} {'does' if len(down) == 1 else 'do'} not answer", down=down
        )
    try:
        placement = brain.live_map.placement
    except RuntimeError as exc:
        raise unavailable(f"not ready: {exc}") from None
    return Health(
        status="ready",
        instance=brain.settings.instance_id,
        map=placement.map.name,
        sites=len(placement.map.sites),
        region=brain.settings.region,
        national_registered=brain.national.registered.is_set() if brain.national else None,
        national_replicas_registered=brain.national.replicas_registered if brain.national else None,
    )


async def _database_answers(brain: RegionalBrain) -> bool:
    async def select_one() -> None:
        async with brain.sessions() as session:
            await session.execute(text("SELECT 1"))

    return await _answers("database", select_one())


async def _cache_answers(brain: RegionalBrain) -> bool:
    return await _answers("cache", brain.caches.ping())


async def _answers(name: Dependency, check: Awaitable[None]) -> bool:
    """Whether `check` of `name` completes within CHECK_TIMEOUT_S without an error."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            await check
    except Exception as exc:
        log.warning("readiness: the %s does not answer: %r", name, exc)
        return False
    return True
