"""Liveness and readiness."""

from fastapi import APIRouter
from sqlalchemy import text

from cnbrain.regional.deps import BrainDep
from cnbrain.regional.problems import ApiError
from cnbrain.regional.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz(brain: BrainDep) -> Health:
    return Health(status="ok", instance=brain.settings.instance_id)


@router.get(
    "/readyz", response_model=Health, summary="The database and cache answer and the map is loaded"
)
async def readyz(brain: BrainDep) -> Health:
    try:
        async with brain.sessions() as session:
            await session.execute(text("SELECT 1"))
        await brain.caches.ping()
        placement = brain.placement
    except Exception as exc:
        raise ApiError(503, "Service Unavailable", f"not ready: {exc}") from None
    return Health(
        status="ready",
        instance=brain.settings.instance_id,
        map=placement.map.name,
        sites=len(placement.map.sites),
        region=brain.settings.region,
        national_registered=brain.national.registered.is_set() if brain.national else None,
    )
