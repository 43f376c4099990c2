"""What the sites and links of this brain have free now (`cnbrain sites`, `cnbrain links`)."""

from typing import Annotated

from fastapi import APIRouter, Depends

from cnbrain.regional.deps import BrainDep, StaffDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import LinkUseView, SiteCapacityView
from cnbrain.regional.use_cases.capacity import CapacityReads

router = APIRouter(prefix="/v1/capacity", tags=["operator"])

ERRORS = responses({401: "No valid API key.", 403: "Operators and admins only."})
OWNED = (
    " A standalone brain shows its whole map; in a federation, a regional brain shows what "
    "its region owns (ask each region's brain for its own)."
)


async def _capacity(brain: BrainDep) -> CapacityReads:
    return CapacityReads(brain.live_map)


CapacityDep = Annotated[CapacityReads, Depends(_capacity)]


@router.get(
    "/sites",
    response_model=list[SiteCapacityView],
    responses=ERRORS,
    summary="Sites with their capacity and what is free on them now, by accelerator model",
    description="Free is the capacity less what the brain's reservations and the capacity "
    "reported in use outside it hold now." + OWNED,
)
async def site_capacity(cases: CapacityDep, _: StaffDep) -> list[SiteCapacityView]:
    return await cases.sites()


@router.get(
    "/links",
    response_model=list[LinkUseView],
    responses=ERRORS,
    summary="Links with their capacity and the bandwidth reserved on them now",
    description="Used is what the brain's reservations and the bandwidth reported in use "
    "outside it hold now." + OWNED,
)
async def link_use(cases: CapacityDep, _: StaffDep) -> list[LinkUseView]:
    return await cases.links()
