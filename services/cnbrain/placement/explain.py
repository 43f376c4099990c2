"""Turning a cycle's outcome for one request into a Decision with its explanation."""

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.placement.cycle import CycleState, Option, RowInsight
from cnbrain.placement.filtering import Filtered
from cnbrain.placement.framework import FilterRejection, SelectionPolicy
from cnbrain.placement.terms import plugin_weights
from cnbrain.routing.router import Route
from cnbrain.routing.srv6 import SidPlan


@dataclass(frozen=True, slots=True, eq=False)
class CycleFacts:
    """What a cycle found: its state, what the filters said, and how selection applied
    (`first_tier[row]`: the selection policy's first tier had a feasible site for `row`)."""

    state: CycleState
    filtered: Filtered
    first_tier: npt.NDArray[np.bool_]
    selection: SelectionPolicy
    sids: SidPlan
    policy: str
    timings_ms: dict[str, float]


def build_decision(
    facts: CycleFacts, row: int, option: Option | None, reservation_id: str | None
) -> Decision:
    """The decision for request `row`: built as plain data and validated once. `option` is
    what the cycle chose for it (None: rejected); `reservation_id` what holds it, if any."""
    found = facts.filtered.rejections(row)
    feasible = int(np.count_nonzero(facts.filtered.feasible[row]))
    decision: dict[str, object] = {
        "request_id": facts.state.batch.requests[row].id,
        "policy": facts.policy,
        "explanation": _explanation(facts, row, option, found, feasible),
    }
    if option is None:
        decision["status"] = DecisionStatus.REJECTED
        decision["reason"] = _rejection_reason(facts, row, feasible, found)
    else:
        decision.update(_placement(facts, row, option), reservation_id=reservation_id)
    return Decision.model_validate(decision)


def _explanation(
    facts: CycleFacts,
    row: int,
    option: Option | None,
    rejections: list[FilterRejection],
    feasible: int,
) -> dict[str, object]:
    """The explanation of request `row`'s decision, as plain data: how many sites were
    feasible (`feasible`) and why the others were not, how local-first selection applied,
    the candidates the strategy weighed, the solver's status, timings and notes."""
    state = facts.state
    sites = state.arrays.map.sites
    insight = state.insights.get(row)
    return {
        "sites_total": state.arrays.n_sites,
        "sites_feasible": feasible,
        "rejections": [
            {
                "plugin": r.plugin,
                "code": r.code.value,
                "reason": r.reason,
                "message": r.message,
                "sites": r.sites,
            }
            for r in rejections
        ],
        "local_first": facts.selection.explain(state, row, bool(facts.first_tier[row]), option),
        "candidates": [
            {
                "site": sites[site].id,
                "score": score,
                "objective": obj,
            }
            for site, score, obj in (insight.candidates if insight else ())
        ],
        "solver_status": insight.solver_status if insight else "NOT_RUN",
        "optimal": insight.optimal if insight else True,
        "timings_ms": facts.timings_ms,
        "notes": _notes(facts, insight),
    }


def _notes(facts: CycleFacts, insight: RowInsight | None) -> list[str]:
    """What a reader of the explanation should know to read it right: that timings are the
    batch's, that the solver stopped at its time limit. (Whether anything was reserved is the
    caller's to say: a brain decides without the engine's ledger and reserves in its own.)"""
    notes: list[str] = []
    batch_size = len(facts.state.batch)
    if batch_size > 1:
        notes.append(f"timings are for the whole batch of {batch_size} requests")
    if (
        insight is not None
        and not insight.optimal
        and insight.solver_status not in ("SEQUENTIAL", "NO_OPTIONS")
    ):
        notes.append("the solver hit its time limit; this is its best feasible answer")
    return notes


def _placement(facts: CycleFacts, row: int, option: Option) -> dict[str, object]:
    """The fields of a placed decision but its reservation: the chosen site, the path to it
    and the outcome (metrics, the objective's terms and the request's weights)."""
    state = facts.state
    request = state.batch.requests[row]
    site = state.arrays.map.sites[option.site]
    names = state.term_names
    return {
        "status": DecisionStatus.PLACED,
        "site": site.id,
        "province": site.province,
        "site_kind": site.kind.value,
        "path": _path(facts, option.route, request.constraints.min_bandwidth_gbps),
        "outcome": {
            "cost_cny": round(option.cost_cny, 4),
            "energy_kwh": round(option.energy_kwh, 4),
            "carbon_kg": round(option.carbon_kg, 4),
            "latency_ms": round(option.route.latency_ms, 4),
            "site_utilisation": round(option.site_utilisation, 4),
            "max_link_utilisation": round(option.link_utilisation, 4),
            "terms": dict(zip(names, option.terms, strict=True)),
            "weights": dict(zip(names, plugin_weights(state)[row].tolist(), strict=True)),
            "objective": round(option.objective, 6),
        },
    }


def _path(facts: CycleFacts, route: Route, need_gbps: float) -> dict[str, object]:
    links = facts.state.arrays.map.links
    residual = facts.state.snapshot.residual_mbps
    segments = [
        {
            "kind": seg.kind.value,
            "owner": seg.owner,
            "latency_ms": round(seg.path.latency_ms, 4),
            "hops": [
                {
                    "link": links[link].id,
                    "from_node": a,
                    "to_node": b,
                    "layer": links[link].layer.value,
                    "latency_ms": links[link].latency_ms,
                    "residual_gbps": int(residual[link]) / 1000,
                }
                for (a, b), link in zip(
                    itertools.pairwise(seg.path.nodes), seg.path.links, strict=True
                )
            ],
        }
        for seg in route.segments
    ]
    return {
        "segments": segments,
        "latency_ms": round(route.latency_ms, 4),
        "bandwidth_gbps": need_gbps,
        "srv6_segment_list": facts.sids.segment_list(route),
    }


def _rejection_reason(
    facts: CycleFacts, row: int, feasible: int, rejections: list[FilterRejection]
) -> str:
    state = facts.state
    request = state.batch.requests[row]
    if feasible == 0:
        parts = [
            f"{r.reason} ({r.message + '; ' if r.message else ''}{r.sites} sites, {r.plugin})"
            for r in rejections
        ]
        return "no site meets the hard constraints: " + "; ".join(parts)
    insight = state.insights.get(row)
    if insight is not None and all(obj is None for _, _, obj in insight.candidates):
        bound = request.constraints.max_latency_ms
        return (
            f"no path to the {len(insight.candidates) or feasible} best candidate sites has "
            f"{request.constraints.min_bandwidth_gbps} Gbps free on every link"
            + (f" within {bound} ms" if bound else "")
            + ", or their capacity went to other requests of the batch"
        )
    return "the candidate sites' capacity went to other requests of the batch"
