"""The placement engine: one cycle per request or batch, over a consistent snapshot.

Steps: validate -> snapshot -> filter -> score -> select (the configured selection policy,
by default local-first: the local tier, then the national tier for requests the local tier
could not serve) -> reserve -> explain; the steps from filter on
are timed into each decision's explanation, and an unexpected error names its step.
"""

import uuid
from collections.abc import Sequence
from types import TracebackType

import numpy as np

from cnbrain.domain.decision import Decision
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.memory import InMemoryLedger, LedgerError
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.cycle import CycleState, Option, Timed
from cnbrain.placement.errors import PlacementError
from cnbrain.placement.explain import CycleFacts, build_decision
from cnbrain.placement.filtering import run_filters
from cnbrain.placement.framework import (
    BoolMatrix,
    FilterPlugin,
    ScorePlugin,
    SelectionPolicy,
    Strategy,
)
from cnbrain.placement.registry import (
    DEFAULT_STRATEGY,
    FILTERS,
    SCORES,
    SELECTIONS,
    STRATEGIES,
    EngineConfig,
)
from cnbrain.placement.scoring import PairScores
from cnbrain.placement.strategies.solver import top_n
from cnbrain.placement.terms import estimates
from cnbrain.routing.router import RouteSource, SegmentRouter
from cnbrain.routing.srv6 import SidPlan

RESERVE_ATTEMPTS = 3
"""Cycles a request may go through when the ledger changed under its reservation."""


class PlacementEngine:
    """Places requests on one map and keeps their reservations in a ledger.

    Contract: every request of a call gets exactly one Decision, in order. A placed decision
    with a reservation id holds exactly its compute and bandwidth in `ledger` until
    `release`. A bad request raises RequestError before anything is reserved.
    """

    def __init__(
        self,
        cmap: ComputeNetworkMap,
        *,
        config: EngineConfig | None = None,
        ledger: InMemoryLedger | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.map = cmap
        self.arrays = ledger.arrays if ledger else MapArrays.build(cmap)
        self.ledger = ledger or InMemoryLedger(self.arrays)
        self.router = SegmentRouter(self.arrays)
        self.sids = SidPlan(cmap)
        self._filters: list[FilterPlugin] = [FILTERS[name]() for name in self.config.filters]
        self._scores: list[ScorePlugin] = [SCORES[name]() for name in self.config.scores]
        if self.config.selection not in SELECTIONS:
            known = ", ".join(SELECTIONS)
            raise KeyError(f"unknown selection {self.config.selection!r}; known: {known}")
        self._selection: SelectionPolicy = SELECTIONS[self.config.selection]()
        self._strategies: dict[str, Strategy] = {}

    @property
    def score_plugins(self) -> tuple[ScorePlugin, ...]:
        """The enabled score plugins, in order: their weighted terms are the objective."""
        return tuple(self._scores)

    def strategy(self, name: str) -> Strategy:
        """The strategy registered as `name`; KeyError lists the known ones."""
        if name not in STRATEGIES:
            raise KeyError(f"unknown policy {name!r}; known: {', '.join(STRATEGIES)}")
        if name not in self._strategies:
            self._strategies[name] = STRATEGIES[name](self.config)
        return self._strategies[name]

    def place(
        self,
        request: PlacementRequest,
        *,
        policy: str = DEFAULT_STRATEGY,
        reserve: bool = True,
        snapshot: Snapshot | None = None,
        router: RouteSource | None = None,
    ) -> Decision:
        return self.place_batch(
            [request], policy=policy, reserve=reserve, snapshot=snapshot, router=router
        )[0]

    def place_batch(
        self,
        requests: Sequence[PlacementRequest],
        *,
        policy: str = DEFAULT_STRATEGY,
        reserve: bool = True,
        snapshot: Snapshot | None = None,
        router: RouteSource | None = None,
    ) -> list[Decision]:
        """Place `requests` jointly against shared capacity; with `reserve=False` nothing is
        reserved (a quote). With `snapshot`, decide on that view of free capacity instead of
        the ledger's; such a call cannot reserve (the caller reserves, see `reservation_for`).
        With `router`, routes come from it instead of the engine's own router."""
        strategy = self.strategy(policy)
        if snapshot is not None and reserve:
            raise ValueError("a decision on a given snapshot cannot reserve in the engine's ledger")
        if snapshot is not None and snapshot.arrays is not self.arrays:
            raise ValueError("the snapshot belongs to another map")
        if not requests:
            return []
        batch = RequestBatch.build(requests, self.arrays, self.config.weight_matrix)
        decisions: list[Decision | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        for attempt in range(RESERVE_ATTEMPTS):
            sub = (
                batch
                if attempt == 0
                else RequestBatch.build(
                    [requests[i] for i in pending], self.arrays, self.config.weight_matrix
                )
            )
            results, conflicts = self._cycle(
                sub,
                strategy,
                snapshot=snapshot or self.ledger.snapshot(),
                router=router or self.router,
                reserve=reserve,
                last=attempt == RESERVE_ATTEMPTS - 1,
            )
            for local, decision in results.items():
                decisions[pending[local]] = decision
            pending = [pending[local] for local in conflicts]
            if not pending:
                break
        return [d for d in decisions if d is not None]

    def rank_sites(
        self, request: PlacementRequest, *, snapshot: Snapshot, n: int
    ) -> tuple[list[tuple[int, float]], str]:
        """The `n` sites that pass every filter for `request` and fit its free capacity in
        `snapshot`, as (site index, weighted score), lowest score first; and, when there are
        none, why (each filter with the sites it rejected)."""
        return self.rank_sites_many([request], snapshot=snapshot, n=n)[0]

    def rank_sites_many(
        self, requests: Sequence[PlacementRequest], *, snapshot: Snapshot, n: int
    ) -> list[tuple[list[tuple[int, float]], str]]:
        """`rank_sites` of every request, in order, in one pass: one batch, each filter and
        score run once over all (request, site) pairs. Filters, scores and the capacity check
        look at one request's row only, so each answer is the one `rank_sites` gives for that
        request alone on the same snapshot."""
        if snapshot.arrays is not self.arrays:
            raise ValueError("the snapshot belongs to another map")
        if not requests:
            return []
        batch = RequestBatch.build(list(requests), self.arrays, self.config.weight_matrix)
        state = self._state(batch, snapshot, self.router)
        filtered = run_filters(self._filters, state, explain=False)
        rejected = filtered.counts
        scores = self._score(state, filtered.feasible)
        starts = scores.row_start
        rows = np.repeat(np.arange(len(batch), dtype=np.int64), np.diff(starts))
        fits = state.fits(rows, scores.sites)
        answers: list[tuple[list[tuple[int, float]], str]] = []
        for row in range(len(batch)):
            lo, hi = int(starts[row]), int(starts[row + 1])
            keep = fits[lo:hi]
            sites, values = top_n(scores.sites[lo:hi][keep], scores.values[lo:hi][keep], n)
            ranked = list(zip(sites.tolist(), values.tolist(), strict=True))
            if ranked:
                answers.append((ranked, ""))
                continue
            reasons = [
                f"{plugin.name} rejected {int(rejected[i, row])} sites"
                for i, plugin in enumerate(self._filters)
                if rejected[i, row] > 0
            ]
            answers.append(([], "; ".join(reasons) or "no site has the free capacity"))
        return answers

    def release(self, reservation_id: str) -> None:
        """Give back everything the reservation holds; LedgerError if it is not held."""
        self.ledger.release(reservation_id)

    def reservation_for(self, request: PlacementRequest, decision: Decision) -> Reservation:
        """The reservation (new id) that holds what a placed `decision` for `request` needs:
        its compute on the site and its bandwidth on every link of its path."""
        if decision.site is None or decision.path is None:
            raise ValueError(f"decision for {decision.request_id!r} places nothing")
        row = RequestBatch.build([request], self.arrays, self.config.weight_matrix)
        link_ids = [hop.link for segment in decision.path.segments for hop in segment.hops]
        return _reservation(
            request_id=request.id,
            batch=row,
            row=0,
            site=self.map.site_index[decision.site],
            links=tuple(self.arrays.link_index[link] for link in link_ids),
        )

    def _cycle(
        self,
        batch: RequestBatch,
        strategy: Strategy,
        *,
        snapshot: Snapshot,
        router: RouteSource,
        reserve: bool,
        last: bool,
    ) -> tuple[dict[int, Decision], list[int]]:
        state = self._state(batch, snapshot, router)
        with _step(state, "filter"):
            filtered = run_filters(self._filters, state)
        feasible = filtered.feasible
        with _step(state, "score"):
            state.scores = self._score(state, feasible)
        with _step(state, "select"):
            chosen, first_tier = self._selection.select(state, strategy, feasible)
        reservations: dict[int, str] = {}
        conflicts: list[int] = []
        if reserve:
            with _step(state, "reserve"):
                for row, option in sorted(chosen.items()):
                    try:
                        reservations[row] = self._reserve(batch.requests[row], option, state)
                    except LedgerError:
                        if not last:
                            conflicts.append(row)
                        chosen.pop(row)
        facts = CycleFacts(
            state=state,
            filtered=filtered,
            first_tier=first_tier,
            selection=self._selection,
            sids=self.sids,
            policy=strategy.name,
            timings_ms={step: round(ms, 3) for step, ms in state.timings_ms.items()},
        )
        with _step(state, "explain"):
            decisions = {
                row: build_decision(facts, row, chosen.get(row), reservations.get(row))
                for row in range(len(batch))
                if row not in conflicts
            }
        return decisions, conflicts

    def _state(self, batch: RequestBatch, snapshot: Snapshot, router: RouteSource) -> CycleState:
        return CycleState(
            batch=batch,
            snapshot=snapshot,
            router=router,
            k_paths=self.config.k_paths,
            score_plugins=self._scores,
        )

    def _score(self, state: CycleState, feasible: BoolMatrix) -> PairScores:
        """Weighted score of every feasible (request, site) pair; inf elsewhere."""
        rows, sites = np.nonzero(feasible)
        return PairScores.of(len(state.batch), rows, sites, estimates(state, rows, sites))

    def _reserve(self, request: PlacementRequest, option: Option, state: CycleState) -> str:
        reservation = _reservation(
            request_id=request.id,
            batch=state.batch,
            row=option.row,
            site=option.site,
            links=option.route.links,
        )
        self.ledger.reserve(reservation)
        return reservation.id


def _reservation(
    *, request_id: str, batch: RequestBatch, row: int, site: int, links: tuple[int, ...]
) -> Reservation:
    need = int(batch.need_mbps[row])
    return Reservation(
        id=f"rsv-{uuid.uuid4().hex[:16]}",
        request_id=request_id,
        compute=ComputeClaim(
            site=site,
            cpu_m=int(batch.cpu_m[row]),
            mem_mib=int(batch.mem_mib[row]),
            storage_gib=int(batch.storage_gib[row]),
            acc_column=int(batch.acc_column[row]) if batch.acc_milli[row] else -1,
            acc_milli=int(batch.acc_milli[row]),
            gang=batch.gangs[row],
        ),
        links=links if need > 0 else (),
        mbps=need,
    )


def _step(state: CycleState, name: str) -> "_Step":
    """Times a step into the cycle's timings and names it in any unexpected error."""
    return _Step(state.timings_ms, name)


class _Step(Timed):
    __slots__ = ()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        super().__exit__(kind, exc, traceback)
        if isinstance(exc, Exception) and not isinstance(exc, PlacementError | LedgerError):
            raise PlacementError(self.step, exc) from exc
