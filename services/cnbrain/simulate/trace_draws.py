"""Seeded draws shared by the trace converter and generator.

Every draw takes the `random.Random` it uses, so a caller that seeds its generators gets the
same trace for the same seed on every run and platform (`random.Random` is a Mersenne Twister
whose sequence Python keeps stable).
"""

import random
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Generic, TypeVar

from cnbrain.netmap.compute_map import ComputeNetworkMap

T = TypeVar("T")


class WeightedChoice(Generic[T]):
    """Draws one of `items` with probability proportional to its weight.

    Weights must be finite and non-negative with a positive sum; raises ValueError otherwise.
    Each draw consumes exactly one `rng.random()`.
    """

    def __init__(self, items: Sequence[T], weights: Sequence[float]) -> None:
        if len(items) != len(weights) or not items:
            raise ValueError("a weighted choice needs as many weights as items, and one item")
        if any(not (w >= 0 and w != float("inf")) for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"weights must be finite, non-negative, with a positive sum: {weights}"
            )
        self.items = tuple(items)
        self._cum = list(accumulate(weights))

    def draw(self, rng: random.Random) -> T:
        return rng.choices(self.items, cum_weights=self._cum)[0]


def province_choice(cmap: ComputeNetworkMap) -> WeightedChoice[str]:
    """Provinces of `cmap` weighted by `demand_weight` (uniform when every weight is zero)."""
    codes = cmap.province_codes
    weights = [cmap.provinces[code].demand_weight for code in codes]
    if sum(weights) <= 0:
        weights = [1.0] * len(codes)
    return WeightedChoice(codes, weights)


def accelerator_counts(cmap: ComputeNetworkMap) -> Mapping[str, int]:
    """Accelerators of each model over all sites of `cmap`, in catalog order, zeros left out."""
    counts = dict.fromkeys(cmap.accelerator_models, 0)
    for site in cmap.sites:
        for model, count in site.capacity.accelerators.items():
            if count > 0:
                counts[model] += count
    return counts


def most_common_model(cmap: ComputeNetworkMap) -> str | None:
    """The model with the most accelerators on `cmap` (ties: catalog order); None if it has none."""
    counts = accelerator_counts(cmap)
    return max(counts, key=lambda m: counts[m]) if counts else None
