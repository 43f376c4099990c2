"""A placement decision: the chosen site and path, what it costs, and why."""

from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import Field

from cnbrain.domain.enums import LinkLayer
from cnbrain.domain.model import DomainModel

FEDERATION_POLICY: Final = "federation"
"""The policy of a rejection the federation made without an engine's decision: no region
answered or could hold its part, or the national brain could not be asked."""

STEERING_REASON: Final = "the network path could not be established"
"""The reason of a rejection whose path the data plane could not steer (its details are the
brain's log's, not the tenant's)."""


class DecisionStatus(StrEnum):
    PLACED = "placed"
    REJECTED = "rejected"


class SegmentKind(StrEnum):
    """Source: access node to the source gateway; backbone: gateway to gateway; destination:
    gateway to site; local: access node to a site in the same province."""

    SOURCE = "source"
    BACKBONE = "backbone"
    DESTINATION = "destination"
    LOCAL = "local"


class Hop(DomainModel):
    link: str
    from_node: str
    to_node: str
    layer: LinkLayer
    latency_ms: float
    residual_gbps: float = Field(description="Free bandwidth on the link before this reservation.")


class Segment(DomainModel):
    kind: SegmentKind
    owner: str = Field(
        description="Brain that computes and owns this segment: a region id or 'national'."
    )
    hops: tuple[Hop, ...]
    latency_ms: float


class NetworkPath(DomainModel):
    segments: tuple[Segment, ...]
    latency_ms: float
    bandwidth_gbps: float = Field(description="Bandwidth reserved on every link.")
    srv6_segment_list: tuple[str, ...] = Field(
        description="Strict SRv6 segment list: the End SID of every node after the access node."
    )


class Outcome(DomainModel):
    """What the chosen option costs, and its objective terms (each normalised, lower is better)."""

    cost_cny: float
    energy_kwh: float
    carbon_kg: float
    latency_ms: float
    site_utilisation: float = Field(
        description="Highest utilisation of any resource of the site after placement."
    )
    max_link_utilisation: float = Field(
        description="Utilisation of the most loaded path link after placement."
    )
    terms: dict[str, float]
    weights: dict[str, float]
    objective: float


class Rejection(DomainModel):
    """Sites one filter plugin rejected: its code (`unschedulable`: not now, capacity may
    free up; `unschedulable_and_unresolvable`: never while the map and the request stay as
    they are), its fixed reason, and a message with the amounts."""

    plugin: str
    code: str
    reason: str
    message: str = Field(
        default="",
        description="How the request and the closest rejected site differ, with amounts.",
    )
    sites: int


class Candidate(DomainModel):
    site: str
    score: float = Field(description="Weighted estimate used for Top-N (lower is better).")
    objective: float | None = Field(
        default=None, description="Best objective over its paths; None if no path fits."
    )


class Explanation(DomainModel):
    sites_total: int
    sites_feasible: int
    rejections: tuple[Rejection, ...]
    local_first: str = Field(description="How the local-first rule applied.")
    candidates: tuple[Candidate, ...]
    solver_status: str
    optimal: bool = Field(
        description="False when the solver hit its time limit; the answer is its best feasible."
    )
    timings_ms: dict[str, float]
    notes: tuple[str, ...] = ()


class Decision(DomainModel):
    request_id: str
    status: DecisionStatus
    policy: str
    site: str | None = None
    province: str | None = None
    site_kind: str | None = None
    path: NetworkPath | None = None
    outcome: Outcome | None = None
    reservation_id: str | None = None
    reason: str | None = Field(
        default=None, description="Why a rejected request could not be placed."
    )
    starts_at: datetime | None = Field(
        default=None,
        description="When its job starts: once the data it stages is on the site. None: as"
        " soon as it is placed.",
    )
    explanation: Explanation | None = None
