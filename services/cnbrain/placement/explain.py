"""Turning a cycle's outcome for one request into a Decision with its explanation."""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.enums import OBJECTIVES
from cnbrain.placement.cycle import CycleState, Option
from cnbrain.placement.framework import BoolMatrix, FilterPlugin
from cnbrain.routing.router import Route
from cnbrain.routing.srv6 import SidPlan

OBJECTIVE_NAMES = tuple(o.value for o in OBJECTIVES)


@dataclass(frozen=True, slots=True, eq=False)
class CycleFacts:
    state: CycleState
    feasible: BoolMatrix
    rejections: np.ndarray
    local_tier: np.ndarray
    filters: Sequence[FilterPlugin]
    sids: SidPlan
    policy: str
    reserved: bool
    timings_ms: dict[str, float]


def build_decision(
    facts: CycleFacts, row: int, option: Option | None, reservation_id: str | None
) -> Decision:
    """The decision for request `row`: built as plain data and validated once."""
    state = facts.state
    request = state.batch.requests[row]
    cmap = state.arrays.map
    rejections: list[dict[str, object]] = [
        {
            "plugin": f.name,
            "code": f.code.value,
            "reason": f.reason,
            "sites": int(facts.rejections[i, row]),
        }
        for i, f in enumerate(facts.filters)
        if facts.rejections[i, row] > 0
    ]
    insight = state.insights.get(row)
    feasible = int(np.count_nonzero(facts.feasible[row]))
    notes: list[str] = []
    if len(state.batch) > 1:
        notes.append(f"timings are for the whole batch of {len(state.batch)} requests")
    if (
        insight is not None
        and not insight.optimal
        and insight.solver_status not in ("SEQUENTIAL", "NO_OPTIONS")
    ):
        notes.append("the solver hit its time limit; this is its best feasible answer")
    if option is not None and not facts.reserved:
        notes.append("quote only: nothing was reserved")
    explanation = {
        "sites_total": state.arrays.n_sites,
        "sites_feasible": feasible,
        "rejections": rejections,
        "local_first": _local_first(facts, row, option),
        "candidates": [
            {
                "site": cmap.sites[site].id,
                "score": score,
                "objective": obj,
            }
            for site, score, obj in (insight.candidates if insight else ())
        ],
        "solver_status": insight.solver_status if insight else "NOT_RUN",
        "optimal": insight.optimal if insight else True,
        "timings_ms": facts.timings_ms,
        "notes": notes,
    }
    decision: dict[str, object] = {
        "request_id": request.id,
        "policy": facts.policy,
        "explanation": explanation,
    }
    if option is None:
        decision["status"] = DecisionStatus.REJECTED
        decision["reason"] = _rejection_reason(facts, row, feasible, rejections)
        return Decision.model_validate(decision)
    site = cmap.sites[option.site]
    decision.update(
        status=DecisionStatus.PLACED,
        site=site.id,
        province=site.province,
        site_kind=site.kind.value,
        path=_path(facts, option.route, request.constraints.min_bandwidth_gbps),
        outcome={
            "cost_cny": round(option.cost_cny, 4),
            "energy_kwh": round(option.energy_kwh, 4),
            "carbon_kg": round(option.carbon_kg, 4),
            "latency_ms": round(option.route.latency_ms, 4),
            "site_utilisation": round(option.site_utilisation, 4),
            "max_link_utilisation": round(option.link_utilisation, 4),
            "terms": dict(zip(OBJECTIVE_NAMES, option.terms, strict=True)),
            "weights": dict(zip(OBJECTIVE_NAMES, state.batch.weights[row].tolist(), strict=True)),
            "objective": round(option.objective, 6),
        },
        reservation_id=reservation_id,
    )
    return Decision.model_validate(decision)


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


def _local_first(facts: CycleFacts, row: int, option: Option | None) -> str:
    request = facts.state.batch.requests[row]
    province = request.source_province
    if request.national_optimum:
        return "national optimum requested: every province was searched"
    if not facts.local_tier[row]:
        return f"no site in {province} meets the constraints: national hubs were searched"
    if option is not None and facts.state.arrays.map.sites[option.site].province == province:
        return f"a site in {province} fits: placed locally"
    return (
        f"sites in {province} meet the constraints but none could be served: "
        "national hubs were searched"
    )


def _rejection_reason(
    facts: CycleFacts, row: int, feasible: int, rejections: list[dict[str, object]]
) -> str:
    state = facts.state
    request = state.batch.requests[row]
    if feasible == 0:
        parts = [f"{r['reason']} ({r['sites']} sites, {r['plugin']})" for r in rejections]
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
