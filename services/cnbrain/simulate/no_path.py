"""Remembering, for one ledger state, which jobs the engine could not route, so that jobs that
cannot do better are not sent to it again.

When a job alone is rejected although some eligible site had the capacity for it, no route
to any site the strategy considered had its bandwidth free within its latency bound. Route
existence is monotone: asking more bandwidth, a tighter bound, or fewer sites can only lose
routes. So at the same ledger version, a job B from the same access node with
need(B) >= need(A), bound(B) <= bound(A) and fitting sites(B) within fitting sites(A) would
be rejected too, and is not asked.

This holds when the strategy considered every fitting site of A: the baselines walk all of
them, `exact` solves over all, and `topn-cpsat` takes the best `top_n` of them, so for it an
entry is kept only when A had at most `top_n` fitting sites. A strategy not named here gets
no memo (every job is asked).
"""

from dataclasses import dataclass

import numpy as np

from cnbrain.placement.registry import EngineConfig
from cnbrain.simulate.eligibility import BoolArray, Eligibility

_EVERY_FITTING_SITE = frozenset(
    {"exact", "greedy", "first-fit", "least-allocated", "most-allocated", "random-feasible"}
)

UNLIMITED = 1 << 30


def site_limit(policy: str, config: EngineConfig) -> int:
    """Most fitting sites a rejected job may have had for its rejection to be remembered."""
    if policy in _EVERY_FITTING_SITE:
        return UNLIMITED
    if policy == "topn-cpsat":
        return config.top_n
    return 0


@dataclass(frozen=True, slots=True)
class _Entry:
    need_mbps: int
    bound_ms: float
    sites: BoolArray
    reason: str


class NoPathMemo:
    """Rejections for lack of a route, valid while the ledger stays at one version."""

    def __init__(self, eligibility: Eligibility, bounds_ms: list[float], limit: int) -> None:
        self._eligibility = eligibility
        self._bounds = bounds_ms
        self._limit = limit
        self._version = -1
        self._entries: dict[int, list[_Entry]] = {}

    def _at(self, version: int) -> None:
        if version != self._version:
            self._version = version
            self._entries.clear()

    def record(self, version: int, row: int, sites: BoolArray, reason: str) -> None:
        """Job `row`, alone, was rejected at ledger `version` with these fitting `sites`."""
        if int(np.count_nonzero(sites)) > self._limit:
            return
        self._at(version)
        e = self._eligibility
        self._entries.setdefault(int(e.access[row]), []).append(
            _Entry(int(e.need_mbps[row]), self._bounds[row], sites, reason)
        )

    def rejection(self, version: int, row: int, sites: BoolArray) -> str | None:
        """The remembered reason job `row` would be rejected at `version`, or None."""
        self._at(version)
        e = self._eligibility
        need, bound = int(e.need_mbps[row]), self._bounds[row]
        for entry in self._entries.get(int(e.access[row]), ()):
            if (
                need >= entry.need_mbps
                and bound <= entry.bound_ms
                and not (sites & ~entry.sites).any()
            ):
                return entry.reason
        return None
