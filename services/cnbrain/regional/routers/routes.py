"""Routes between two sites: where a dataset or results would move, segment by segment."""

from typing import Annotated

from fastapi import APIRouter, Query

from cnbrain.domain.bounds import MAX_BANDWIDTH_GBPS
from cnbrain.netmap.arrays import gbps_to_mbps
from cnbrain.regional.deps import PrincipalDep, UseCasesDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import SiteRoutes
from cnbrain.regional.use_cases.site_routes import MAX_ROUTES

router = APIRouter(prefix="/v1", tags=["routes"])

ERRORS = responses(
    {
        401: "No valid API key.",
        422: "An unknown site or a bound out of range; `errors` names it.",
        503: "In a federation: the national brain or a segment's owner did not answer.",
    }
)

Site = Annotated[str, Query(min_length=1, max_length=128, description="A site id.")]


@router.get(
    "/routes",
    response_model=SiteRoutes,
    responses=ERRORS,
    summary="Routes between two sites",
    description="The best routes from `from_site` to `to_site`, best first: three segments "
    "(the first site's province to its gateway, the backbone, the second site's province), "
    "or one local segment inside one province, each with the brain that computed it and "
    "owns its links, its latency and the least free bandwidth of its links. In a "
    "federation each segment is computed by its owner. Routes with a link of less free "
    "bandwidth than `min_free_gbps` are left out.",
)
async def site_routes(
    _: PrincipalDep,
    cases: UseCasesDep,
    from_site: Site,
    to_site: Site,
    routes: Annotated[int, Query(ge=1, le=MAX_ROUTES)] = 3,
    min_free_gbps: Annotated[float, Query(ge=0, le=MAX_BANDWIDTH_GBPS, allow_inf_nan=False)] = 0.0,
) -> SiteRoutes:
    return await cases.routes(
        from_site, to_site, k=routes, min_free_mbps=gbps_to_mbps(min_free_gbps)
    )
