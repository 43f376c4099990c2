"""The operators' changes of the map (算力注册): sites and links registered, updated and
retired, capacity reported in use outside the brain (算力感知), links' states reported (down
or up: the brain's re-routing takes a link reported down for down, `federation.link_states`;
a backbone link's report is the national brain's), and the weight matrix (in a federation
the federation's, set through the national brain: `use_cases.policy_sync`).

Every change is one transaction with its audit entry. A change of the map then rebuilds this
replica's map and tells the others; a report of capacity in use is a change of capacity, made
in the capacity unit of work (`CapacityChanges`).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.backend_ref import SIMULATOR, BackendRef
from cnbrain.domain.errors import Forbidden, Invalid, NotFound, Unavailable
from cnbrain.domain.network import NATIONAL_OWNER, Link
from cnbrain.domain.site import Site
from cnbrain.execution import (
    BackendError,
    CredentialRefusedError,
    CredentialStore,
    NodeReport,
    SlurmBackend,
    backend_for,
)
from cnbrain.federation.live_map import LiveMap
from cnbrain.ledger.nodes import Pool, PoolReport, PoolSummary
from cnbrain.netmap.arrays import (
    accelerators_to_milli,
    cores_to_millicores,
    gbps_to_mbps,
    gib_to_mib,
    whole_gib,
)
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional.replicas import Replicas
from cnbrain.regional.schemas import (
    LinkStateReport,
    LinkStateView,
    LinkUsageReport,
    PoolView,
    SiteNodesView,
    SiteUsageReport,
)
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.ports import BackboneLinks, NationalPolicy
from cnbrain.storage import audit, ledger_store, link_states, node_reports, registry
from cnbrain.storage.weights import get_weight_matrix, set_weight_matrix


class MapAdministration:
    """The map changes of staff callers (the HTTP edge admits only operators and admins).
    Raises the error tree: Invalid (naming the field) for a change that would leave the map
    invalid, NotFound for an unknown site or link, Forbidden for a backend change by a
    non-admin. `backbone` (None: no national brain) takes the reports of backbone links."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        changes: CapacityChanges,
        replicas: Replicas,
        credentials: CredentialStore,
        policy: NationalPolicy | None = None,
        backbone: BackboneLinks | None = None,
    ) -> None:
        self._backbone = backbone
        self._sessions = sessions
        self._live_map = live_map
        self._changes = changes
        self._replicas = replicas
        self._credentials = credentials
        self._policy = policy

    def sites(self) -> list[Site]:
        return list(self._live_map.map.sites)

    def links(self) -> list[Link]:
        return list(self._live_map.map.links)

    async def site_nodes(self, site_id: str) -> SiteNodesView:
        """The site's node pools with what the brain's own reservations leave free on them and
        what the site's last report that still counts says free, and its nodes as its
        scheduler reports them now (Slurm's node list; none from a simulator). Raises
        NotFound for a site not on the map."""
        cmap = self._live_map.map
        if site_id not in cmap.site_index:
            raise NotFound(f"site {site_id!r} is not on the map")
        site = cmap.site(site_id)
        pools = tuple(Pool.of(pool) for pool in site.node_pools)
        free: tuple[PoolSummary, ...] = ()
        reports: tuple[PoolReport | None, ...] = ()
        if pools:
            async with self._sessions() as session:
                free = (await ledger_store.node_summaries(session, pools={site_id: pools}))[site_id]
                current = await node_reports.current(session, pools={site_id: pools})
            reports = current.get(site_id, (None,) * len(pools))
        reported, error = await self._reported_nodes(site.execution)
        return SiteNodesView(
            site=site_id,
            pools=[
                PoolView(
                    **pool.model_dump(),
                    nodes_by_free=list(summary.nodes_by_free),
                    shared_by_free=list(summary.shared_by_free),
                    reported_nodes_by_free=(
                        None if report is None else list(report.summary.nodes_by_free)
                    ),
                    reported_shared_by_free=(
                        list(report.summary.shared_by_free)
                        if report is not None and report.shards
                        else None
                    ),
                    held=list(summary.held),
                )
                for pool, summary, report in zip(site.node_pools, free, reports, strict=True)
            ],
            reported=reported,
            reported_error=error,
        )

    async def _reported_nodes(self, ref: BackendRef) -> tuple[list[NodeReport] | None, str | None]:
        """The nodes the site's scheduler reports, or None and why it could not tell (None,
        None: a simulator reports none)."""
        backend = backend_for(ref, credentials=self._credentials)
        try:
            if not isinstance(backend, SlurmBackend):
                return None, None
            return await backend.nodes(), None
        except BackendError as exc:
            return None, str(exc)
        finally:
            await backend.aclose()

    async def register_site(self, principal: Principal, site: Site, links: list[Link]) -> None:
        self._check_execution(principal, site, current=SIMULATOR, field="site.execution")
        async with self._map_change(principal, "site.registered", "site", site.id) as session:
            await registry.register_site(session, site=site, links=tuple(links))

    async def update_site(self, principal: Principal, site_id: str, site: Site) -> None:
        if site.id != site_id:
            raise Invalid(f"the body's site {site.id!r} is not the path's {site_id!r}", field="id")

        def check(current: BackendRef) -> None:
            self._check_execution(principal, site, current=current, field="execution")

        async with self._map_change(principal, "site.updated", "site", site_id) as session:
            await registry.update_site(session, site=site, check_execution=check)

    async def retire_site(self, principal: Principal, site_id: str) -> None:
        async with self._map_change(principal, "site.retired", "site", site_id) as session:
            await registry.retire_site(session, site_id=site_id)

    async def report_site_usage(
        self, principal: Principal, site_id: str, report: SiteUsageReport
    ) -> None:
        async with self._capacity_change(
            principal, "site.usage_reported", "site", site_id, report.model_dump()
        ) as session:
            await registry.report_site_usage(
                session,
                site_id=site_id,
                cpu_m=cores_to_millicores(report.cpu_cores),
                mem_mib=gib_to_mib(report.memory_gib),
                storage_gib=whole_gib(report.storage_gib),
                accelerators={m: accelerators_to_milli(n) for m, n in report.accelerators.items()},
            )

    async def register_link(self, principal: Principal, link: Link) -> None:
        async with self._map_change(principal, "link.registered", "link", link.id) as session:
            await registry.register_link(session, link=link)

    async def update_link(self, principal: Principal, link_id: str, link: Link) -> None:
        if link.id != link_id:
            raise Invalid(f"the body's link {link.id!r} is not the path's {link_id!r}", field="id")
        async with self._map_change(principal, "link.updated", "link", link_id) as session:
            await registry.update_link(session, link=link)

    async def retire_link(self, principal: Principal, link_id: str) -> None:
        async with self._map_change(principal, "link.retired", "link", link_id) as session:
            await registry.retire_link(session, link_id=link_id)

    async def report_link_usage(
        self, principal: Principal, link_id: str, report: LinkUsageReport
    ) -> None:
        async with self._capacity_change(
            principal, "link.usage_reported", "link", link_id, report.model_dump()
        ) as session:
            await registry.report_link_usage(
                session, link_id=link_id, mbps=gbps_to_mbps(report.bandwidth_gbps)
            )

    async def report_link_state(
        self, principal: Principal, link_id: str, report: LinkStateReport
    ) -> LinkStateView:
        """Keep `report` as the last of link `link_id`, with its audit entry: in this brain's
        database when this brain owns the link (a standalone brain owns every link): from
        then on the link offers nothing to new reservations, and the brain's re-routing
        moves those crossing it from its next pass; for a backbone link of a region's brain,
        in the national brain's (forwarded), which does the same for the backbone. Raises
        NotFound for a link not on the map, Invalid for another region's link, Unavailable
        (nothing kept) when the national brain cannot be reached or this brain has none, and
        NotFound or Invalid when the national brain refuses it."""
        arrays = self._live_map.engine.arrays
        index = arrays.link_index.get(link_id)
        if index is None:
            raise NotFound(f"link {link_id!r} is not on the map")
        link = arrays.map.links[index]
        actor = principal.user_id[: link_states.MAX_ACTOR]
        detail = {"state": report.state, "reason": report.reason}
        if self._live_map.ownership.owns_link(index):
            async with self._capacity_change(
                principal, "link.state_reported", "link", link_id, detail
            ) as session:
                kept = await link_states.report(
                    session, link_id=link_id, state=report.state, reason=report.reason, actor=actor
                )
            return LinkStateView(
                link=link_id,
                owner=link.owner,
                state=report.state,
                reason=report.reason,
                kept_by=self._live_map.owner or "standalone",
                reported_at=kept.at,
            )
        if link.owner != NATIONAL_OWNER:
            raise Invalid(
                f"link {link_id!r} is region {link.owner}'s: report it to that region's brain",
                field="link_id",
            )
        if self._backbone is None:
            raise Unavailable(
                f"link {link_id!r} is a backbone link, whose state the national brain keeps, "
                "and this brain is linked to none"
            )
        at = await self._backbone.report_link_state(
            link_id, down=report.state == link_states.DOWN, reason=report.reason, actor=actor
        )
        async with self._sessions.begin() as session:
            await _audit(
                session,
                principal,
                "link.state_reported",
                "link",
                link_id,
                {**detail, "kept_by": NATIONAL_OWNER},
            )
        return LinkStateView(
            link=link_id,
            owner=link.owner,
            state=report.state,
            reason=report.reason,
            kept_by=NATIONAL_OWNER,
            reported_at=at,
        )

    async def weight_matrix(self) -> WeightMatrix:
        async with self._sessions() as session:
            return await get_weight_matrix(session)

    async def set_weight_matrix(self, principal: Principal, matrix: WeightMatrix) -> None:
        """Set the weight matrix: in a federation, the federation's, through the national
        brain first (Unavailable when it cannot be reached: nothing changes), then here."""
        if self._policy is not None:
            await self._policy.set_weight_matrix(matrix, actor=principal.user_id)
        detail = matrix.model_dump(mode="json")
        async with self._map_change(
            principal, "weights.updated", "weight_matrix", "default", detail
        ) as session:
            await set_weight_matrix(session, matrix=matrix)

    @asynccontextmanager
    async def _map_change(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_id: str,
        detail: dict[str, Any] | None = None,
    ) -> AsyncIterator[AsyncSession]:
        """A transaction for the block's change of the map, with its audit entry; once it has
        committed, this replica's map is rebuilt and the others are told. When the block
        raises, nothing is written or announced."""
        async with self._sessions.begin() as session:
            yield session
            await _audit(session, principal, action, object_type, object_id, detail)
        await self._live_map.reload()
        await self._replicas.announce("map")

    @asynccontextmanager
    async def _capacity_change(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_id: str,
        detail: dict[str, Any],
    ) -> AsyncIterator[AsyncSession]:
        """A unit of work for the block's change of what is free, with its audit entry."""
        async with self._changes.begin() as (session, change):
            yield session
            await _audit(session, principal, action, object_type, object_id, detail)
            change.free()

    def _check_execution(
        self, principal: Principal, site: Site, *, current: BackendRef, field: str
    ) -> None:
        """Refuse a change of a site's backend (`site.execution` differs from `current`)
        unless an admin makes it (Forbidden), and a Slurm backend whose credential the store
        lacks or holds for another URL (Invalid naming `field` + `.credential` or `.url`). An
        unchanged backend passes: operators update sites without seeing or choosing where
        their jobs go."""
        ref = site.execution
        if ref == current:
            return
        if principal.role != Role.ADMIN:
            raise Forbidden(
                f"only an admin sets a site's execution backend; {field} differs from the "
                f"site's current one"
            )
        if ref.kind == "slurm":
            assert ref.credential is not None and ref.url is not None  # BackendRef ensures it
            try:
                self._credentials.check(ref.credential, str(ref.url))
            except CredentialRefusedError as refused:
                raise Invalid(refused.message, field=f"{field}.{refused.field}") from None


async def _audit(
    session: AsyncSession,
    principal: Principal,
    action: str,
    object_type: str,
    object_id: str,
    detail: dict[str, Any] | None,
) -> None:
    await audit.record(
        session,
        actor=principal.user_id,
        action=action,
        object_type=object_type,
        object_id=object_id,
        detail=detail or {},
    )
