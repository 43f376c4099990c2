"""Priority classes of simulated jobs: the built-in set, and a seeded draw of each job's class.

Traces name no class, so with classes on every job gets one by a draw: `draw_classes` picks
each job's class independently with the given shares, from a generator seeded by the run's
seed (the same jobs, shares and seed give the same classes). The set is fixed, the classes a
regional brain starts with (`scheduling.classes.BUILT_IN`):

| class | value | preemptible | max wait |
|---|---:|---|---:|
| `high` | 900 | no | 1 h |
| `normal` | 500 | yes | 24 h |
| `low` | 100 | yes | 24 h |

A job's queue limit is its class's max wait (the run's `queue_limit_s` is then unused).
"""

import math
from collections.abc import Mapping
from typing import Final

import numpy as np

from cnbrain.scheduling.classes import BUILT_IN

DEFAULT_SHARES: Final = {"high": 0.2, "normal": 0.5, "low": 0.3}
"""The share of jobs drawn into each class when none are given."""

DEFAULT_SPEC: Final = "default"
"""The `--classes` value that names `DEFAULT_SHARES`."""


def parse_shares(text: str) -> dict[str, float]:
    """`name:share,...` (or `default`) as shares per class, in `BUILT_IN`'s order. Every name
    must be a class of `BUILT_IN`, at most once; every share finite and at least 0, and their
    sum positive; classes not named get 0. ValueError naming the problem otherwise."""
    if text.strip() == DEFAULT_SPEC:
        return dict(DEFAULT_SHARES)
    given: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = (piece.strip() for piece in part.partition(":"))
        if not sep or name not in BUILT_IN:
            known = ", ".join(one.name for one in BUILT_IN)
            raise ValueError(f"--classes {text!r}: expected name:share with names among {known}")
        if name in given:
            raise ValueError(f"--classes {text!r}: class {name} is given twice")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"--classes {text!r}: the share of {name} is not a number") from None
        if not math.isfinite(share) or share < 0:
            raise ValueError(f"--classes {text!r}: the share of {name} must be finite and >= 0")
        given[name] = share
    if sum(given.values()) <= 0:
        raise ValueError(f"--classes {text!r}: the shares must not all be 0")
    return {one.name: given.get(one.name, 0.0) for one in BUILT_IN}


def draw_classes(count: int, shares: Mapping[str, float], seed: int) -> list[str]:
    """`count` class names, each drawn independently with probability proportional to its
    share (`parse_shares`' checks apply), from a generator seeded by `seed`."""
    checked = parse_shares(",".join(f"{name}:{share!r}" for name, share in shares.items()))
    names = list(checked)
    weights = np.asarray([checked[name] for name in names], dtype=np.float64)
    drawn = np.random.default_rng(seed).choice(len(names), size=count, p=weights / weights.sum())
    return [names[k] for k in drawn.tolist()]
