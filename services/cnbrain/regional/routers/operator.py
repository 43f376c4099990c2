"""The operator API: register, update and retire sites and links (算力注册); report the
capacity sites see in use (算力感知); the weight matrix."""

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.cache.base import CapacityKind
from cnbrain.domain.backend_ref import SIMULATOR, BackendRef
from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.execution import CredentialRefusedError, CredentialStore
from cnbrain.netmap.arrays import cores_to_millicores, gbps_to_mbps, gib_to_mib, whole_gib
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional.deps import BrainDep, StaffDep
from cnbrain.regional.problems import forbidden, invalid, responses
from cnbrain.regional.schemas import LinkUsageReport, SiteUsageReport
from cnbrain.regional.security import Principal, Role
from cnbrain.storage import audit, registry
from cnbrain.storage.weights import get_weight_matrix, set_weight_matrix

router = APIRouter(prefix="/v1", tags=["operator"])

ERRORS = responses(
    {
        401: "No valid API key.",
        403: "Operators and admins only; only admins set a site's execution backend.",
        404: "No such site or link.",
        422: "Malformed, or it would leave the map invalid.",
    }
)


MAX_SITE_LINKS = 64
"""Links one registration may attach to a site."""


class SiteRegistration(BaseModel):
    site: Site
    links: list[Link] = Field(
        max_length=MAX_SITE_LINKS,
        description="The links that attach the site to its province's nodes.",
    )


async def _change(
    brain: BrainDep,
    principal: Principal,
    *,
    action: str,
    object_type: str,
    object_id: str,
    write: Callable[[AsyncSession], Awaitable[None]],
    kind: CapacityKind = "map",
    detail: dict[str, Any] | None = None,
) -> None:
    """Apply `write` and its audit entry in one transaction, then refresh this replica's map
    (or snapshot) and tell the others."""
    async with brain.sessions.begin() as session:
        await write(session)
        await audit.record(
            session,
            actor=principal.user_id,
            action=action,
            object_type=object_type,
            object_id=object_id,
            detail=detail or {},
        )
    if kind == "map":
        await brain.reload_map()
    else:
        brain.capacity_changed()
    await brain.announce(kind)


def check_execution(
    principal: Principal, site: Site, *, current: BackendRef, store: CredentialStore, field: str
) -> None:
    """Refuse a change of a site's backend (`site.execution` differs from `current`) unless
    an admin makes it (403), and a Slurm backend whose credential `store` lacks or is for
    another URL (422 naming `field` + `.credential` or `.url`). An unchanged backend
    passes: operators update sites without seeing or choosing where their jobs go."""
    ref = site.execution
    if ref == current:
        return
    if principal.role != Role.ADMIN:
        raise forbidden(
            f"only an admin sets a site's execution backend; {field} differs from the "
            f"site's current one"
        )
    if ref.kind == "slurm":
        assert ref.credential is not None and ref.url is not None  # BackendRef guarantees them
        try:
            store.check(ref.credential, str(ref.url))
        except CredentialRefusedError as refused:
            raise invalid(f"{field}.{refused.field}", refused.message) from None


@router.get("/sites", response_model=list[Site], responses=ERRORS, summary="Active sites")
async def list_sites(brain: BrainDep, _: StaffDep) -> list[Site]:
    return list(brain.placement.map.sites)


@router.post(
    "/sites", response_model=Site, status_code=201, responses=ERRORS, summary="Register a site"
)
async def register_site(body: SiteRegistration, brain: BrainDep, principal: StaffDep) -> Site:
    check_execution(
        principal, body.site, current=SIMULATOR, store=brain.credentials, field="site.execution"
    )

    async def write(session: AsyncSession) -> None:
        await registry.register_site(session, site=body.site, links=tuple(body.links))

    await _change(
        brain,
        principal,
        action="site.registered",
        object_type="site",
        object_id=body.site.id,
        write=write,
    )
    return body.site


@router.put("/sites/{site_id}", response_model=Site, responses=ERRORS, summary="Update a site")
async def update_site(site_id: str, site: Site, brain: BrainDep, principal: StaffDep) -> Site:
    if site.id != site_id:
        raise invalid("id", f"the body's site {site.id!r} is not the path's {site_id!r}")

    def check(current: BackendRef) -> None:
        check_execution(
            principal, site, current=current, store=brain.credentials, field="execution"
        )

    async def write(session: AsyncSession) -> None:
        await registry.update_site(session, site=site, check_execution=check)

    await _change(
        brain, principal, action="site.updated", object_type="site", object_id=site_id, write=write
    )
    return site


@router.delete("/sites/{site_id}", status_code=204, responses=ERRORS, summary="Retire a site")
async def retire_site(site_id: str, brain: BrainDep, principal: StaffDep) -> None:
    async def write(session: AsyncSession) -> None:
        await registry.retire_site(session, site_id=site_id)

    await _change(
        brain, principal, action="site.retired", object_type="site", object_id=site_id, write=write
    )


@router.post(
    "/sites/{site_id}/usage",
    status_code=204,
    responses=ERRORS,
    summary="Report capacity of a site in use outside this brain",
)
async def report_site_usage(
    site_id: str, report: SiteUsageReport, brain: BrainDep, principal: StaffDep
) -> None:
    async def write(session: AsyncSession) -> None:
        await registry.report_site_usage(
            session,
            site_id=site_id,
            cpu_m=cores_to_millicores(report.cpu_cores),
            mem_mib=gib_to_mib(report.memory_gib),
            storage_gib=whole_gib(report.storage_gib),
            accelerators=report.accelerators,
        )

    await _change(
        brain,
        principal,
        action="site.usage_reported",
        object_type="site",
        object_id=site_id,
        write=write,
        kind="capacity",
        detail=report.model_dump(),
    )


@router.get("/links", response_model=list[Link], responses=ERRORS, summary="Active links")
async def list_links(brain: BrainDep, _: StaffDep) -> list[Link]:
    return list(brain.placement.map.links)


@router.post(
    "/links", response_model=Link, status_code=201, responses=ERRORS, summary="Register a link"
)
async def register_link(link: Link, brain: BrainDep, principal: StaffDep) -> Link:
    async def write(session: AsyncSession) -> None:
        await registry.register_link(session, link=link)

    await _change(
        brain,
        principal,
        action="link.registered",
        object_type="link",
        object_id=link.id,
        write=write,
    )
    return link


@router.put("/links/{link_id}", response_model=Link, responses=ERRORS, summary="Update a link")
async def update_link(link_id: str, link: Link, brain: BrainDep, principal: StaffDep) -> Link:
    if link.id != link_id:
        raise invalid("id", f"the body's link {link.id!r} is not the path's {link_id!r}")

    async def write(session: AsyncSession) -> None:
        await registry.update_link(session, link=link)

    await _change(
        brain, principal, action="link.updated", object_type="link", object_id=link_id, write=write
    )
    return link


@router.delete("/links/{link_id}", status_code=204, responses=ERRORS, summary="Retire a link")
async def retire_link(link_id: str, brain: BrainDep, principal: StaffDep) -> None:
    async def write(session: AsyncSession) -> None:
        await registry.retire_link(session, link_id=link_id)

    await _change(
        brain, principal, action="link.retired", object_type="link", object_id=link_id, write=write
    )


@router.post(
    "/links/{link_id}/usage",
    status_code=204,
    responses=ERRORS,
    summary="Report bandwidth of a link in use outside this brain",
)
async def report_link_usage(
    link_id: str, report: LinkUsageReport, brain: BrainDep, principal: StaffDep
) -> None:
    async def write(session: AsyncSession) -> None:
        await registry.report_link_usage(
            session, link_id=link_id, mbps=gbps_to_mbps(report.bandwidth_gbps)
        )

    await _change(
        brain,
        principal,
        action="link.usage_reported",
        object_type="link",
        object_id=link_id,
        write=write,
        kind="capacity",
        detail=report.model_dump(),
    )


@router.get(
    "/weight-matrix", response_model=WeightMatrix, responses=ERRORS, summary="The weight matrix"
)
async def get_matrix(brain: BrainDep, _: StaffDep) -> WeightMatrix:
    async with brain.sessions() as session:
        return await get_weight_matrix(session)


@router.put(
    "/weight-matrix",
    response_model=WeightMatrix,
    responses=ERRORS,
    summary="Replace the weight matrix",
)
async def put_matrix(matrix: WeightMatrix, brain: BrainDep, principal: StaffDep) -> WeightMatrix:
    async def write(session: AsyncSession) -> None:
        await set_weight_matrix(session, matrix=matrix)

    await _change(
        brain,
        principal,
        action="weights.updated",
        object_type="weight_matrix",
        object_id="default",
        write=write,
        detail=matrix.model_dump(mode="json"),
    )
    return matrix
