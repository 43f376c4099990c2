"""Resource vectors over named dimensions, and the dominant share of a usage.

A dimension is a name: `cpu_m` (millicores), `mem_mib`, `storage_gib`, one per accelerator
model (`accelerator_dimension("A100")` is `accelerator:A100`), one per link for the bandwidth
held on it, in Mbps (`link_dimension("AA-acc--AA-gw")` is `link:AA-acc--AA-gw`; `bandwidth`
builds such a vector from the Mbps per link id), or any other name a caller counts (for
example `active_requests`). A dimension is at most `MAX_DIMENSION_LENGTH` characters.
Amounts are integers in the ledger's units; a vector leaves out the dimensions it holds zero
of, so two vectors with the same amounts are equal.
A difference may hold negative amounts; `positive_part` drops them.
"""

from collections.abc import Iterator, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.ledger.claim import Claim
from cnbrain.scheduling.checks import checked_name

CPU_M: Final = "cpu_m"
MEM_MIB: Final = "mem_mib"
STORAGE_GIB: Final = "storage_gib"
ACCELERATOR_PREFIX: Final = "accelerator:"
LINK_PREFIX: Final = "link:"

MAX_DIMENSION_LENGTH: Final = 2 * bounds.MAX_NAME_LENGTH + 16
"""A dimension is a name of at most this many characters: room for a prefix and a link id
(its two ends' names joined by `--`)."""


def accelerator_dimension(model: str) -> str:
    """The dimension that counts accelerators of `model`."""
    return f"{ACCELERATOR_PREFIX}{model}"


def link_dimension(link_id: str) -> str:
    """The dimension that counts the bandwidth (Mbps) held on the link `link_id`."""
    return f"{LINK_PREFIX}{link_id}"


def is_link_dimension(dimension: str) -> bool:
    """Whether `dimension` counts a link's bandwidth (`link_dimension`)."""
    return dimension.startswith(LINK_PREFIX)


def link_of(dimension: str) -> str:
    """The link id a link dimension names (`link_dimension`'s inverse)."""
    return dimension[len(LINK_PREFIX) :]


class Resources:
    """An immutable vector: an integer amount per dimension, zero where it names none.

    Raises `Invalid` (field `resources.<dimension>`) for a dimension that is not a name or an
    amount that is not an int."""

    __slots__ = ("_amounts",)
    _amounts: Mapping[str, int]

    def __init__(self, amounts: Mapping[str, int] | None = None) -> None:
        kept: dict[str, int] = {}
        for dimension, amount in (amounts or {}).items():
            checked_name(dimension, field="resources", max_length=MAX_DIMENSION_LENGTH)
            if isinstance(amount, bool) or not isinstance(amount, int):
                raise Invalid("must be an integer", field=f"resources.{dimension}")
            kept[dimension] = amount
        self._keep(kept)

    @classmethod
    def _of_checked(cls, amounts: dict[str, int]) -> "Resources":
        """A vector of amounts computed from checked vectors: no need to check them again."""
        vector = cls.__new__(cls)
        vector._keep(amounts)
        return vector

    def _keep(self, amounts: dict[str, int]) -> None:
        kept = {dimension: amount for dimension, amount in sorted(amounts.items()) if amount}
        object.__setattr__(self, "_amounts", MappingProxyType(kept))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Resources are immutable; cannot set {name!r}")

    @property
    def amounts(self) -> Mapping[str, int]:
        """The non-zero amounts, by dimension in name order (read-only)."""
        return self._amounts

    @classmethod
    def of(
        cls,
        *,
        cpu_m: int = 0,
        mem_mib: int = 0,
        storage_gib: int = 0,
        accelerators: Mapping[str, int] | None = None,
        **others: int,
    ) -> "Resources":
        """A vector from the usual dimensions, accelerators by model, and any others."""
        amounts = {CPU_M: cpu_m, MEM_MIB: mem_mib, STORAGE_GIB: storage_gib, **others}
        for model, count in (accelerators or {}).items():
            amounts[accelerator_dimension(model)] = count
        return cls(amounts)

    @classmethod
    def of_claim(cls, claim: Claim) -> "Resources":
        """The compute a ledger claim takes (its bandwidth is the routing's, not counted)."""
        accelerators = (
            {claim.accelerator_model: claim.accelerator_milli} if claim.accelerator_model else {}
        )
        return cls.of(
            cpu_m=claim.cpu_m,
            mem_mib=claim.mem_mib,
            storage_gib=claim.storage_gib,
            accelerators=accelerators,
        )

    @classmethod
    def bandwidth(cls, mbps_by_link: Mapping[str, int]) -> "Resources":
        """The bandwidth held on links, over link dimensions: `mbps_by_link[link_id]` Mbps on
        each link. Raises `Invalid` (field `resources.link:<id>`) for a link id that is not a
        name or an amount that is not an int."""
        return cls({link_dimension(link): mbps for link, mbps in mbps_by_link.items()})

    def __getitem__(self, dimension: str) -> int:
        """The amount of `dimension`; zero for one the vector does not name."""
        return self.amounts.get(dimension, 0)

    def __iter__(self) -> Iterator[str]:
        """The dimensions of non-zero amount, in name order."""
        return iter(self.amounts)

    def __add__(self, other: "Resources") -> "Resources":
        summed = dict(self.amounts)
        for dimension, amount in other.amounts.items():
            summed[dimension] = summed.get(dimension, 0) + amount
        return Resources._of_checked(summed)

    def __sub__(self, other: "Resources") -> "Resources":
        left = dict(self.amounts)
        for dimension, amount in other.amounts.items():
            left[dimension] = left.get(dimension, 0) - amount
        return Resources._of_checked(left)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resources) and self.amounts == other.amounts

    def __hash__(self) -> int:
        return hash(tuple(self.amounts.items()))

    def __repr__(self) -> str:
        return f"Resources({dict(self.amounts)!r})"

    def fits(self, capacity: "Resources") -> bool:
        """Whether every amount is at most `capacity`'s (zero where `capacity` names none)."""
        return all(amount <= capacity[dimension] for dimension, amount in self.amounts.items())

    def positive_part(self) -> "Resources":
        """The vector without its negative amounts."""
        return Resources._of_checked(
            {d: amount for d, amount in self.amounts.items() if amount > 0}
        )

    def is_zero(self) -> bool:
        return not self.amounts

    def is_nonnegative(self) -> bool:
        return all(amount >= 0 for amount in self.amounts.values())


def dominant_fraction(usage: Resources, capacity: Resources) -> Fraction:
    """The largest `usage[d] / capacity[d]`, exactly, over the dimensions `capacity` holds a
    positive amount of; dimensions of zero capacity are ignored; 0 when no dimension counts
    or the usage is nowhere positive."""
    best, of = 0, 1  # the largest amount / total so far, compared by cross-multiplying
    held = capacity.amounts
    for dimension, amount in usage.amounts.items():
        total = held.get(dimension, 0)
        if total > 0 and amount * of > best * total:
            best, of = amount, total
    return Fraction(best, of)


def dominant_share(usage: Resources, capacity: Resources) -> float:
    """`dominant_fraction(usage, capacity)` as a float: the largest `usage[d] / capacity[d]`
    over the dimensions of positive capacity (0.0 when none counts)."""
    return float(dominant_fraction(usage, capacity))
