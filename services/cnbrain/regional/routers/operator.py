"""The operator API: register, update and retire sites and links (算力注册); report the
capacity sites see in use (算力感知) and the state of links; the weight matrix."""

from fastapi import APIRouter
from pydantic import BaseModel, Field

from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional.deps import MapAdminDep, StaffDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import (
    LinkStateReport,
    LinkStateView,
    LinkUsageReport,
    SiteNodesView,
    SiteUsageReport,
)

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


@router.get("/sites", response_model=list[Site], responses=ERRORS, summary="Active sites")
async def list_sites(maps: MapAdminDep, _: StaffDep) -> list[Site]:
    """Staff only. The active sites of this brain's map with their capacity, prices, energy
    figures and node pools."""
    return maps.sites()


@router.post(
    "/sites", response_model=Site, status_code=201, responses=ERRORS, summary="Register a site"
)
async def register_site(body: SiteRegistration, maps: MapAdminDep, principal: StaffDep) -> Site:
    """Staff only. Adds a site with the links that attach it to its province's network nodes; it
    is a candidate for placement at once. 422 when the map would be invalid (an unknown node, a
    duplicate id)."""
    await maps.register_site(principal, body.site, body.links)
    return body.site


@router.put("/sites/{site_id}", response_model=Site, responses=ERRORS, summary="Update a site")
async def update_site(site_id: str, site: Site, maps: MapAdminDep, principal: StaffDep) -> Site:
    """Staff only. Replaces a site's description (capacity, prices, labels, node pools);
    reservations it holds stay. Only admins change its execution backend."""
    await maps.update_site(principal, site_id, site)
    return site


@router.delete("/sites/{site_id}", status_code=204, responses=ERRORS, summary="Retire a site")
async def retire_site(site_id: str, maps: MapAdminDep, principal: StaffDep) -> None:
    """Staff only. Retires the site and the links that attach it; no request is placed there
    any more. 422 while it holds reservations (release them first) or when the map would be
    invalid without it."""
    await maps.retire_site(principal, site_id)


@router.get(
    "/sites/{site_id}/nodes",
    response_model=SiteNodesView,
    responses=ERRORS,
    summary="A site's node pools, what the brain's reservations leave free on them, and the "
    "nodes as the site's scheduler reports them",
)
async def site_nodes(site_id: str, maps: MapAdminDep, _: StaffDep) -> SiteNodesView:
    """Staff only. The site's node pools (shape and count), what the brain's own reservations
    leave free on them node by node, in summary, and the nodes as the site's scheduler last
    reported them."""
    return await maps.site_nodes(site_id)


@router.post(
    "/sites/{site_id}/usage",
    status_code=204,
    responses=ERRORS,
    summary="Report capacity of a site in use outside this brain",
)
async def report_site_usage(
    site_id: str, report: SiteUsageReport, maps: MapAdminDep, principal: StaffDep
) -> None:
    """Staff only. Capacity of the site in use by work outside this brain (the site's own
    users), as the site reports it; it replaces the last report, and placement counts it as
    taken."""
    await maps.report_site_usage(principal, site_id, report)


@router.get("/links", response_model=list[Link], responses=ERRORS, summary="Active links")
async def list_links(maps: MapAdminDep, _: StaffDep) -> list[Link]:
    """Staff only. The active links of this brain's map: endpoints, layer, bandwidth, latency,
    price and owner."""
    return maps.links()


@router.post(
    "/links", response_model=Link, status_code=201, responses=ERRORS, summary="Register a link"
)
async def register_link(link: Link, maps: MapAdminDep, principal: StaffDep) -> Link:
    """Staff only. Adds a link between two network nodes, or a network node and a site (sites
    link to nodes only). 422 when an endpoint is unknown or the map would be invalid."""
    await maps.register_link(principal, link)
    return link


@router.put("/links/{link_id}", response_model=Link, responses=ERRORS, summary="Update a link")
async def update_link(link_id: str, link: Link, maps: MapAdminDep, principal: StaffDep) -> Link:
    """Staff only. Replaces a link's bandwidth, latency or price; reservations on it stay."""
    await maps.update_link(principal, link_id, link)
    return link


@router.delete("/links/{link_id}", status_code=204, responses=ERRORS, summary="Retire a link")
async def retire_link(link_id: str, maps: MapAdminDep, principal: StaffDep) -> None:
    """Staff only. Retires the link; no path uses it any more. 422 while reservations hold
    bandwidth on it, or when the map would be invalid without it (a site or access node cut off
    from its gateway)."""
    await maps.retire_link(principal, link_id)


@router.post(
    "/links/{link_id}/usage",
    status_code=204,
    responses=ERRORS,
    summary="Report bandwidth of a link in use outside this brain",
)
async def report_link_usage(
    link_id: str, report: LinkUsageReport, maps: MapAdminDep, principal: StaffDep
) -> None:
    """Staff only. Bandwidth of the link in use by traffic outside this brain, as reported; it
    replaces the last report, and routing counts it as taken."""
    await maps.report_link_usage(principal, link_id, report)


LINK_STATE_ERRORS = responses(
    {
        401: "No valid API key.",
        403: "Operators and admins only.",
        404: "No such link (or, for a backbone link, none on the national brain's map).",
        422: "Malformed, or a link of another region (report it to that region's brain).",
        503: "A backbone link, and the national brain that keeps its state cannot be reached.",
    }
)


@router.put(
    "/links/{link_id}/state",
    response_model=LinkStateView,
    responses=LINK_STATE_ERRORS,
    summary="Report a link down or up",
)
async def report_link_state(
    link_id: str, report: LinkStateReport, maps: MapAdminDep, principal: StaffDep
) -> LinkStateView:
    """Staff only. The link is down (it carries nothing) or up again, as an operator sees
    it; the report replaces the link's last one and is audited. A link down offers nothing
    to new reservations, and counts for re-routing as a link the data plane has down,
    whether the brain steers or not: the reservations over it are re-routed within a
    steering interval, each owner re-routing its own segment of a cross-region path, and
    no new or re-routed path takes it (`docs/dataplane.md`). A link up again offers its
    bandwidth again, and takes nothing back: paths stay where they were moved. A link of
    this brain is kept here; a backbone link is forwarded to the national brain, which
    keeps it and re-routes the backbone segments (`kept_by` says which)."""
    return await maps.report_link_state(principal, link_id, report)


@router.get(
    "/weight-matrix", response_model=WeightMatrix, responses=ERRORS, summary="The weight matrix"
)
async def get_matrix(maps: MapAdminDep, _: StaffDep) -> WeightMatrix:
    """Staff only. The weights the placement objective gives cost, energy, latency and balance,
    by workload class."""
    return await maps.weight_matrix()


@router.put(
    "/weight-matrix",
    response_model=WeightMatrix,
    responses=ERRORS,
    summary="Replace the weight matrix",
)
async def put_matrix(matrix: WeightMatrix, maps: MapAdminDep, principal: StaffDep) -> WeightMatrix:
    """Staff only. Replaces the weight matrix; decisions from now on use it."""
    await maps.set_weight_matrix(principal, matrix)
    return matrix
