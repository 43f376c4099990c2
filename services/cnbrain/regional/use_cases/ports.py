"""What the use cases need of the world beyond the brain's database and cache, as ports: the
adapters that implement them live outside `use_cases` (the national link over gRPC,
`regional.federation.NationalLink`)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cnbrain.domain.decision import Decision
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.tenancy import TenancyChange
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional.schemas import SiteRouteView
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.storage.tenants import QuotaUsed


@dataclass(frozen=True, slots=True)
class NationalPlan:
    """The national brain's plan of a waiting cross-region request it could not place now:
    its earliest start within its max wait (epoch seconds) and site, or None and None; and
    what it found."""

    start_s: int | None
    site_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class NationalQuote:
    """The national brain's quote of a request: the decision a cross-region placement would
    make now (nothing reserved), or, when the national brain could not be reached
    (`reached` False), a rejection naming the cause."""

    decision: Decision
    reached: bool


class NationalClient(Protocol):
    """The national brain, seen from a regional brain."""

    async def escalate(self, request: PlacementRequest) -> Decision:
        """The national brain's decision for a request no site of this region fits: placed
        (committed in every owner) or rejected; a rejection naming the cause when the
        national brain cannot be reached."""

    async def escalate_waiting(
        self, request: PlacementRequest, *, wait_until_s: int
    ) -> tuple[Decision, NationalPlan | None]:
        """`escalate` for a request that waits in this region's queue until epoch second
        `wait_until_s`: with a rejection, the national brain's plan of its wait (None when
        it gave none, or could not be reached)."""

    async def quote(self, request: PlacementRequest) -> NationalQuote:
        """What `escalate` would answer for `request` now, with nothing prepared or reserved
        in any owner."""

    async def release(
        self, reservation_id: str, reason: str, *, keep_delivery: bool = False
    ) -> bool:
        """Release a cross-region reservation in every owner (with `keep_delivery`, but its
        delivery flows, which hold until their windows end: its job completed); True when
        the national brain held it. Raises PeerUnavailable when it cannot be reached or does
        not answer in time (then nothing is known to have been released)."""

    async def site_routes(
        self, from_site: str, to_site: str, *, k: int, min_free_mbps: int
    ) -> list[SiteRouteView]:
        """The national brain's best routes between two sites, each segment computed by its
        owner. Raises Invalid naming a field the national brain refused, PeerUnavailable
        when it (or an owner) cannot be reached."""


class BackboneLinks(Protocol):
    """The national brain, which keeps the state of the backbone links."""

    async def report_link_state(
        self, link_id: str, *, down: bool, reason: str, actor: str
    ) -> datetime:
        """Have the national brain keep this report of backbone link `link_id`, made by
        `actor` of this region; when it kept it. Raises NotFound when it is not a backbone
        link of the national brain's map, Invalid for a field it refuses, PeerUnavailable
        when it cannot be reached (then nothing is known to have changed)."""


class NationalPolicy(Protocol):
    """The federation's policy, which the national brain holds."""

    async def set_weight_matrix(self, matrix: WeightMatrix, *, actor: str) -> None:
        """Make `matrix` the federation's weight matrix, set by `actor` of this region.
        Raises PeerUnavailable when the national brain cannot be reached (then nothing is
        known to have changed)."""

    async def weight_matrix(self, *, known_digest: str) -> WeightMatrix | None:
        """The federation's weight matrix, or None when its digest is `known_digest`.
        Raises PeerUnavailable when the national brain cannot be reached."""

    async def put_priority_class(
        self, one: PriorityClass, *, default: bool, actor: str
    ) -> tuple[PriorityClasses, bool]:
        """Create or replace `one` among the federation's priority classes (the default
        class when `default`), put by `actor` of this region; the federation's set now, and
        whether the class is new. Raises Conflict when the set's rules refuse it, and
        PeerUnavailable when the national brain cannot be reached (then nothing is known to
        have changed)."""

    async def delete_priority_class(self, name: str, *, actor: str) -> PriorityClasses:
        """Delete the federation's class called `name`; the federation's set now. Raises
        NotFound (no such class), Conflict (the default class, or one that requests the
        national brain holds name) or PeerUnavailable, as `put_priority_class`."""

    async def priority_classes(self, *, known_digest: str) -> PriorityClasses | None:
        """The federation's priority classes, or None when their digest is `known_digest`.
        Raises PeerUnavailable when the national brain cannot be reached."""


@dataclass(frozen=True, slots=True)
class TenancyPage:
    """Changes of the federation's tenancy after a version, in version order (each with its
    version), and the national brain's latest version."""

    changes: list[tuple[int, TenancyChange]]
    latest_version: int


class NationalTenancy(Protocol):
    """The federation's tenancy, which the national brain holds."""

    async def national_quota_use(self, tenant_id: str) -> QuotaUsed:
        """What the tenant's reservations use of its national quota. Raises NotFound when
        the national brain knows no such tenant, PeerUnavailable when it cannot be reached
        or answers amounts out of bounds."""

    async def change_tenancy(self, change: TenancyChange, *, actor: str) -> TenancyChange:
        """Record `change`, made by `actor` of this region, in the national brain; the change
        as recorded there (with its time). Raises NotFound, Conflict or Invalid as the
        national brain refused it, PeerUnavailable when it cannot be reached (then nothing
        is known to have changed)."""

    async def tenancy_since(self, version: int, *, limit: int) -> TenancyPage:
        """At most `limit` changes after `version`. Raises PeerUnavailable when the national
        brain cannot be reached or answers what is not such a page."""
